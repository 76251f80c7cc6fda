"""Steering: the cost of ``interventions=`` and of SVGT generation on a jaxkit.nn model.

1. ``forward_no_interventions``: a plain ``nn.apply`` forward (``interventions=None``)
   against a frozen copy of the forward before the mechanism existed
   (``tests/nn/_forward_v0.py``; anchor ``no_interventions``, target ratio >= 0.95).
2. ``svgt_generate_tokens_per_s``: greedy cached generation with the SVGT adapter on
   (bridge built from the prompt, inserted after block l, cached decoding with the
   span hidden below l) against ``decoding.ar_generate`` on the same backbone
   (anchor ``adapter_off``, target ratio >= 0.77, i.e. overhead <= 1.3x).
   ``svgt_generate_refresh_tokens_per_s``: the same with the EMA bridge refresh
   every 5 steps (reported, no target).
3. ``svgt_generate_steered_tokens_per_s``: two methods on one model, SVGT with a CAA
   vector added after block l + 1 (``interventions=steer_add(...)``), against SVGT alone
   (anchor ``svgt_alone``; reported, no target: what composing costs).

Compiled functions are timed interleaved (one call of each per round, median over
rounds), so load drift on a shared machine hits both alike.
"""

import re

import _harness as H  # noqa: I001
import jax
import jax.numpy as jnp

from jaxkit import decoding, nn
from tests.nn import _forward_v0


def _strip(text):
    return re.sub(r"loc\([^)]*\)", "", text)


def bench_forward(sz, repeats):
    cfg = H.transformer_config(sz["d_model"], sz["n_layers"])
    params = nn.init_params(cfg, key=jax.random.key(0))
    tok = jax.random.randint(jax.random.key(1), (sz["batch"], sz["seq"]), 0, 256)
    fns = {
        "ours": (lambda p, x: nn.apply(p, cfg, x).logits, (params, tok)),
        "old": (lambda p, x: _forward_v0.apply(p, cfg, x).logits, (params, tok)),
    }
    # the lowered programs, call names and locations stripped: identical means the
    # ratio is pure timing noise
    hlo = {n: jax.jit(f).lower(*a).as_text() for n, (f, a) in fns.items()}
    same = [_strip(hlo["ours"]).replace("_apply_core", "apply_traced")] == [_strip(hlo["old"])]
    t = H.time_interleaved(fns, repeats)
    H.emit(
        bench="steering",
        case="forward_no_interventions",
        sizes=sz,
        ours=t["ours"],
        anchor="no_interventions",
        anchor_t=t["old"],
        target=0.95,
        note="nn.apply(interventions=None) vs the forward before the mechanism (frozen copy)",
        same_program=same,
    )


def bench_generate(sz, repeats):
    try:
        from jaxkit import steering
    except ImportError:
        return
    cfg = H.transformer_config(sz["d_model"], sz["n_layers"])
    params = nn.init_params(cfg, key=jax.random.key(0))
    scfg = steering.SVGTConfig(layer=sz["n_layers"] - 2, n_bridge=5, value_dim=64)
    vparams = steering.init_svgt(cfg, scfg, key=jax.random.key(2))
    b, p, n = sz["batch"], sz["prompt"], sz["new"]
    prompt = jax.random.randint(jax.random.key(1), (b, p), 0, 256)
    plen = jnp.full((b,), p, jnp.int32)
    key = jax.random.key(3)

    def on(pa, vp, pr, pl):
        return steering.svgt_generate(pa, cfg, vp, scfg, pr, pl, key=key, max_new_tokens=n).tokens

    def off(pa, vp, pr, pl):
        return decoding.ar_generate(pa, cfg, pr, pl, key=key, max_new_tokens=n).tokens

    rcfg = scfg._replace(refresh_every=5, ema=0.8)

    def refresh(pa, vp, pr, pl):
        return steering.svgt_generate(pa, cfg, vp, rcfg, pr, pl, key=key, max_new_tokens=n).tokens

    vec = jax.random.normal(jax.random.key(4), (sz["d_model"],))

    def steered(pa, vp, pr, pl):
        iv = steering.steer_add(vec, 0.5, layer=scfg.layer + 1)
        return steering.svgt_generate(
            pa, cfg, vp, scfg, pr, pl, key=key, max_new_tokens=n, interventions=iv
        ).tokens

    args = (params, vparams, prompt, plen)
    fns = {
        "on": (on, args),
        "off": (off, args),
        "refresh": (refresh, args),
        "steered": (steered, args),
    }
    t = H.time_interleaved(fns, repeats)
    H.emit(
        bench="steering",
        case="svgt_generate_tokens_per_s",
        sizes=sz,
        ours=t["on"],
        anchor="adapter_off",
        anchor_t=t["off"],
        target=0.77,
        note=f"greedy; tokens/s on={b * n / t['on'].median_s:.0f}, "
        f"off={b * n / t['off'].median_s:.0f} (bridge built once per prompt, no refresh)",
    )
    H.emit(
        bench="steering",
        case="svgt_generate_refresh_tokens_per_s",
        sizes=sz,
        ours=t["refresh"],
        anchor="adapter_off",
        anchor_t=t["off"],
        target=None,
        note=f"greedy; EMA bridge refresh every 5 steps (beta 0.8, exact K/V rewrite); "
        f"tokens/s {b * n / t['refresh'].median_s:.0f}",
    )
    H.emit(
        bench="steering",
        case="svgt_generate_steered_tokens_per_s",
        sizes=sz,
        ours=t["steered"],
        anchor="svgt_alone",
        anchor_t=t["on"],
        target=None,
        note=f"greedy; SVGT + a CAA vector after block l + 1 (interventions=) vs SVGT alone; "
        f"tokens/s {b * n / t['steered'].median_s:.0f}",
    )


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    fwd = [dict(d_model=128, n_layers=4, batch=8, seq=128)]
    gen = [dict(d_model=128, n_layers=4, batch=8, prompt=16, new=32)]
    if args.full:
        fwd.append(dict(d_model=256, n_layers=8, batch=8, seq=512))
        gen.append(dict(d_model=256, n_layers=8, batch=16, prompt=64, new=128))
    for sz in fwd:
        bench_forward(sz, 3 * args.repeats)
    for sz in gen:
        bench_generate(sz, args.repeats)


if __name__ == "__main__":
    main()
