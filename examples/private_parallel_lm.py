"""Composing methods: a private, data-parallel, parallel-decoding LM in one JAX program.

One ``jaxkit.nn`` transformer goes through four jaxkit methods:

* it starts from the pretrained WeDLM fixture (``io.load_fixture("wedlm_counting")``,
  a 2-layer causal LM trained on ``noisy_counting``: counting mod 32 with a noise-level
  token) and gets rank-4 LoRA factors on its MLP weights (``privacy.lora_init``,
  spectral init);
* it is fine-tuned privately with PRISM (``privacy.prism``; per-example gradients,
  Poisson sampling, ``calibrate_sigma`` for a target epsilon, dp-accounting) on a
  held-out "private" task of ``nn.tiny_task``: ``counting`` (mod 16), written in the
  fixture's format (its "clean" level token first), where the base model keeps counting
  mod 32 and fails once the count wraps. The objective is WeDLM's dual-stream loss
  (``decoding.wedlm_loss``), so the private model still decodes in parallel;
* each step is data-parallel over all devices (the Poisson batch is split over mesh
  axis ``data``; the clipped per-example sum is reduced across devices and the noise
  is drawn once, after the reduction, inside the aggregator); weights, LoRA factors
  and optimizer state can be split over mesh axis ``model`` by ``nn.param_specs``
  (see :func:`placements`); an orbax checkpoint taken half-way and resumed gives
  bit-identical factors;
* the private model decodes the task with WeDLM through the fused sampler (greedy
  and sampled) and with AR + KV cache.

The table compares, at the same (epsilon, delta): the base model, non-private LoRA
(the same steps without clipping or noise), naive DP-LoRA (DP-Adam on the factors,
best of several factor gauges ``(a c, b / c)``) and PRISM (the same accuracy for
every gauge: its release depends on ``Z = a b^T`` only). Accuracy is the fraction of
generated positions that follow the counting rule (``nn.tiny_task_accuracy``) on
held-out prompts, decoded greedily by AR. Learning rates (PRISM 3e-2, Adam 1e-2)
were picked once by hand on this set-up. In full mode every fine-tuning reaches accuracy
1.000, so the gauge dependence of naive DP-LoRA is read from its final losses (``ok``
asks for either spread, PRISM's staying flat).

WeDLM on the private model (the issue asks >= 2x AR's tokens per forward at <= 1 point
of accuracy loss; ``wedlm_target_met`` is computed; window and tau are chosen on
validation prompts: the most tokens per forward within one point of AR there).
The fixture's parallel head is tied to its format: on bare ``[s, s+d]`` prompts it fills
1.16 tokens per forward at tau = 0.3, with its clean level token first 3.67 (hence the
format). The private steps then train the ``[MASK]``-slot side less than the AR side, and
the noise is what costs it, not the LoRA (24 steps, N = 512, batch 32: noise-free PRISM
gives WeDLM 0.899 at 1.26 tokens/forward vs AR 0.938; at epsilon = 8, 0.49 at 1.09).
Larger Poisson batches at the same epsilon help most (same q, hence the same sigma, while
the noise on the mean gradient, sigma C / batch, shrinks): N = 2048, batch 128, 96 steps
gave AR 1.000 and WeDLM 0.976 at 2.50 tokens/forward (window 8, tau = 1), 1.4 points
short; N = 4096, batch 256 (the full mode) gives WeDLM 0.996 at 3.13 vs AR 1.000 at 1.08
(window 4, tau = 1): the target is met. A smaller window helps too (far slots are the
ones filled wrongly): at N = 2048, window 4 gave 0.984 at 2.30 where window 8 gave 0.969
at 2.49. More steps at a smaller rate (N = 4096, 192 steps) or a lower AR weight (0.3)
did not help.
"""

import argparse
import functools
import json
import os
import shutil
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxkit import decoding, io, nn, privacy, sharding
from jaxkit.privacy import lowrank

try:  # imported as examples.<name> (the tour, the tests)
    from examples._common import fast_jit
except ModuleNotFoundError:  # run as a script: examples/ is sys.path[0]
    from _common import fast_jit

