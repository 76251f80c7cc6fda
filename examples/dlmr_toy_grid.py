"""DLMR on a toy "dilution" grid world: late-query accuracy, routing, injected tokens.

[R] DLMR is reconstructed (no code, no paper body): see ``jaxkit.memory``.

World (spec sequence.md §4.5, exact answers). An "image" of 4x4 cells with digits
0-9 enters as 16 visual embeddings from a frozen random linear "vision encoder"
(one-hot value ⊕ one-hot cell). The output stream has 8 steps: filler ``F n = n+1``
(no memory needed), visual queries ``Q_c = v`` (value of cell c) and reasoning
queries ``R_j = a`` (the answer this stream gave at its j-th visual query: an
intermediate conclusion). ``=`` is the delimiter. The frozen base is a 2-block
D=64 causal LM with a **sliding attention window of 12**: a deliberate, labelled
stand-in for attention dilution (the tiny model cannot show O(L_v / n_t) dilution
at this length). A query is *late* when its evidence (the cell's visual token, or
the referred answer) lies outside the window: the base cannot see it.

DLMR (layer 0, banks 2x16, budgets {1, 2, 4}, the tiny injector with one cross block (with
two, stage 2's CE stayed at the base's level, 2.13 -> 2.11, seed 0), a router MLP):
stage 1 is supervised toward the evidence: its alignment target is the query's oracle
memory (below: the injection point's state plus a learned vector of the answer) and
its evidence term (``stage1_loss(evidence=...)``, [R] a jaxkit addition) teaches the
injector to read the slot holding the evidence (the queried cell's image token, the
referred answer); without that term the injector's read stays uniform and stage 2's
CE never leaves the base's level (2.14 -> 2.12 before this change). Stage 2 trains banks
and injector by CE on answers with the type's bank and a random k, first on late queries,
then (``MIX``, at a lower rate decaying to a tenth) on early ones too: trained on late
queries only, the memory lowered the early queries the base answers (reasoning bank,
teacher-forced, seed 0: early reasoning 0.93 -> 0.77), and those outnumber the late ones;
mixed from the start, stage 2 did not learn (CE 1.19 -> 1.11, late visual 0.30). Stage 2's
rate warms up to 1e-2 and decays (``LR2``): at a constant 1e-2 seed 2 stalled. Stage 3
trains the router
(:func:`train_router`): each toy query has one routing decision, so every action is scored
(:func:`score_routes`, the teacher-forced memory forward) and the router maximises the exact
expected reward (``stage3_loss`` with ``actions=None``; sampled GRPO, the wave-12 form, never
took the reasoning bank) on its per-feature standardised input (``Router.standardize``).
The reward (:func:`route_rewards`) is the spec's cost-aware one (``dlmr_reward``, minus
``LAMBDA_EFF`` x tokens / 4) on each route's *probability* of the right answer (its expected
correctness; with 0/1 correctness a query the base answers by luck rewards the null as much
as one it is sure of), minus ``WRONG_BANK`` for the other type's bank ([R] in the spirit of
VisMem's invocation penalties). No late/early label enters it (wave 14 also took 0.5 off the
null on late queries, a label the router cannot see at inference). The router sees only the
base's last-block state at the ``=``. About half of the late reasoning queries have an
earlier copy of the same query (and its answer) inside the window, which the base answers
(0.90 teacher-forced, seed 0): there the null is cheap and nearly as right as the memory,
yet the late-routing metric below counts it wrong.

**The routing metric (the lead's decision, issue #17).** Under the spec's cost-aware
reward (Eq. 12) the null is the right route for a query the base already answers, so
type-correct routing is judged where memory is needed: on late queries (visual -> the
visual bank, reasoning -> the reasoning bank; the null or the other bank counts as wrong),
``type_correct_routing``. The all-query figure (``type_correct_routing_all``), the full
confusion matrix and the null rate on filler (>= 0.9) stay reported. Targets
(``spec_targets_met``): late-query accuracy >= 0.9, late type-correct routing >= 0.9,
filler null rate >= 0.9, on seeds 0/1/2 in full mode.

Evaluation (held-out
streams): each query is a prompt ending at its query token; greedy generation of
``=`` and the answer with the router deciding at the ``=``. Reported: late-query
accuracy of base vs DLMR per type, route confusion (type -> null / visual /
reasoning), memory tokens injected per stream for DLMR vs a fixed k = 4 at every
eligible step (VisMem-like always-invoke: the learned memory really injected), and
the frozen-injector and shared-bank ablations (full mode only).

``ok``: what genuinely works, measured. (1) The interface: an oracle memory that
holds the evidence (the injector's anchor ``now`` plus a learned vector per answer
digit) lets the frozen base answer late queries (late accuracy >= base + 0.3).
(2) The learned memory, injected at every eligible step (k = 4), lifts late-query
accuracy by >= 0.1 over the base (``learned_memory_late``). ``memory_helps`` (DLMR
with its router >= base + 0.05), ``spec_targets_met`` and ``adaptive_beats_fixed``
are reported only. Quick mode trains nothing but the oracle memory:
it loads the adapter this full training made (``python examples/dlmr_toy_grid.py
--save-adapter jaxkit/_fixtures/dlmr_grid/adapter.safetensors``, seed 0; :func:`load_adapter`)
and evaluates it on fewer held-out streams; the training itself is tested in
``tests/memory``. The base model is the fixture ``dlmr_grid`` (made by
``scripts/train_dlmr_fixture.py``); full mode (``--train-base-steps``) can retrain it.
"""

