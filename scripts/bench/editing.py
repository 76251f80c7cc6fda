"""AI engrams: extraction for 10 memories, one scan vs a per-memory loop.

Ours: ``collect_stats`` (one jitted scan over the data collecting every memory's
input covariance at once, rows grouped by memory) + ``extract`` (one eigh-based
pinv per layer, shared by all memories). Anchor ``per_memory_loop`` (our own, as
the authors' ai-engram does it): for each memory a jitted pass over all the data
collecting that memory's and the total covariance, then one ``jnp.linalg.pinv``
per layer. Target: >= 3x. Both give the same projections (checked, max rel err
reported as ``ours_err``). The authors' torch package itself is not run: torch
stays out of our dependencies and no separate engram environment exists.

Second case, a language model: the bench's ``jaxkit.nn`` transformer (D 128, 2
blocks, MLP 256), its two MLP sites read by ``editing.transformer_taps`` (one
forward per batch), 10 memories (one per sequence, drawn at random); the anchor
runs that forward once per memory, as a per-memory pass must.
"""

import functools
import os

# jax 0.10.x on CPU can hang a program with two LAPACK decompositions and products after
# them (README, "Known issue"): without this flag one of four runs of this bench hung
# (the separate LAPACK programs of both sides); with it, see docs/areas/editing.md
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_concurrency_optimized_scheduler=false"
).strip()

import _harness as H  # noqa: E402, I001
import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import editing, nn

K = 10


def _mlp(key, sizes):
    ks = jax.random.split(key, len(sizes) - 1)
    return [
        jax.random.normal(k, (a, b), jnp.float32) / np.sqrt(a)
        for k, a, b in zip(ks, sizes[:-1], sizes[1:], strict=True)
    ]


def taps(ws, x):
    out, h = {}, x
    for i, w in enumerate(ws):
        out[f"fc{i}"] = h
        h = jax.nn.relu(h @ w)
    return out


def _ours(ws, xb, ib):
    st = editing.collect_stats(taps, ws, xb, ib, num_memories=K, absorb_bias=False)
    layers = {f"fc{i}": editing.Linear(w) for i, w in enumerate(ws)}
    return editing.extract(layers, st).projection


@jax.jit
def _one_memory(ws, xb, ib, k):
    """One pass over all data for memory k: its covariance and the total, then pinv."""

    def body(carry, inp):
        x, ids = inp
        m = (ids == k).astype(jnp.float32)
        new = {}
        for name, h in taps(ws, x).items():
            ck, ct, nk, nt = carry[name]
            new[name] = (ck + (h * m[:, None]).T @ h, ct + h.T @ h, nk + m.sum(), nt + h.shape[0])
        return new, None

    init = {}
    for i, w in enumerate(ws):
        d = w.shape[0]
        z = jnp.zeros((d, d), jnp.float32)
        init[f"fc{i}"] = (z, z, jnp.float32(0), jnp.float32(0))
    final, _ = jax.lax.scan(body, init, (xb, ib))
    out = {}
    for i, w in enumerate(ws):
        ck, ct, nk, nt = final[f"fc{i}"]
        ck, ct = ck / nk, ct / nt
        d = ct.shape[0]
        pinv = jnp.linalg.pinv(ct, rtol=d * jnp.finfo(jnp.float32).eps)
        out[f"fc{i}"] = pinv @ ck @ w
    return out


def _loop(ws, xb, ib):
    return [_one_memory(ws, xb, ib, jnp.int32(k)) for k in range(K)]


def _lm_ours(params, tokens, ids, *, cfg):
    st = editing.collect_stats(
        editing.transformer_taps(cfg), params, tokens, ids, num_memories=K, absorb_bias=False
    )
    layers = editing.transformer_layers(params)
    return editing.extract(layers, st).projection


def _lm_pass(params, tokens, ids, k, cfg):
    """One pass over all sequences for memory k (a forward per batch): its and the total
    covariance at each site, as means."""
    taps = editing.transformer_taps(cfg)

    def body(carry, inp):
        tok, idb = inp
        m = jnp.repeat((idb == k).astype(jnp.float32), tok.shape[1])  # per row (position)
        new = {}
        for name, h in taps(params, tok).items():  # h: [L, R, D]
            ck, ct, nk = carry[name]
            new[name] = (ck + jnp.einsum("lrd,r,lre->lde", h, m, h), ct + h.mT @ h, nk + m.sum())
        return new, None

    width = {"mlp_in": cfg.d_model, "down_in": cfg.mlp_dim}
    init = {
        s: (jnp.zeros((cfg.n_layers, d, d)), jnp.zeros((cfg.n_layers, d, d)), 0.0)
        for s, d in width.items()
    }
    final, _ = jax.lax.scan(body, init, (tokens, ids))
    rows = tokens.shape[0] * tokens.shape[1] * tokens.shape[2]
    return {s: (ck / nk, ct / rows) for s, (ck, ct, nk) in final.items()}