TASK, LENGTH, BLOCK = "counting", 16, 8
MASK_ID = nn.NOISY_COUNTING.mask_id  # the fixture's [MASK]; never a counting token
# the fixture's "clean" noise-level token (rho = 0): every private sequence starts with it,
# in the fixture's own format, so the count follows the token its parallel head was trained on
LEVEL_ID = nn.NOISY_COUNTING.level_ids[0]
TARGETS = r"layers/(w_gate|w_up|w_down)"
RANK, CLIP, DELTA, EPSILON = 4, 1.0, 1e-5, 8.0
AR_WEIGHT, WEIGHTING = 1.0, "weighted"  # the WeDLM objective's w_ar and MLM weighting
LR = {"prism": 3e-2, "naive": 1e-2, "nonprivate": 1e-2}
# The programs are tiny and run few steps, so on CPU compiling them costs more than
# running them: compile with XLA's back-end optimisation off (as the test tier does;
# measured here: quick-mode CPU time about halved). The computed values are the same.
# (``fast_jit``: ``jax.jit`` with ``examples/_common.py``'s ``FAST_COMPILE``.)


# ----------------------------------------------------------------------------- data, model


def task_rows(key, n: int):
    """``n`` sequences of the held-out task in the fixture's format: the clean level token,
    then ``counting`` (mod 16) of length ``LENGTH - 1``. Returns (tokens, loss mask, prompt
    length)."""
    tokens, mask, prompt_len = _task_rows(key, n)
    return tokens, mask, int(prompt_len)


# integer draws and copies: the same tokens at any XLA optimisation level (checked), so
# they compile with ``fast_jit`` (about 1 s of CPU less than eager -O3 programs)
@functools.partial(fast_jit, static_argnums=1)
def _task_rows(key, n):
    d = nn.tiny_task(TASK, key=key, batch=n, length=LENGTH - 1)
    head = jnp.full((n, 1), LEVEL_ID, jnp.int32)
    mask = jnp.concatenate([jnp.zeros((n, 1), bool), d.loss_mask], axis=1)
    return jnp.concatenate([head, d.tokens], axis=1), mask, d.prompt_len + 1


def private_data(seed: int, n: int):
    """The private training set: ``n`` sequences of the held-out task (tokens, loss mask)."""
    return task_rows(jax.random.key(seed + 11), n)[:2]


def example_loss(lora, ex, base, cfg):
    """WeDLM dual-stream loss of ONE example (leaves of a ``DualStreamBatch`` row)."""
    attn = decoding.dual_stream_mask(LENGTH, BLOCK)
    batch = decoding.DualStreamBatch(ex[0][None], ex[1][None], attn, *(x[None] for x in ex[2:]))

    def apply_fn(p, tokens, positions, mask):
        return nn.apply(p, cfg, tokens, positions, attn_mask=mask).logits

    model = privacy.lora_merge(base, lora)
    return decoding.wedlm_loss(apply_fn, model, batch, ar_weight=AR_WEIGHT, weighting=WEIGHTING)[0]


def _tx(method, lr, sigma, clip, denom, key):
    if method == "prism":
        return privacy.prism(lr, clip_norm=clip, noise_multiplier=sigma, denom=denom, key=key)
    # naive DP-LoRA; with clip = inf and sigma = 0 it is non-private LoRA (plain Adam on
    # the batch gradient / q N), and reuses the same compiled step
    return privacy.naive_dp_lora(lr, clip_norm=clip, noise_multiplier=sigma, denom=denom, key=key)


def _is_factor(x):
    return x is None or isinstance(x, lowrank.LoraFactors)


def gauge(lora, c: float):
    """The same LoRA update ``Z = a b^T`` in another gauge: ``(a c, b / c)``."""
    return jax.tree.map(
        lambda f: None if f is None else lowrank.LoraFactors(f.a * c, f.b / c),
        lora,
        is_leaf=_is_factor,
    )


# ------------------------------------------------------------------------------ placement


def _fit(spec, shape, size):
    """``spec`` with each split axis that ``size`` does not divide moved to another axis
    of the leaf that it divides (else replicated)."""
    parts = list(spec) + [None] * (len(shape) - len(spec))
    for i, ax in enumerate(parts):
        if ax is not None and (size == 1 or shape[i] % size):
            parts[i] = None
            free = [j for j in range(len(shape)) if parts[j] is None and j != i]
            ok = [j for j in free if size > 1 and shape[j] % size == 0 and j > 0]
            if ok:
                parts[ok[-1]] = ax
    return jax.P(*parts)