import argparse
import functools
import importlib.resources
import json
import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxkit import io, memory, nn

V_DIG, Q0, R0, F, EQ, PAD = 10, 10, 26, 30, 31, 32
V = 33
N_CELL, N_STEP, N_REF = 16, 8, 4
T = N_CELL + 4 * N_STEP  # 48 positions: image then stream
WINDOW = 12
CFG = nn.TransformerConfig(
    vocab_size=V,
    d_model=64,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    head_dim=16,
    mlp_dim=128,
    sliding_window=WINDOW,
    family="qwen2",  # the HF layout of a sliding window (no q/k/v biases here)
)
TYPES = ("filler", "visual", "reasoning")


def vision_encoder(seed=1234):
    """The frozen random linear encoder: ``[10 + 16] -> D``."""
    return np.random.default_rng(seed).normal(0, 0.5, (V_DIG + N_CELL, CFG.d_model))


def sample_streams(rng, n):
    """``(cells [n,16], stream tokens [n, T-16], queries)``; a query is
    ``(row, type, eq_pos, answer, evidence_pos)`` with positions in the full sequence."""
    cells = rng.integers(0, 10, (n, N_CELL))
    toks = np.full((n, T - N_CELL), PAD, np.int32)
    queries = []
    for b in range(n):
        s, answers, ans_pos = [], [], []
        for _ in range(N_STEP):
            u = rng.random()
            if u < 0.4:
                c = int(rng.integers(0, N_CELL))
                s += [Q0 + c, EQ]
                queries.append((b, 1, N_CELL + len(s) - 1, int(cells[b, c]), c))
                s.append(int(cells[b, c]))
                answers.append(int(cells[b, c]))
                ans_pos.append(N_CELL + len(s) - 1)
            elif u < 0.7 and answers:
                j = int(rng.integers(0, min(len(answers), N_REF)))
                s += [R0 + j, EQ]
                queries.append((b, 2, N_CELL + len(s) - 1, answers[j], ans_pos[j]))
                s.append(answers[j])
            else:
                m = int(rng.integers(0, 10))
                s += [F, m, EQ]
                queries.append((b, 0, N_CELL + len(s) - 1, (m + 1) % 10, -1))
                s.append((m + 1) % 10)
        toks[b, : len(s)] = s
    return cells, toks, np.asarray(queries, np.int64).reshape(-1, 5)


def embeds(params, enc, cells, toks):
    """``[image (16) ; embed(stream)]`` as ``[n, T, D]`` f32."""
    one = np.concatenate(
        [np.eye(V_DIG)[cells], np.broadcast_to(np.eye(N_CELL), (len(cells), N_CELL, N_CELL))], -1
    )
    img = jnp.asarray(one @ enc, jnp.float32)
    return jnp.concatenate([img, nn.embed(params, CFG, jnp.asarray(toks))], axis=1)


def is_late(q):
    """Evidence outside the window of the answer's prediction (at the ``=``)."""
    return (q[:, 1] > 0) & (q[:, 2] - q[:, 4] >= WINDOW)


# ----------------------------------------------------------------------------- the base


def train_base(rng, steps, key, enc):
    params = nn.init_params(CFG, key=key)
    tx = optax.adam(3e-3)
    st = tx.init(params)

    def loss(p, img, toks):
        x = jnp.concatenate([img, nn.embed(p, CFG, toks[:, :-1])], axis=1)
        lg = nn.apply(p, CFG, inputs_embeds=x).logits[:, N_CELL - 1 :].astype(jnp.float32)
        nll = -jnp.take_along_axis(jax.nn.log_softmax(lg), toks[:, :, None], -1)[..., 0]
        w = (toks != PAD).astype(jnp.float32)
        return jnp.sum(nll * w) / jnp.sum(w)

    @jax.jit
    def step(p, st, img, toks):
        lv, g = jax.value_and_grad(loss)(p, img, toks)
        u, st = tx.update(g, st, p)
        return optax.apply_updates(p, u), st, lv

    for _ in range(steps):
        cells, toks, _ = sample_streams(rng, 64)
        one = np.concatenate(
            [np.eye(V_DIG)[cells], np.broadcast_to(np.eye(N_CELL), (64, N_CELL, N_CELL))], -1
        )
        params, st, lv = step(params, st, jnp.asarray(one @ enc, jnp.float32), jnp.asarray(toks))
    return params, float(lv)


