"""KV-cached decoding of jaxkit.nn's transformer against recomputing without a cache.

Cases per prompt length L (batch B, random f32 weights):
  prefill      — `nn.prefill` (forward + cache writes) vs a plain forward of L tokens
                 (anchor `no_cache`); target 0.8 (the cache writes cost <= 25 %).
  decode_token — one `nn.decode_step` on a cache holding L tokens (logits and the updated
                 cache returned) vs recomputing the full L+1 sequence for that one token
                 (anchor `no_cache`); target 1.
  generate_16  — 16 greedy tokens after the prompt: a `lax.scan` of decode steps vs a
                 `lax.scan` of full causal recomputes over a fixed buffer (anchor
                 `no_cache`); tokens compared; target 1.
  decode_token_per_layer — the same jitted step on per-layer parameters and cache
                 (`nn.unstack_layers`) vs on the stacked ones (anchor `stacked_layers`): a
                 program holding one step copies each block's weight slice and K/V slice
                 per call on XLA:CPU; per-layer storage has none to copy (same logits).
                 Informational; also at d_model 512, 8 blocks, B 1, L 64 (101 MB of
                 weights), where the copies dominate.
  decode_16_per_layer — 16 greedy decode steps in a `lax.scan` from the prefilled cache,
                 on per-layer parameters and cache vs on the stacked ones (anchor
                 `stacked_layers`): in a loop the weight slices are hoisted, but each step
                 copies every block's K/V slice of a stacked cache. Same tokens.
                 Informational.
  decode_long_cache — 16 greedy decode steps (`lax.scan`) after a 64-token prompt in a
                 cache of capacity 1024 (a generous `max_len`), 4 and 2 KV heads: cached
                 attention reads only the prefix its mask sees (CPU, `nn` page "Cached
                 attention reads the visible prefix") vs the same program compiled with
                 that choice off (`jaxkit.nn._attention._PREFIX_MIN` raised, anchor
                 `whole_buffer`, same process). Same tokens. Informational.
  eager_decode — (smallest L only) `nn.decode_step` called eagerly, as from a Python
                 loop, vs the anchor `no_cache` (`nn.apply` of L+1 tokens) called
                 eagerly; both are jitted at module level, so an eager call costs one
                 dispatch; target 1.
"""

import _harness as H  # noqa: I001

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import nn

N_NEW = 16


def _cfg():
    return nn.TransformerConfig(
        vocab_size=256,
        d_model=128,
        n_layers=4,
        n_heads=8,
        n_kv_heads=4,
        head_dim=16,
        mlp_dim=384,
        qkv_bias=True,
        family="qwen2",
    )


def _per_layer_step(cfg, params, nxt, cache, sizes, stacked, repeats):
    """Emit ``decode_token_per_layer``: one jitted step, per-layer vs stacked storage."""
    ours = H.time_jax(
        lambda p, t, c: nn.decode_step(p, cfg, t, c),
        nn.unstack_layers(params),
        nxt,
        nn.unstack_layers(cache),
        repeats=repeats,
    )
    H.emit(
        bench="nn",
        case="decode_token_per_layer",
        sizes=sizes,
        ours=ours,
        anchor="stacked_layers",
        anchor_t=stacked,
        target=None,
        note="one jitted step: per-layer params and cache (nn.unstack_layers) vs stacked",
        ours_err=float(jnp.max(jnp.abs(ours.output.logits - stacked.output.logits))),
    )


def _per_layer_loop(cfg, params, nxt, cache, sizes, repeats):
    """Emit ``decode_16_per_layer``: a scan of 16 steps, per-layer vs stacked storage."""

    def loop(p, t, c):
        def body(carry, _):
            tok, c = carry
            lg, c = nn.decode_step(p, cfg, tok, c)
            tok = jnp.argmax(lg, -1).astype(jnp.int32)
            return (tok, c), tok

        return jax.lax.scan(body, (t, c), None, length=N_NEW)[1]

    anc = H.time_jax(loop, params, nxt, cache, repeats=repeats)
    ours = H.time_jax(
        loop, nn.unstack_layers(params), nxt, nn.unstack_layers(cache), repeats=repeats
    )
    same = float(np.mean(np.asarray(ours.output) == np.asarray(anc.output)))
    H.emit(
        bench="nn",
        case=f"decode_{N_NEW}_per_layer",
        sizes=sizes,
        ours=ours,
        anchor="stacked_layers",
        anchor_t=anc,
        target=None,
        note="scan of decode steps: per-layer params and cache vs stacked",
        token_agreement=same,
    )