def placements(mesh, cfg, base, lora):
    """NamedShardings of the base weights (``nn.param_specs`` on axis ``model``) and of
    the LoRA factors: ``a`` ``[*stack, m_out, r]`` and ``b`` ``[*stack, n_in, r]`` both
    split on their long axis over ``model`` (so factors and optimizer moments take 1/size
    of their bytes per device, whichever side of the weight is split). An axis that the
    ``model`` size does not divide (the 36-token vocabulary) is split on the leaf's other
    axis when that one divides."""
    size = mesh.shape["model"]
    specs = nn.param_specs(cfg)
    is_p = lambda x: isinstance(x, jax.P)  # noqa: E731
    base_sh = jax.tree.map(
        lambda s, w: jax.NamedSharding(mesh, _fit(s, w.shape, size)), specs, base, is_leaf=is_p
    )

    def factor(f):
        if f is None:
            return None
        spec = jax.P(*([None] * (f.a.ndim - 2)), "model", None)
        a, b = _fit(spec, f.a.shape, size), _fit(spec, f.b.shape, size)
        return lowrank.LoraFactors(jax.NamedSharding(mesh, a), jax.NamedSharding(mesh, b))

    return base_sh, jax.tree.map(factor, lora, is_leaf=_is_factor)


def place(tree, shardings):
    """Put host values on (possibly multi-process) shardings: each process builds only
    its own shards (``jax.make_array_from_callback``)."""

    def one(x, sh):
        if x is None:
            return None
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sh, lambda idx: host[idx])

    return jax.tree.map(one, tree, shardings, is_leaf=lambda x: x is None)


def _constrain(lora, state, lora_sh, mesh):
    """Pin the factors and the optimizer state (a state leaf shaped like factors is split
    like them, the rest replicated): the compiled step is then the same for fresh and
    restored inputs (bit-identical resume)."""
    repl = jax.NamedSharding(mesh, jax.P())
    lora = jax.lax.with_sharding_constraint(lora, lora_sh)
    by_shape = {}
    for f, sh in zip(jax.tree.leaves(lora), jax.tree.leaves(lora_sh), strict=True):
        by_shape.setdefault(f.shape, set()).add(sh.spec)

    def one(x):
        specs = by_shape.get(x.shape, ())
        return jax.NamedSharding(mesh, next(iter(specs))) if len(specs) == 1 else repl

    return lora, jax.lax.with_sharding_constraint(state, jax.tree.map(one, state))


# ---------------------------------------------------------------------------------- train


@functools.partial(fast_jit, static_argnames=("method", "cfg", "max_batch", "mesh"))
def _init(lora, base, key, lr, sigma, clip, denom, *, method, cfg, max_batch, mesh):
    del max_batch
    tx = _tx(method, lr, sigma, clip, denom, jax.random.fold_in(key, 0))
    _, lora_sh = placements(mesh, cfg, base, lora)
    return _constrain(lora, tx.init(lora), lora_sh, mesh)


@functools.partial(fast_jit, static_argnames=("method", "cfg", "max_batch", "mesh"))
def _step(lora, state, t, base, data, key, lr, sigma, clip, q, *, method, cfg, max_batch, mesh):
    tokens, loss_mask = data
    n = tokens.shape[0]
    tx = _tx(method, lr, sigma, clip, q * n, jax.random.fold_in(key, 0))
    pb = privacy.poisson_batch(
        key=jax.random.fold_in(jax.random.fold_in(key, 1), t),
        num_examples=n,
        q=q,
        max_batch_size=max_batch,
    )
    rows = jax.NamedSharding(mesh, jax.P("data"))
    toks = jax.lax.with_sharding_constraint(tokens[pb.indices], rows)
    lm = jax.lax.with_sharding_constraint(loss_mask[pb.indices], rows)
    ds = decoding.dual_stream_batch(
        toks,
        lm,
        key=jax.random.fold_in(jax.random.fold_in(key, 2), t),
        block_size=BLOCK,
        mask_token_id=MASK_ID,
    )
    ex = (ds.input_ids, ds.positions, ds.mlm_labels, ds.mlm_mask, ds.mlm_weights)
    ex = ex + (ds.ar_labels, ds.ar_mask)
    mask = jax.lax.with_sharding_constraint(pb.mask, rows)

    def loss_fn(lo, e):
        return example_loss(lo, e, base, cfg)

    grads = privacy.per_example_grads(loss_fn, lora, ex, mask=mask)
    # a metric of the run (not privatized; the private output is the factors)
    per_ex = jax.vmap(loss_fn, in_axes=(None, 0))(lora, ex)
    loss = jnp.sum(jnp.where(mask, per_ex, 0.0)) / jnp.maximum(jnp.sum(mask), 1)
    loss = jax.lax.with_sharding_constraint(loss, jax.NamedSharding(mesh, jax.P()))
    updates, state = tx.update(grads, state, lora)
    _, lora_sh = placements(mesh, cfg, base, lora)
    lora, state = _constrain(optax.apply_updates(lora, updates), state, lora_sh, mesh)
    overflow = jax.lax.with_sharding_constraint(pb.overflow, jax.NamedSharding(mesh, jax.P()))
    return lora, state, loss, overflow