def load_base(enc, rng, *, train_steps=None, key=None):
    if train_steps:
        return train_base(rng, train_steps, key, enc)[0]
    fx = io.load_fixture("dlmr_grid")
    if (fx.cfg.d_model, fx.cfg.sliding_window, fx.cfg.vocab_size) != (CFG.d_model, WINDOW, V):
        raise ValueError("the dlmr_grid fixture's config differs from this example's CFG")
    return fx.params


# ----------------------------------------------------------------------------- DLMR training


def mcfg(**kw):
    base = dict(
        layer=0,
        bank_sizes=(16, 16),
        budgets=(1, 2, 4),
        n_max=8,
        delimiter_ids=(EQ,),
        injector_dim=64,
        injector_heads=4,
        injector_layers=1,
        recency=64,
        router_hidden=64,
    )
    return memory.DLMRConfig(**{**base, **kw})


# stage-1 / stage-2 / stage-3 (one decision, every route scored) steps of the full training
FULL_STEPS = (300, 1000, 400)
# stage 2's learning rate (Adam): 100 warm-up steps to 1e-2, then a cosine decay to 1e-3. At a
# constant 1e-2 seed 2's stage 2 stalled (CE 1.91 -> 1.07; seed 0 reached 0.36); at a constant
# 3e-3 it learned, but seed 0's router then collapsed to the null (wave 12). With the schedule
# seed 2 goes 1.29 -> 0.33.
LR2 = optax.warmup_cosine_decay_schedule(1e-3, 1e-2, 100, FULL_STEPS[1], 1e-3)
# stage 2's last phase: early queries too (p_late, steps, lr, final lr: a cosine decay); see
# train_dlmr. At a constant 3e-3 the phase ended on a noisy iterate (last 100 steps' CE 0.32, seed
# 0); annealed, 0.23, and late queries with the right bank on held-out training-distribution
# streams (not the evaluation streams) went 0.88 -> 0.91 visual, 0.92 -> 0.94 reasoning.
MIX = (0.5, 500, 3e-3, 3e-4)
ADAPTER = "adapter.safetensors"  # the shipped adapter, in the ``dlmr_grid`` fixture folder


def dump_adapter(path, ap, info):
    """Save ``ap``'s arrays (named by their key paths) to ``path``, ``info`` to its task.json."""
    flat = jax.tree_util.tree_flatten_with_path(ap)[0]
    out = io.save_tensors({jax.tree_util.keystr(k): v for k, v in flat}, path)
    meta = out.parent / "task.json"  # the fixture folder's metadata file
    task = json.loads(meta.read_text()) if meta.exists() else {}
    meta.write_text(json.dumps({**task, "adapter": info}, indent=2) + "\n")


def load_adapter(cfg, path=None):
    """``(adapter, info)``: the trained adapter shipped with the ``dlmr_grid`` fixture.

    Made by ``python examples/dlmr_toy_grid.py --save-adapter PATH`` (the full
    training, seed 0); its structure is ``memory.init_dlmr(CFG, cfg)``'s, its arrays
    are named by their key paths and read with :func:`jaxkit.io.load_fixture_tensors`."""
    got = io.load_fixture_tensors("dlmr_grid", ADAPTER) if path is None else io.load_tensors(path)
    with importlib.resources.as_file(
        importlib.resources.files("jaxkit._fixtures").joinpath("dlmr_grid", "task.json")
    ) as f:
        info = json.loads(f.read_text())["adapter"]
    # shapes and dtypes only (no fresh arrays: their eager ops cost seconds in quick mode)
    like = jax.eval_shape(lambda: memory.init_dlmr(CFG, cfg, key=jax.random.key(0)))
    flat, tree = jax.tree_util.tree_flatten_with_path(like)
    names = [jax.tree_util.keystr(k) for k, _ in flat]
    if sorted(names) != sorted(got):
        raise ValueError("the shipped adapter does not fit this config (its array names differ)")
    for n, (_, b) in zip(names, flat, strict=True):
        if got[n].shape != b.shape:
            raise ValueError(
                f"the shipped adapter does not fit this config: {n} {got[n].shape} vs {b.shape}"
            )
    return jax.tree.unflatten(
        tree, [jnp.asarray(got[n], b.dtype) for n, (_, b) in zip(names, flat, strict=True)]
    ), info