def _wide_per_layer(repeats):
    """``decode_token_per_layer`` at d_model 512, 8 blocks, B 1, L 64 (101 MB of weights)."""
    cfg = H.transformer_config(
        512, 8, vocab_size=4096, n_heads=8, n_kv_heads=8, head_dim=64, mlp_dim=2048
    )
    params = nn.init_params(cfg, key=jax.random.key(1))
    toks = jax.random.randint(jax.random.key(2), (1, 64), 0, cfg.vocab_size)
    cache = nn.prefill(params, cfg, toks, jnp.array([64]), max_len=64 + N_NEW).cache
    nxt = jnp.zeros((1,), jnp.int32)
    stacked = H.time_jax(
        lambda p, t, c: nn.decode_step(p, cfg, t, c), params, nxt, cache, repeats=repeats
    )
    sizes = {"B": 1, "L": 64, "D": cfg.d_model, "layers": cfg.n_layers}
    _per_layer_step(cfg, params, nxt, cache, sizes, stacked, repeats)


def _long_cache(repeats):
    """``decode_long_cache``: 16 steps on a 1024-slot cache holding 64 tokens, prefix vs whole."""
    from jaxkit.nn import _attention  # the bench's anchor: the choice off (a private switch)

    for kv in (4, 2):
        cfg = H.transformer_config(128, 4, n_heads=8, n_kv_heads=kv, head_dim=16)
        params = nn.unstack_layers(nn.init_params(cfg, key=jax.random.key(3)))
        toks = jax.random.randint(jax.random.key(4), (4, 64), 0, cfg.vocab_size)
        lens = jnp.full((4,), 64, jnp.int32)

        def gen(p, t, cfg=cfg, lens=lens):
            logits, c = nn.prefill(p, cfg, t, lens, max_len=1024)

            def body(carry, _):
                lg, c = carry
                tok = jnp.argmax(lg, -1).astype(jnp.int32)
                lg, c = nn.decode_step(p, cfg, tok, c)
                return (lg, c), tok

            return jax.lax.scan(body, (logits, c), None, length=N_NEW)[1].T

        old = _attention._PREFIX_MIN
        _attention._PREFIX_MIN = 1 << 30
        jax.clear_caches()  # the module-level jits would reuse the other program's trace
        try:
            anc = H.time_jax(gen, params, toks, repeats=repeats)
        finally:
            _attention._PREFIX_MIN = old
            jax.clear_caches()
        ours = H.time_jax(gen, params, toks, repeats=repeats)
        same = float(np.mean(np.asarray(ours.output) == np.asarray(anc.output)))
        H.emit(
            bench="nn",
            case="decode_long_cache",
            sizes={"B": 4, "L": 64, "capacity": 1024, "new": N_NEW, "kv_heads": kv},
            ours=ours,
            anchor="whole_buffer",
            anchor_t=anc,
            target=None,
            note="16 greedy steps after a 64-token prompt, capacity 1024: attention over "
            "the visible cache prefix vs the whole buffer (same program, choice off)",
            token_agreement=same,
        )


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    cfg = _cfg()
    params = nn.init_params(cfg, key=jax.random.key(0))
    batch = 4
    lengths = [64, 128, 256, 512] + ([1024, 2048] if args.full else [])
    for L in lengths:
        sizes = {"B": batch, "L": L, "D": cfg.d_model, "layers": cfg.n_layers}
        toks = jax.random.randint(jax.random.key(L), (batch, L), 0, cfg.vocab_size)
        lens = jnp.full((batch,), L, jnp.int32)
        cap = L + N_NEW

        def pre(p, t, lens=lens, cap=cap):
            return nn.prefill(p, cfg, t, lens, max_len=cap)

        def plain(p, t):
            return nn.apply(p, cfg, t).logits[:, -1]

        ours = H.time_jax(pre, params, toks, repeats=args.repeats)
        anc = H.time_jax(plain, params, toks, repeats=args.repeats)
        err = float(jnp.max(jnp.abs(ours.output[0] - anc.output)))
        H.emit(
            bench="nn",
            case="prefill",
            sizes=sizes,
            ours=ours,
            anchor="no_cache",
            anchor_t=anc,
            target=0.8,
            note="prefill incl. cache writes vs plain forward",
            ours_err=err,
        )

        _, cache = jax.jit(pre)(params, toks)
        nxt = jnp.zeros((batch,), jnp.int32)
        # The step returns its cache too (as every caller uses it): a timed function that
        # dropped it would let XLA skip the cache write, which no real step can.
        ours = H.time_jax(
            lambda p, t, c: nn.decode_step(p, cfg, t, c),
            params,
            nxt,
            cache,
            repeats=args.repeats,
        )
        full = jnp.concatenate([toks, nxt[:, None]], axis=1)
        anc = H.time_jax(plain, params, full, repeats=args.repeats)
        err = float(jnp.max(jnp.abs(ours.output.logits - anc.output)))
        H.emit(
            bench="nn",
            case="decode_token",
            sizes=sizes,
            ours=ours,
            anchor="no_cache",
            anchor_t=anc,
            target=1.0,
            note="one token given L cached vs recompute L+1",
            ours_err=err,
        )

        _per_layer_step(cfg, params, nxt, cache, sizes, ours, args.repeats)
        _per_layer_loop(cfg, params, nxt, cache, sizes, args.repeats)

        if L == lengths[0]:
            ours = H.time_jax(
                lambda p, t, c: nn.decode_step(p, cfg, t, c).logits,
                params,
                nxt,
                cache,
                repeats=args.repeats,
                jit=False,
            )
            anc = H.time_jax(plain, params, full, repeats=args.repeats, jit=False)
            H.emit(
                bench="nn",
                case="eager_decode",
                sizes=sizes,
                ours=ours,
                anchor="no_cache",
                anchor_t=anc,
                target=1.0,
                note="eager calls (no user jit): cached step vs recompute L+1",
                ours_err=float(jnp.max(jnp.abs(ours.output - anc.output))),
            )

        def gen_cached(p, t, lens=lens, cap=cap):
            logits, c = nn.prefill(p, cfg, t, lens, max_len=cap)

            def body(carry, _):
                lg, c = carry
                tok = jnp.argmax(lg, -1).astype(jnp.int32)
                lg, c = nn.decode_step(p, cfg, tok, c)
                return (lg, c), tok

            _, out = jax.lax.scan(body, (logits, c), None, length=N_NEW)
            return out.T

        def gen_recompute(p, t, L=L):
            buf = jnp.concatenate([t, jnp.zeros((batch, N_NEW), jnp.int32)], axis=1)

            def body(buf, i):
                lg = nn.apply(p, cfg, buf).logits
                lg = jax.lax.dynamic_index_in_dim(lg, L - 1 + i, axis=1, keepdims=False)
                tok = jnp.argmax(lg, -1).astype(jnp.int32)
                buf = jax.lax.dynamic_update_index_in_dim(buf, tok[:, None], L + i, axis=1)
                return buf, tok

            _, out = jax.lax.scan(body, buf, jnp.arange(N_NEW))
            return out.T

        ours = H.time_jax(gen_cached, params, toks, repeats=2)
        anc = H.time_jax(gen_recompute, params, toks, repeats=2)
        same = float(np.mean(np.asarray(ours.output) == np.asarray(anc.output)))
        H.emit(
            bench="nn",
            case=f"generate_{N_NEW}",
            sizes=sizes,
            ours=ours,
            anchor="no_cache",
            anchor_t=anc,
            target=1.0,
            note="greedy tokens, cached scan vs full recompute scan",
            token_agreement=same,
        )
    _wide_per_layer(args.repeats)
    _long_cache(args.repeats)


if __name__ == "__main__":
    main()