def _keys_to_data(tree):
    return jax.tree.map(
        lambda x: jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x,
        tree,
    )


def _data_to_keys(tree, like):
    return jax.tree.map(
        lambda x, t: (
            jax.random.wrap_key_data(x, impl=jax.random.key_impl(t))
            if jnp.issubdtype(t.dtype, jax.dtypes.prng_key)
            else x
        ),
        tree,
        like,
    )


def train(
    method: str,
    lora,
    *,
    base,
    cfg,
    data,
    steps: int,
    q: float,
    sigma: float,
    key,
    mesh,
    max_batch: int,
    clip: float = CLIP,
    lr: float | None = None,
    ckpt_dir: str | None = None,
    ckpt_every: int = 0,
    stop_after: int | None = None,
    analyze: bool = False,
) -> dict:
    """Run ``steps`` steps of ``method`` (``"prism"`` or ``"naive"``; ``"nonprivate"`` is
    naive with ``clip=inf``, ``sigma=0``) from ``lora``, resuming from ``ckpt_dir``.

    Data and noise of step ``t`` depend only on ``(key, t)``, so a resumed run repeats
    an uninterrupted one bit for bit. ``stop_after`` ends the run after that step (an
    interruption). Returns ``{"lora", "losses", "start_step", "overflow"}``; with
    ``analyze`` also ``"memory"``: XLA's per-device argument bytes of the compiled step
    less the data and scalars (= parameters + LoRA factors + optimizer state per device)
    and the global bytes of parameters + factors + optimizer state.
    """
    import orbax.checkpoint as ocp

    if method == "nonprivate":
        method, clip, sigma, lr = "naive", float("inf"), 0.0, LR["nonprivate"] if lr is None else lr
    lr = LR[method] if lr is None else lr
    static = dict(method=method, cfg=cfg, max_batch=max_batch, mesh=mesh)
    hyper = (jnp.float32(lr), jnp.float32(sigma), jnp.float32(clip))
    base_sh, lora_sh = placements(mesh, cfg, base, lora)
    rep = jax.NamedSharding(mesh, jax.P())
    base, lora, data = place(base, base_sh), place(lora, lora_sh), place(data, (rep, rep))
    n = data[0].shape[0]
    lora, state = _init(lora, base, key, *hyper, jnp.float32(q * n), **static)
    start, mngr, memory = 0, None, None
    if analyze:
        args = (lora, state, jnp.int32(0), base, data, key, *hyper, jnp.float32(q))
        ma = _step.lower(*args, **static).compile().memory_analysis()
        scalars = sum(np.dtype(x.dtype).itemsize for x in args[2:3] + args[6:])
        key_bytes = jax.random.key_data(key).nbytes
        nonparam = data[0].nbytes + data[1].nbytes + scalars + key_bytes
        memory = {
            "per_device_bytes": int(ma.argument_size_in_bytes - nonparam),
            "total_bytes": int(sum(x.nbytes for x in jax.tree.leaves(_keys_to_data(args[:4])))),
        }
    if ckpt_dir is not None:
        mngr = ocp.CheckpointManager(
            os.path.abspath(ckpt_dir),
            options=ocp.CheckpointManagerOptions(
                max_to_keep=2, create=True, enable_async_checkpointing=False
            ),
        )
        latest = mngr.latest_step()
        if latest is not None:
            like = jax.tree.leaves(_keys_to_data((lora, state)))
            target = {
                str(i): jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
                for i, x in enumerate(like)
            }
            got = mngr.restore(latest, args=ocp.args.StandardRestore(target))
            flat = jax.tree.structure(_keys_to_data((lora, state)))
            lora, state = _data_to_keys(
                jax.tree.unflatten(flat, [got[str(i)] for i in range(len(like))]), (lora, state)
            )
            start = int(latest)
    losses, overflow = [], False
    for t in range(start, steps):
        lora, state, loss, of = _step(
            lora, state, jnp.int32(t), base, data, key, *hyper, jnp.float32(q), **static
        )
        losses.append(float(loss))
        overflow |= bool(of)
        done = t + 1
        if mngr is not None and ckpt_every and (done % ckpt_every == 0 or done == steps):
            leaves = jax.tree.leaves(_keys_to_data((lora, state)))
            mngr.save(done, args=ocp.args.StandardSave({str(i): x for i, x in enumerate(leaves)}))
            mngr.wait_until_finished()
        if stop_after is not None and done == stop_after:
            break
    if mngr is not None:
        mngr.close()
    return {
        "lora": lora,
        "losses": losses,
        "start_step": start,
        "overflow": overflow,
        "memory": memory,
    }