def query_batch(params, enc, rng, n, *, types=(1, 2), p_late=None):
    """One query per stream (of the given types) with its teacher-forced sequence.

    ``p_late=None``: a late query whenever the stream has one (where memory matters);
    a number: a late one with that probability when the stream has both kinds."""
    cells, toks, q = sample_streams(rng, n)
    pick = []
    for b in range(n):
        mine = q[(q[:, 0] == b) & np.isin(q[:, 1], types)]
        late, early = mine[is_late(mine)], mine[~is_late(mine)]
        if p_late is None or not len(early):
            pool = late if len(late) else mine
        else:
            pool = late if len(late) and rng.random() < p_late else early
        pick.append(pool[rng.integers(0, len(pool))] if len(pool) else q[q[:, 0] == b][0])
    return cells, toks, np.asarray(pick)


def train_dlmr(params, enc, cfg, rng, key, steps, w_oracle, *, train_injector=True, mix=MIX):
    """Stages 1-2. Both draw late queries (where memory matters); stage 2 then goes on
    (``mix``: ``(p_late, steps, lr, final lr)``, a cosine decay) on early queries too,
    so that the memory stops hurting the queries the base already answers: trained on
    late ones only, the reasoning bank lifted late reasoning 0.60 -> 0.96 but dropped
    early reasoning 0.93 -> 0.77 (teacher-forced, seed 0), and early ones are 2.5x as
    many."""
    ap = memory.init_dlmr(CFG, cfg, key=key)
    bsz = 32
    rows = np.arange(bsz)
    budgets = np.asarray(cfg.budgets)
    nb = len(budgets)
    ce = []
    lr_mix = optax.cosine_decay_schedule(mix[2], mix[1], mix[3] / mix[2])
    phases = ((1, steps[0], 1e-2, None), (2, steps[1], LR2, None), (2, mix[1], lr_mix, mix[0]))
    for stage, n_steps, lr, p_late in phases:
        tx = memory.dlmr_optimizer(stage, lr=lr, train_injector=train_injector)
        st = tx.init(ap)
        for _ in range(n_steps):
            cells, toks, q = query_batch(params, enc, rng, bsz, p_late=p_late)
            x = embeds(params, enc, cells, toks)
            ctx, _ = memory.context_states(params, CFG, cfg, x)
            at = jnp.asarray(q[:, 2] + 1, jnp.int32)
            kidx = rng.integers(0, nb, bsz)
            if stage == 1:
                # targets: the oracle memory of the query (its anchor + the answer's vector);
                # evidence: the slot holding the cell / the referred answer
                tgt = _oracle_mem(w_oracle, ctx, at, jnp.asarray(q[:, 3]), 1)[:, 0]
                tgt = jnp.stack([tgt, tgt], axis=1)
                role = (q[:, 1] == 2).astype(np.int64)
                valid = np.stack([q[:, 1] == 1, q[:, 1] == 2], 1)
                ev = np.zeros((bsz, 2, T), bool)
                ev[rows, role, np.clip(q[:, 4], 0, T - 1)] = q[:, 4] >= 0
                batch = (
                    ctx,
                    jnp.ones(ctx.shape[:2], bool),
                    at,
                    jnp.asarray(budgets[kidx], jnp.int32),
                    tgt,
                    jnp.asarray(valid),
                    jnp.asarray(ev),
                )
                ap, st, loss, _ = memory.dlmr_step(1, ap, st, batch, tx=tx, cfg=cfg)
            else:
                labels = np.full((bsz, T), -1, np.int32)
                labels[rows, q[:, 2]] = q[:, 3]
                bank = (q[:, 1] == 2).astype(np.int64)
                action = 1 + bank * nb + kidx
                batch = (x, jnp.asarray(labels), ctx, at, jnp.asarray(action, jnp.int32))
                ap, st, loss, _ = memory.dlmr_step(
                    2, ap, st, batch, tx=tx, cfg=cfg, lm_params=params, lm_cfg=CFG
                )
                ce.append(loss)
    ce = np.asarray(jax.device_get(ce), np.float64)
    m = max(len(ce) // 5, 1)
    return ap, (float(ce[:m].mean()), float(ce[-m:].mean()))


def _oracle_mem(w, ctx, at, ans, km):
    """``now + w[answer]`` in every memory slot: a memory that holds the evidence."""
    now = jnp.take_along_axis(ctx, (at - 1)[:, None, None], axis=1)
    return jnp.broadcast_to(now + w[ans][:, None, :], (ctx.shape[0], km, ctx.shape[2]))


def _oracle_logits(w, params, x, ctx, at, k, ans, cfg):
    mem = _oracle_mem(w, ctx, at, ans, cfg.k_max)
    lg = memory.memory_forward(params, CFG, cfg, x, mem, at, k)
    return jnp.take_along_axis(lg, (at + k - 1)[:, None, None], axis=1)[:, 0]


def _oracle_loss(w, params, x, ctx, at, k, ans, cfg):
    lg = _oracle_logits(w, params, x, ctx, at, k, ans, cfg).astype(jnp.float32)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(lg), ans[:, None], -1))