_lm_pass_jit = jax.jit(_lm_pass, static_argnames="cfg")


@jax.jit
def _lm_pinv(ck, ct, w):
    d = ct.shape[-1]
    return jnp.linalg.pinv(ct, rtol=d * jnp.finfo(jnp.float32).eps) @ ck @ w


def _lm_one_memory(params, ws, tokens, ids, k, cfg):
    """The anchor for memory k: its pass, then one pinv program per site (two LAPACK
    decompositions in one program can hang on jax 0.10 CPU: README, "Known issue")."""
    covs = _lm_pass_jit(params, tokens, ids, k, cfg)
    return {s: _lm_pinv(*covs[s], ws[s]) for s in ws}


def _lm_case(args) -> None:
    cfg = H.transformer_config(128, 2)
    key = jax.random.key(0)
    params = nn.init_params(cfg, key=key)
    nb, b, t = 8, 16, 64
    tokens = jax.random.randint(jax.random.fold_in(key, 1), (nb, b, t), 0, cfg.vocab_size)
    ids = jax.random.randint(jax.random.fold_in(key, 2), (nb, b), 0, K)
    # called as a user calls it (collect_stats and extract are each jitted): one jit around
    # both hangs on jax 0.10 CPU at this size (README, "Known issue"); the separate programs
    # do not
    ours = H.time_jax(
        functools.partial(_lm_ours, cfg=cfg), params, tokens, ids, repeats=args.repeats, jit=False
    )

    ws = {s: lin.w for s, lin in editing.transformer_layers(params).items()}

    def loop():
        return [_lm_one_memory(params, ws, tokens, ids, jnp.int32(k), cfg) for k in range(K)]

    jax.block_until_ready(loop())  # compile the anchor's pass once
    anchor = H.time_python(lambda: jax.block_until_ready(loop()), repeats=args.repeats)
    err = max(
        float(
            jnp.max(jnp.abs(ours.output[n].w[k] - anchor.output[k][n]))
            / jnp.maximum(jnp.max(jnp.abs(anchor.output[k][n])), 1e-12)
        )
        for k in range(K)
        for n in anchor.output[0]
    )
    H.emit(
        bench="editing",
        case="engram_extract_10_memories_lm",
        sizes=dict(d_model=128, n_layers=2, mlp=256, batches=nb, batch=b, seq=t, memories=K),
        ours=ours,
        anchor="per_memory_loop",
        anchor_t=anchor,
        target=3.0,
        note="CPU; jaxkit.nn transformer, sites mlp_in (w_gate|w_up) and down_in (w_down), "
        "one memory per sequence; ours = collect_stats(transformer_taps) + extract (one "
        "scan, one forward per batch); anchor = one jitted pass (forward + masked "
        "covariances) + pinv per memory",
        ours_err=err,
    )


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    grid = [
        dict(layers=(64, 256, 128, 10), n=1280, batch=128),
        dict(layers=(256, 512, 512, 10), n=8192, batch=512),
    ]
    if args.full:
        grid.append(dict(layers=(1024, 1024, 1024, 10), n=32768, batch=1024))
    for sz in grid:
        key = jax.random.key(0)
        ws = _mlp(key, sz["layers"])
        nb = sz["n"] // sz["batch"]
        xb = jax.random.normal(jax.random.fold_in(key, 1), (nb, sz["batch"], sz["layers"][0]))
        ib = jax.random.randint(jax.random.fold_in(key, 2), (nb, sz["batch"]), 0, K)
        ours = H.time_jax(_ours, ws, xb, ib, repeats=args.repeats)
        jax.block_until_ready(_loop(ws, xb, ib))  # compile the anchor's pass once
        anchor = H.time_python(
            lambda ws=ws, xb=xb, ib=ib: jax.block_until_ready(_loop(ws, xb, ib)),
            repeats=args.repeats,
        )
        ref = anchor.output
        # no-bias layers: compare P_k = C^+ C_k w against the loop's
        err = max(
            float(
                jnp.max(jnp.abs(ours.output[n].w[k] - ref[k][n]))
                / jnp.maximum(jnp.max(jnp.abs(ref[k][n])), 1e-12)
            )
            for k in range(K)
            for n in ref[0]
        )
        H.emit(
            bench="editing",
            case="engram_extract_10_memories",
            sizes={**sz, "memories": K},
            ours=ours,
            anchor="per_memory_loop",
            anchor_t=anchor,
            target=3.0,
            note="CPU; ours = collect_stats + extract (one scan, grouped rows, shared eigh "
            "pinv); anchor = one jitted pass + pinv per memory (ai-engram's scheme); "
            "ai_engram (torch) not run: no torch environment",
            ours_err=err,
        )
    _lm_case(args)


if __name__ == "__main__":
    main()