def private_job(
    steps: int,
    *,
    model_parallel: int = 1,
    devices=None,
    seed: int = 0,
    n: int = 512,
    batch: int = 32,
) -> dict:
    """The PRISM job alone, scaled by configuration: mesh ``data x model`` over
    ``devices`` (default: all devices of all processes), ``steps`` steps at eps = 8.

    Returns ``{"losses", "lora" (host copy), "mesh", "memory"}`` (see :func:`train`)."""
    params, cfg, _ = io.load_fixture("wedlm_counting")
    key = jax.random.key(seed)
    base, lora0 = privacy.lora_init(
        params, targets=TARGETS, rank=RANK, key=jax.random.fold_in(key, 1), method="spectral"
    )
    mesh = sharding.make_mesh(model=model_parallel, devices=devices, explicit=False)
    n_data = mesh.shape["data"]
    max_batch = -(-int(batch + 4 * np.sqrt(batch)) // n_data) * n_data
    q = batch / n
    sigma = privacy.calibrate_sigma(epsilon=EPSILON, delta=DELTA, q=q, steps=steps)
    res = train(
        "prism",
        lora0,
        base=base,
        cfg=cfg,
        data=private_data(seed, n),
        steps=steps,
        q=q,
        sigma=sigma,
        key=jax.random.fold_in(key, 3),
        mesh=mesh,
        max_batch=max_batch,
        analyze=True,
    )
    lora = res["lora"]
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        lora = multihost_utils.process_allgather(lora, tiled=True)
    return {
        "losses": res["losses"],
        "lora": jax.tree.map(np.asarray, lora),
        "mesh": dict(mesh.shape),
        "memory": res["memory"],
    }


# --------------------------------------------------------------------------------- decode


@functools.partial(fast_jit, static_argnames=("cfg", "new", "window", "wedlm"))
def _decode(params, prompt, key, tau, temperature, *, cfg, new, window, wedlm):
    """Decode every prompt alone (batch 1, one after the other in ``lax.map``: the
    latency regime of the WeDLM paper); returns tokens, lengths, row forwards."""

    def one(args):
        p, k = args
        pl = jnp.full((1,), p.shape[-1], jnp.int32)
        if wedlm:
            g = decoding.wedlm_generate(
                params,
                cfg,
                p[None],
                pl,
                key=k,
                mask_token_id=MASK_ID,
                max_new_tokens=new,
                window=window,
                entropy_threshold=tau,
                temperature=temperature,
            )
        else:
            g = decoding.ar_generate(
                params, cfg, p[None], pl, key=k, max_new_tokens=new, temperature=temperature
            )
        return g.tokens[0], g.lengths[0], g.stats.row_forwards[0]

    keys = jax.random.split(key, prompt.shape[0])
    return jax.lax.map(one, (prompt, keys))


def _accuracy(prompt, tokens):
    full = jnp.concatenate([prompt, tokens], axis=1)[:, 1:]  # without the level token
    return float(jnp.mean(nn.tiny_task_accuracy(TASK, full, start=prompt.shape[1] - 1)))


def evaluate(params, cfg, prompt, *, key, tau=0.0, temperature=0.0, wedlm=False, window=8):
    """(accuracy, tokens per forward) of AR or WeDLM on the prompts."""
    new = LENGTH - prompt.shape[1]
    params = jax.device_put(params, jax.devices()[0])  # one stream: one device
    toks, lens, fwd = _decode(
        params,
        prompt,
        key,
        jnp.float32(tau),
        jnp.float32(temperature),
        cfg=cfg,
        new=new,
        window=window,
        wedlm=wedlm,
    )
    return _accuracy(prompt, toks), float(jnp.sum(lens) / jnp.maximum(jnp.sum(fwd), 1))


def _timed(calls, repeats):
    """Median seconds of each call, timed in turn (round-robin) after a warm-up."""
    for f in calls.values():
        jax.block_until_ready(f())
    ts = {k: [] for k in calls}
    for _ in range(repeats):
        for k, f in calls.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f())
            ts[k].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in ts.items()}