_ORACLE_TX = optax.adam(0.1)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _oracle_step(w, st, params, x, ctx, at, k, ans, *, cfg):
    lv, g = jax.value_and_grad(_oracle_loss)(w, params, x, ctx, at, k, ans, cfg)
    u, st = _ORACLE_TX.update(g, st, w)
    return optax.apply_updates(w, u), st, lv


def oracle_memory(params, enc, cfg, rng, steps):
    """The interface check: a memory that holds the evidence (``now`` + a learned vector
    per answer digit, the injector's anchor plus an oracle delta) fed through the
    frozen base. High late accuracy: the frozen base reads injected memory."""
    w = jnp.zeros((10, CFG.d_model), jnp.float32)
    st = _ORACLE_TX.init(w)
    budgets = np.asarray(cfg.budgets)
    for _ in range(steps):
        cells, toks, q = query_batch(params, enc, rng, 32)
        x = embeds(params, enc, cells, toks)
        ctx, _ = memory.context_states(params, CFG, cfg, x)
        k = jnp.asarray(budgets[rng.integers(0, len(budgets), 32)], jnp.int32)
        at, ans = jnp.asarray(q[:, 2] + 1, jnp.int32), jnp.asarray(q[:, 3], jnp.int32)
        w, st, _ = _oracle_step(w, st, params, x, ctx, at, k, ans, cfg=cfg)
    return w


def oracle_late_accuracy(w, params, enc, cfg, cells, toks, q):
    """Late-query accuracy of the oracle memory (teacher-forced up to the ``=``, k = 1;
    the first 32 late queries: the training batch's shapes, no new compile)."""
    sel = q[is_late(q)][:32]
    x = embeds(params, enc, cells, toks)[jnp.asarray(sel[:, 0])]
    ctx, _ = memory.context_states(params, CFG, cfg, x)
    at, ans = jnp.asarray(sel[:, 2] + 1, jnp.int32), jnp.asarray(sel[:, 3], jnp.int32)
    k = jnp.ones_like(at)
    lg = _oracle_logits(w, params, x, ctx, at, k, ans, cfg)
    return float(np.mean(np.asarray(jnp.argmax(lg, -1)) == sel[:, 3]))


def eval_prompts(params, enc, cells, toks, q):
    """Prompts ending at each query's query token (``=`` and the answer follow)."""
    x = np.asarray(embeds(params, enc, cells, toks))
    return jnp.asarray(x[q[:, 0]]), jnp.asarray(q[:, 2], jnp.int32)  # prompt_len = eq position


def run(params, ap, cfg, prompts, plen, key, router="greedy"):
    g = memory.dlmr_generate(
        params, CFG, ap, cfg, prompts, plen, key=key, max_new_tokens=2, router=router
    )
    return g


def score_routes(params, ap, cfg, enc, cells, toks, q, rows=32):
    """``(prob f32[n, A], h [n, D])``: every action's teacher-forced answer per query.

    Each toy query has one routing decision (at its ``=``), so every route can be
    scored: the action's memory is injected after the ``=`` by the uncached forward
    :func:`memory.memory_forward` (stage 2's forward; the null reads the base) and
    ``prob`` is the probability the model then gives the right answer (its expected
    correctness when sampled). ``h``: the frozen base's last-block state at the ``=``,
    what :func:`memory.dlmr_generate` feeds the router."""
    bank_t, k_t = memory.action_table(cfg)
    x_all = embeds(params, enc, cells, toks)
    out_p, out_h = [], []
    for s in range(0, len(q), rows):  # batches of ``rows`` (padded): one compiled shape
        qq = q[s : s + rows]
        n = len(qq)
        qq = np.concatenate([qq, np.repeat(qq[-1:], rows - n, 0)])
        x = x_all[jnp.asarray(qq[:, 0])]
        ctx, h_last = memory.context_states(params, CFG, cfg, x)
        eq = jnp.asarray(qq[:, 2], jnp.int32)
        at = eq + 1
        valid = jnp.ones(ctx.shape[:2], bool)
        ps = []
        for a in range(len(k_t)):
            bank, k = jnp.full((rows,), bank_t[a]), jnp.full((rows,), k_t[a])
            mem, _ = memory.inject(ap, cfg, ctx, valid, at, bank, k)
            lg = memory.memory_forward(params, CFG, cfg, x, mem, at, k)
            lg = jnp.take_along_axis(lg, (at + k - 1)[:, None, None], axis=1)[:, 0]
            pr = jax.nn.softmax(lg.astype(jnp.float32), axis=-1)
            ps.append(np.asarray(pr)[np.arange(n), qq[:n, 3]])
        out_p.append(np.stack(ps, 1))
        h = jnp.take_along_axis(h_last, eq[:, None, None], axis=1)[:, 0]
        out_h.append(np.asarray(h, np.float32)[:n])
    return np.concatenate(out_p), np.concatenate(out_h)


# stage 3's reward: the spec's cost-aware one on each route's probability of the right answer,
# minus a penalty for the other type's bank; no late/early label enters it
LAMBDA_EFF, WRONG_BANK = 0.1, 0.2


def route_rewards(prob, q, cfg, *, lambda_eff=LAMBDA_EFF, wrong_bank=WRONG_BANK):
    """``[n, A]`` rewards of every action: :func:`memory.dlmr_reward` (budget 4 tokens, 2
    generated) with ``R_task`` the route's probability of the right answer (``prob``, its
    expected correctness), minus ``wrong_bank`` for the other type's bank."""
    bank_t, k_t = (np.asarray(a) for a in memory.action_table(cfg))
    r = np.asarray(memory.dlmr_reward(prob, k_t[None], 2, budget=4.0, lambda_eff=lambda_eff))
    inj, t = k_t[None] > 0, q[:, 1:2]
    wrong = inj & (((t == 1) & (bank_t[None] == 1)) | ((t == 2) & (bank_t[None] == 0)))
    return (r - wrong_bank * wrong).astype(np.float32)


def train_router(params, ap, cfg, enc, rng, steps, *, n_streams=300, rows=64, lr=1e-2):
    """Stage 3 on one-decision rollouts with every route scored: the exact expected reward.

    The queries of ``n_streams`` training streams (filler included: the null is right
    there) are scored under every action (:func:`score_routes`); the router's per-feature
    standardisation is fitted to their states (:meth:`memory.Router.standardize`), then
    ``steps`` stage-3 steps (:func:`memory.dlmr_step` with ``actions=None``,
    :func:`memory.stage3_loss`) maximise ``sum_a pi(a | h) R_a`` on minibatches of
    ``rows`` (:func:`route_rewards`; KL 0.02 to the fresh router). [R] a jaxkit shortcut
    for single-decision tasks: sampled GRPO (the wave-12 form) never took the reasoning
    bank; the exact expectation has no sampling noise."""
    cells, toks, q = sample_streams(rng, n_streams)
    prob, h = score_routes(params, ap, cfg, enc, cells, toks, q)
    rew = route_rewards(prob, q, cfg)
    ap = ap._replace(router=ap.router.standardize(jnp.asarray(h)))
    tx = memory.dlmr_optimizer(3, lr=lr)
    st = tx.init(ap)
    ref = ap.router
    elig = jnp.ones((rows, 1), bool)
    for _ in range(steps):
        i = rng.integers(0, len(q), rows)
        batch = (jnp.asarray(h[i])[:, None], None, elig, jnp.asarray(rew[i]))
        ap, st, _, _ = memory.dlmr_step(3, ap, st, batch, tx=tx, cfg=cfg, ref_router=ref)
    return ap


def null_router(ap):
    """A router whose arg-max is always the null: DLMR's program, the base model's output."""
    return eqx.tree_at(lambda p: p.router.l2.b, ap, ap.router.l2.b.at[0].set(1e4))


class FixedKRouter(eqx.Module):
    """The fixed-k ablation's router: the trained router picks the bank (its probability
    summed over the bank's budgets), every eligible step injects ``k`` tokens. ``on``
    (a traced bool) false: the trained router's own logits, so that DLMR, the base (its
    null router) and fixed k share one compiled generation (a second compile was ~30%
    of quick mode's CPU time)."""

    inner: memory.Router
    on: jax.Array
    bank: tuple = eqx.field(static=True)
    k: tuple = eqx.field(static=True)
    fixed: int = eqx.field(static=True)

    def __call__(self, h):
        lg = self.inner(h)
        bank, k = np.asarray(self.bank), np.asarray(self.k)
        pref = [jax.nn.logsumexp(lg[..., (bank == s) & (k > 0)], axis=-1) for s in (0, 1)]
        out = jnp.full(lg.shape, -1e4, lg.dtype)
        for s in (0, 1):
            j = int(np.flatnonzero((bank == s) & (k == self.fixed))[0])
            out = out.at[..., j].set(pref[s])
        return jnp.where(self.on, out, lg)