# ----------------------------------------------------------------------------------- main


def main(
    *, quick: bool = False, seed: int = 0, out_dir: str = "out", data_dir: str | None = None
) -> dict:
    del data_dir  # the model is a committed fixture, the task is synthetic
    t_start = time.perf_counter()
    params, cfg, _ = io.load_fixture("wedlm_counting")
    key = jax.random.key(seed)
    n, batch, steps = (512, 32, 20) if quick else (4096, 256, 96)
    gauges_prism = [1.0, 10.0] if quick else [0.1, 1.0, 10.0]
    gauges_naive = [1.0, 10.0] if quick else [0.1, 1.0, 10.0]
    q = batch / n
    n_dev = jax.device_count()
    max_batch = -(-int(batch + 4 * np.sqrt(batch)) // n_dev) * n_dev  # overflow ~ 4 sd
    sigma = privacy.calibrate_sigma(epsilon=EPSILON, delta=DELTA, q=q, steps=steps)
    eps = privacy.epsilon(q=q, noise_multiplier=sigma, steps=steps, delta=DELTA)
    mesh = sharding.make_mesh(model=1, explicit=False)  # data-parallel over all devices

    data = private_data(seed, n)
    # the spectral init (SVDs of the target weights) runs once: fast_jit in quick mode
    lora_init = functools.partial(privacy.lora_init, targets=TARGETS, rank=RANK, method="spectral")
    base, lora0 = (fast_jit(lora_init) if quick else lora_init)(
        params, key=jax.random.fold_in(key, 1)
    )
    ev_tokens, _, prompt_len = task_rows(jax.random.fold_in(key, 99), 32 if quick else 128)
    prompt = ev_tokens[:, :prompt_len]
    k_dec = jax.random.fold_in(key, 7)
    acc_base = evaluate(params, cfg, prompt, key=k_dec)[0]

    common = dict(base=base, cfg=cfg, data=data, steps=steps, q=q, sigma=sigma, mesh=mesh)
    common.update(max_batch=max_batch, key=jax.random.fold_in(key, 3))
    rows, runs, overflow = [], {}, False

    def run(method, c, **kw):
        nonlocal overflow
        res = train(method, gauge(lora0, c), **common, **kw)
        overflow |= res["overflow"]
        acc = evaluate(privacy.lora_merge(base, res["lora"]), cfg, prompt, key=k_dec)[0]
        rows.append({"method": method, "gauge": c, "acc": acc, "final_loss": res["losses"][-1]})
        runs[(method, c)] = res
        return res

    ckpt = os.path.join(out_dir, "private_parallel_lm_ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    run("nonprivate", 1.0)
    for c in gauges_naive:
        run("naive", c)
    for c in gauges_prism:  # gauge 1 saves a checkpoint half-way
        run("prism", c, **(dict(ckpt_dir=ckpt, ckpt_every=steps // 2) if c == 1.0 else {}))
    # an interrupted run: a new process would restart here, from the half-way checkpoint
    shutil.rmtree(os.path.join(ckpt, str(steps)), ignore_errors=True)
    resumed = train("prism", gauge(lora0, 1.0), **common, ckpt_dir=ckpt, ckpt_every=steps // 2)
    ref = runs[("prism", 1.0)]
    resume_identical = resumed["start_step"] == steps // 2 and all(
        np.array_equal(a, b)
        for a, b in zip(jax.tree.leaves(resumed["lora"]), jax.tree.leaves(ref["lora"]), strict=True)
    )

    def accs(m):
        return [r["acc"] for r in rows if r["method"] == m]

    acc_np, acc_prism = accs("nonprivate")[0], accs("prism")
    naive_best = max((r for r in rows if r["method"] == "naive"), key=lambda r: r["acc"])
    prism_spread = max(acc_prism) - min(acc_prism)
    naive_spread = max(accs("naive")) - min(accs("naive"))

    def loss_spread(m):  # the gauge dependence where the accuracies saturate (full mode)
        ls = [r["final_loss"] for r in rows if r["method"] == m]
        return max(ls) - min(ls)

    gauge_dependent = naive_spread > prism_spread or loss_spread("naive") > 10 * max(
        loss_spread("prism"), 1e-4
    )

    # ---- decode the private model: AR + KV cache vs WeDLM (greedy and sampled)
    priv = jax.device_put(privacy.lora_merge(base, ref["lora"]), jax.devices()[0])
    acc_ar, tpf_ar = evaluate(priv, cfg, prompt, key=k_dec)
    # window and tau are chosen on validation prompts (the most tokens per forward within one
    # point of AR's accuracy there); the figures are those of the evaluation prompts
    val = task_rows(jax.random.fold_in(key, 98), prompt.shape[0])[0][:, : prompt.shape[1]]
    acc_ar_val = evaluate(priv, cfg, val, key=k_dec)[0]
    taus = [0.3, 1.0] if quick else [0.3, 0.5, 0.7, 1.0, 1.3]
    windows = [8] if quick else [4, 8]
    sweep = []
    for window in windows:
        for tau in taus:
            kw = dict(key=k_dec, tau=tau, wedlm=True, window=window)
            a, tpf = evaluate(priv, cfg, prompt, **kw)
            a_s, tpf_s = evaluate(priv, cfg, prompt, temperature=0.5, **kw)
            a_v, tpf_v = evaluate(priv, cfg, val, **kw)
            sweep.append(
                {"window": window, "tau": tau, "acc": a, "tpf": tpf}
                | {"acc_sampled": a_s, "tpf_sampled": tpf_s, "acc_val": a_v, "tpf_val": tpf_v}
            )
    good = [r for r in sweep if r["acc_val"] >= acc_ar_val - 0.01]
    best = max(good, key=lambda r: r["tpf_val"]) if good else min(sweep, key=lambda r: r["tau"])
    tp = prompt  # the evaluated prompts (same shapes: no new compile)
    nt = LENGTH - tp.shape[1]
    f32 = jnp.float32  # the scalars as in evaluate(): the compiled programs are reused
    ts = _timed(
        {
            "ar": lambda: _decode(
                priv, tp, k_dec, f32(0.0), f32(0.0), cfg=cfg, new=nt, window=8, wedlm=False
            ),
            "wedlm": lambda: _decode(
                priv,
                tp,
                k_dec,
                f32(best["tau"]),
                f32(0.0),
                cfg=cfg,
                new=nt,
                window=best["window"],
                wedlm=True,
            ),
        },
        repeats=2 if quick else 10,
    )
    speedup = ts["ar"] / ts["wedlm"]

    os.makedirs(out_dir, exist_ok=True)
    _plot(out_dir, rows, acc_base, runs, sweep, acc_ar, tpf_ar, eps)
    table = {
        "base": acc_base,
        "nonprivate_lora": acc_np,
        "naive_dp_lora_best_gauge": naive_best["acc"],
        "prism": acc_prism[0],
    }
    # the WeDLM target (>= 2x AR's tokens per forward at <= 1 point accuracy loss, on the
    # evaluation prompts at the tau chosen on the validation prompts) is reported, not gated
    wedlm_target_met = best["tpf"] >= 2.0 * tpf_ar and best["acc"] >= acc_ar - 0.01
    ok = (
        prism_spread <= 0.01
        and gauge_dependent
        and acc_prism[0] > acc_base + 0.1
        and resume_identical
        and abs(eps - EPSILON) < 0.05
    )
    return {
        "method": "composition: PRISM DP-LoRA + WeDLM objective/decoding, data-parallel",
        "metric": f"task acc of PRISM at eps={eps:.2f} (gauge spread {prism_spread:.3f})",
        "value": acc_prism[0],
        "baseline": (
            f"base {acc_base:.3f}, non-private {acc_np:.3f}, naive DP best gauge "
            f"{naive_best['acc']:.3f} (spread {naive_spread:.3f})"
        ),
        "ok": bool(ok),
        "epsilon": eps,
        "delta": DELTA,
        "sigma": sigma,
        "table": table,
        "rows": rows,
        "prism_spread": prism_spread,
        "naive_spread": naive_spread,
        "loss_spread": {"naive": loss_spread("naive"), "prism": loss_spread("prism")},
        "naive_best_gauge": naive_best["gauge"],
        "resume_bit_identical": bool(resume_identical),
        "acc_ar": acc_ar,
        "tpf_ar": tpf_ar,
        "wedlm": best,
        "wedlm_target_met": bool(wedlm_target_met),
        "wedlm_sweep": sweep,
        "wall_ar_s": ts["ar"],
        "wall_wedlm_s": ts["wedlm"],
        "speedup": speedup,
        "devices": n_dev,
        "poisson_overflow": bool(overflow),
        "steps": steps,
        "seconds": round(time.perf_counter() - t_start, 1),
    }


def _plot(out_dir, rows, acc_base, runs, sweep, acc_ar, tpf_ar, eps):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    labels = ["base"] + [f"{r['method']}\nc={r['gauge']:g}" for r in rows]
    vals = [acc_base] + [r["acc"] for r in rows]
    colors = ["gray"] + [
        {"nonprivate": "C2", "naive": "C1", "prism": "C0"}[r["method"]] for r in rows
    ]
    ax[0].bar(range(len(vals)), vals, color=colors)
    ax[0].set_xticks(range(len(vals)), labels, fontsize=6)
    ax[0].set_ylabel("task accuracy (AR greedy)")
    ax[0].set_title(f"held-out counting task, eps={eps:.2g}", fontsize=9)
    for (m, c), res in runs.items():
        ax[1].plot(res["losses"], label=f"{m} c={c:g}", lw=1)
    ax[1].set_xlabel("step")
    ax[1].set_ylabel("WeDLM dual-stream loss")
    ax[1].legend(fontsize=6)
    for i, w in enumerate(sorted({r["window"] for r in sweep})):
        sw = [r for r in sweep if r["window"] == w]
        ax[2].plot([r["tpf"] for r in sw], [r["acc"] for r in sw], "o-", color=f"C{i}")
        ax[2].plot(
            [r["tpf_sampled"] for r in sw], [r["acc_sampled"] for r in sw], "^--", color=f"C{i}"
        )
        ax[2].plot([], [], "o-", color=f"C{i}", label=f"WeDLM W={w} (greedy; T=0.5 dashed)")
        for r in sw:
            ax[2].annotate(f"tau={r['tau']:g}", (r["tpf"], r["acc"]), fontsize=6)
    ax[2].plot([tpf_ar], [acc_ar], "s", color="k", label="AR + KV cache")
    ax[2].set_xlabel("tokens per forward")
    ax[2].set_ylabel("task accuracy")
    ax[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "private_parallel_lm.png"), dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="out")
    p.add_argument("--data-dir", default=os.environ.get("JAXKIT_DATA_DIR"))
    g = p.add_argument_group("the PRISM job alone (with --steps), on one or several processes")
    g.add_argument("--steps", type=int, default=None)
    g.add_argument("--model-parallel", type=int, default=1)
    g.add_argument("--num-processes", type=int, default=1)
    g.add_argument("--process-id", type=int, default=0)
    g.add_argument("--coordinator", default=None, help="host:port of process 0")
    a = vars(p.parse_args())
    job = {k: a.pop(k) for k in ("steps", "model_parallel", "num_processes", "process_id")}
    coordinator = a.pop("coordinator")
    if job["num_processes"] > 1:  # CPU collectives across processes go through gloo
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=job["num_processes"],
            process_id=job["process_id"],
        )
    if job["steps"] is not None:
        out = private_job(job["steps"], model_parallel=job["model_parallel"], seed=a["seed"])
        leaves = jax.tree.leaves(out["lora"])
        print(
            json.dumps(
                {
                    "losses": out["losses"],
                    "lora_abs_sum": float(sum(np.abs(x).astype(np.float64).sum() for x in leaves)),
                    "mesh": out["mesh"],
                    **sharding.process_info(),
                }
            ),
            flush=True,
        )
        raise SystemExit(0)
    res = main(**a)
    for r in res.pop("rows"):
        print(json.dumps(r))
    print(json.dumps(res))