def fixed_k_router(ap, cfg, k, *, on=True):
    """A router that injects ``k`` tokens at every eligible step, in the bank the trained
    router prefers (``on=False``: the trained router itself; :class:`FixedKRouter`)."""
    bank_t, k_t = (tuple(int(x) for x in a) for a in memory.action_table(cfg))
    return ap._replace(router=FixedKRouter(ap.router, jnp.asarray(on), bank_t, k_t, k))


def evaluate(params, ap, cfg, prompts, plen, q, key):
    if not isinstance(ap.router, FixedKRouter):  # one compiled generation for every row
        ap = fixed_k_router(ap, cfg, 4, on=False)
    g = run(params, ap, cfg, prompts, plen, key)
    tok = np.asarray(g.tokens)
    ok = (tok[:, 0] == EQ) & (tok[:, 1] == q[:, 3])
    act = np.asarray(g.actions[:, 1])
    bank_t, _ = (np.asarray(a) for a in memory.action_table(cfg))
    route = np.where(act == 0, 0, 1 + bank_t[act])  # 0 null, 1 visual, 2 reasoning
    return ok, route, np.asarray(g.injected)


def summarize(ok, route, injected, q, n_streams):
    late = is_late(q)
    acc = {
        TYPES[t]: float(ok[late & (q[:, 1] == t)].mean())
        for t in (1, 2)
        if (late & (q[:, 1] == t)).any()
    }
    acc["late"] = float(ok[late].mean())
    acc["early"] = float(ok[~late & (q[:, 1] > 0)].mean())
    acc["filler"] = float(ok[q[:, 1] == 0].mean())
    conf = np.zeros((3, 3), int)
    for t, r in zip(q[:, 1], route, strict=True):
        conf[t, r] += 1
    conf_late = np.zeros((3, 3), int)  # late queries only: where the base lacks the evidence
    for t, r in zip(q[late, 1], route[late], strict=True):
        conf_late[t, r] += 1
    return acc, conf, float(injected.sum() / n_streams), conf_late


def main(
    *,
    quick=False,
    seed=0,
    out_dir="out",
    data_dir=None,
    train_base_steps=None,
    save_adapter=None,
    ablations=True,
):
    del data_dir
    rng = np.random.default_rng(seed)
    key = jax.random.key(seed)
    enc = vision_encoder()
    params = load_base(enc, rng, train_steps=train_base_steps, key=jax.random.fold_in(key, 1))
    cfg = mcfg()
    steps = FULL_STEPS
    w_or = oracle_memory(params, enc, cfg, rng, 25 if quick else 150)
    if quick:  # the shipped adapter (made by this example's full training, see load_adapter)
        ap, info = load_adapter(cfg)
        ce2 = tuple(info["stage2_ce_first_last"])
    else:
        ap, ce2 = train_dlmr(params, enc, cfg, rng, jax.random.fold_in(key, 2), steps[:2], w_or)
        ap = train_router(params, ap, cfg, enc, rng, steps[2])
        if save_adapter:
            dump_adapter(
                save_adapter, ap, dict(seed=seed, steps=steps, mix=MIX, stage2_ce_first_last=ce2)
            )
    n_eval = 24 if quick else 200
    cells, toks, q = sample_streams(np.random.default_rng(10_000 + seed), n_eval)
    oracle_late = oracle_late_accuracy(w_or, params, enc, cfg, cells, toks, q)
    prompts, plen = eval_prompts(params, enc, cells, toks, q)
    kk = jax.random.fold_in(key, 5)
    res = {}
    res["base"] = summarize(
        *evaluate(params, null_router(ap), cfg, prompts, plen, q, kk), q, n_eval
    )
    res["dlmr"] = summarize(*evaluate(params, ap, cfg, prompts, plen, q, kk), q, n_eval)
    res["fixed_k4"] = summarize(
        *evaluate(params, fixed_k_router(ap, cfg, 4), cfg, prompts, plen, q, kk), q, n_eval
    )
    if not quick and ablations:  # the ablations that retrain: full mode only
        frz, _ = train_dlmr(
            params, enc, cfg, rng, jax.random.fold_in(key, 2), steps[:2], w_or, train_injector=False
        )
        frz = frz._replace(router=ap.router)
        res["frozen_injector"] = summarize(
            *evaluate(params, frz, cfg, prompts, plen, q, kk), q, n_eval
        )
        scfg = mcfg(shared_bank=True)
        sh, _ = train_dlmr(params, enc, scfg, rng, jax.random.fold_in(key, 6), steps[:2], w_or)
        sh = train_router(params, sh, scfg, enc, rng, steps[2])
        res["shared_bank"] = summarize(*evaluate(params, sh, scfg, prompts, plen, q, kk), q, n_eval)

    base_late, dl_late = res["base"][0]["late"], res["dlmr"][0]["late"]
    conf, conf_late = res["dlmr"][1], res["dlmr"][3]
    type_ok_all = (conf[1, 1] + conf[2, 2]) / max(conf[1:].sum(), 1)
    # the routing target: judged on late queries (where memory is needed), see the docstring
    type_ok = (conf_late[1, 1] + conf_late[2, 2]) / max(conf_late[1:].sum(), 1)
    null_filler = conf[0, 0] / max(conf[0].sum(), 1)
    os.makedirs(out_dir, exist_ok=True)
    rows = {
        k: {
            "acc": v[0],
            "route_confusion": v[1].tolist(),
            "route_confusion_late": v[3].tolist(),
            "injected_per_stream": v[2],
        }
        for k, v in res.items()
    }
    with open(os.path.join(out_dir, "dlmr_toy_grid.json"), "w") as f:
        json.dump(rows, f, indent=1)
    _plot(rows, out_dir)
    fx = res["fixed_k4"]
    return {
        "method": "DLMR (dual latent memories + router, frozen base) [R]",
        "metric": "late-query accuracy (evidence outside the window)",
        "value": dl_late,
        "baseline": (
            f"base {base_late:.2f}; fixed k=4 {fx[0]['late']:.2f} at {fx[2]:.1f} tokens/stream"
        ),
        # ok: what genuinely works. The frozen base reads an injected memory that holds
        # the evidence (oracle), and the learned memory injected at every eligible step
        # (fixed k = 4, so it is really injected) lifts late-query accuracy.
        # Whether DLMR's router uses it well is reported, not required.
        "ok": bool(oracle_late >= base_late + 0.3 and fx[0]["late"] >= base_late + 0.1),
        "memory_helps": bool(dl_late >= base_late + 0.05),
        "learned_memory_late": fx[0]["late"],
        "oracle_memory_late": oracle_late,
        "base_late": base_late,
        # the targets (the routing one judged on late queries; the base's late
        # accuracy, ~0.2 with this fixture, is reported as base_late)
        "spec_targets_met": bool(dl_late >= 0.9 and null_filler >= 0.9 and type_ok >= 0.9),
        # late visual -> v, late reasoning -> r (the null or the other bank: wrong)
        "type_correct_routing": float(type_ok),
        # over every visual and reasoning query (reported: on early ones the base answers
        # and the cost-aware reward rightly prefers the null)
        "type_correct_routing_all": float(type_ok_all),
        "null_rate_on_filler": float(null_filler),
        "injected_per_stream": res["dlmr"][2],
        "injected_per_stream_fixed_k4": fx[2],
        "adaptive_beats_fixed": bool(res["dlmr"][2] < fx[2] and dl_late >= fx[0]["late"]),
        "frozen_injector_late": (
            res["frozen_injector"][0]["late"] if "frozen_injector" in res else None
        ),
        "shared_bank_late": res["shared_bank"][0]["late"] if "shared_bank" in res else None,
        "stage2_ce_first_last": ce2,
        "rows": rows,
    }


def _plot(rows, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(rows)
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
    ax[0].bar(names, [rows[n]["acc"]["late"] for n in names])
    ax[0].set_ylabel("late-query accuracy")
    ax[0].tick_params(axis="x", rotation=30)
    ax[1].bar(names, [rows[n]["injected_per_stream"] for n in names])
    ax[1].set_ylabel("memory tokens / stream")
    ax[1].tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "dlmr_toy_grid.png"), dpi=80)
    plt.close(fig)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="out")
    p.add_argument("--data-dir", default=os.environ.get("JAXKIT_DATA_DIR"))
    p.add_argument("--train-base-steps", type=int, default=None)
    p.add_argument("--save-adapter", default=None, help="write the trained adapter here")
    p.add_argument("--no-ablations", action="store_true", help="full mode without the ablations")
    args = vars(p.parse_args())
    args["ablations"] = not args.pop("no_ablations")
    res = main(**{k.replace("-", "_"): v for k, v in args.items()})
    for k, v in res["rows"].items():
        print(k, json.dumps(v))
    print(json.dumps({k: v for k, v in res.items() if k != "rows"}))
