"""Kernels bench: WBMM (w7, w14) against depthwise convolutions, forward and forward+backward.

Anchors: ``depthwise_lax`` (``lax.conv_general_dilated`` with ``feature_group_count=C``)
and ``depthwise_shift_add`` (k^2 shifted multiply-adds that XLA fuses), kernel sizes 5,
7 and 13, on the WBMM-T stage shapes 56x56x80, 28x28x160, 14x14x320 at batch 8, f32.
Forward+backward takes gradients for the input and the weights (table / kernel).
Every variant of one (shape, mode) runs once per round in shuffled order; medians over
rounds are compared (paired rounds are robust to the shared machine's load). One JSON
line per (ours, anchor) pair; the issue's target (ratio >= 1) applies to WBMM w7
forward+backward against the 7x7 baselines, the other lines are reported as measured.
Quick grid: 28x28x160 (lax k13 left out); ``--full``: all shapes and kernels.
"""

import os
import random
import time

import _harness as H  # noqa: I001
import jax
import jax.numpy as jnp
from jax import lax

from jaxkit.kernels.windowed_matmul import window_matrix, windowed_matmul, windowed_matmul_cached


def depthwise_lax(x, k):
    kk = k.shape[0]
    return lax.conv_general_dilated(
        x,
        k[:, :, None, :],
        (1, 1),
        [(kk // 2, kk // 2)] * 2,
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=x.shape[-1],
    )


def depthwise_shift_add(x, k):
    kk = k.shape[0]
    p = kk // 2
    h, w = x.shape[1], x.shape[2]
    xp = jnp.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
    y = jnp.zeros_like(x)
    for i in range(kk):
        for j in range(kk):
            y = y + xp[:, i : i + h, j : j + w, :] * k[i, j].reshape(1, 1, 1, -1)
    return y


def _wbmm(window, implementation="xla"):
    return lambda x, t: windowed_matmul(x, t, window=window, implementation=implementation)


def _wbmm_cached(window):
    return lambda x, m: windowed_matmul_cached(x, m, window=window, implementation="xla")


def _fwdbwd(f, g):
    return jax.grad(lambda x, w: jnp.sum(f(x, w) * g), argnums=(0, 1))


def _time_paired(fns: dict, args: dict, rounds: int) -> dict[str, H.Timing]:
    compiled, compile_s, peak = {}, {}, {}
    for name, f in fns.items():
        t0 = time.perf_counter()
        compiled[name] = jax.jit(f).lower(*args[name]).compile()
        compile_s[name] = time.perf_counter() - t0
        peak[name] = H._compiled_mem_mb(compiled[name])
        jax.block_until_ready(compiled[name](*args[name]))  # warm-up
        jax.block_until_ready(compiled[name](*args[name]))
    times = {n: [] for n in fns}
    rng = random.Random(0)
    for _ in range(rounds):
        order = list(fns)
        rng.shuffle(order)
        for n in order:
            t0 = time.perf_counter()
            jax.block_until_ready(compiled[n](*args[n]))
            times[n].append(time.perf_counter() - t0)
    med = {n: sorted(v)[len(v) // 2] for n, v in times.items()}
    return {n: H.Timing(med[n], compile_s[n], peak[n]) for n in fns}


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    shapes = [(56, 56, 80), (28, 28, 160), (14, 14, 320)] if args.full else [(28, 28, 160)]
    batch = 8
    on_accel = jax.default_backend() != "cpu"
    for h, w, c in shapes:
        key = jax.random.key(0)
        kx, kg, kk = jax.random.split(key, 3)
        x = jax.random.normal(kx, (batch, h, w, c), jnp.float32)
        g = jax.random.normal(kg, (batch, h, w, c), jnp.float32)
        ours, anchors, inputs = {}, {}, {}
        for win in (7, 14):
            t = 0.02 * jax.random.normal(jax.random.fold_in(kk, win), (c, (2 * win - 1) ** 2))
            ours[f"wbmm_w{win}"] = (_wbmm(win), (x, t))
            ours[f"wbmm_w{win}_cachedM"] = (_wbmm_cached(win), (x, window_matrix(t, window=win)))
            if on_accel:
                ours[f"wbmm_w{win}_pallas"] = (_wbmm(win, "pallas"), (x, t))
        for ks in (5, 7, 13):
            kern = 0.02 * jax.random.normal(jax.random.fold_in(kk, 100 + ks), (ks, ks, c))
            if ks < 13 or args.full:
                anchors[f"depthwise_lax_k{ks}"] = (depthwise_lax, (x, kern))
            anchors[f"depthwise_shift_add_k{ks}"] = (depthwise_shift_add, (x, kern))
        for mode in ("fwd", "fwdbwd"):
            fns, inputs = {}, {}
            for name, (f, a) in {**ours, **anchors}.items():
                if mode == "fwdbwd" and name.endswith("cachedM"):
                    continue  # the cached M is an inference form
                fns[name] = f if mode == "fwd" else _fwdbwd(f, g)
                inputs[name] = a
            res = _time_paired(fns, inputs, args.repeats)
            load = os.getloadavg()[0]
            for on in (n for n in res if n.startswith("wbmm")):
                for an in (n for n in res if n.startswith("depthwise")):
                    anchor, ks = an.rsplit("_k", 1)
                    target = 1.0 if (mode == "fwdbwd" and on == "wbmm_w7" and ks == "7") else None
                    H.emit(
                        bench="kernels",
                        case=f"{on}_vs_{an}_{mode}",
                        sizes={
                            "batch": batch,
                            "h": h,
                            "w": w,
                            "c": c,
                            "k": int(ks),
                            "mode": mode,
                            "dtype": "float32",
                        },
                        ours=res[on],
                        anchor=anchor,
                        anchor_t=res[an],
                        target=target,
                        note=f"{jax.default_backend()}; paired rounds={args.repeats}; "
                        f"load={load:.1f}",
                    )
    kx, kt = jax.random.split(jax.random.key(1))
    x = jax.random.normal(kx, (2, 14, 14, 32), jnp.float32)
    t = 0.02 * jax.random.normal(kt, (32, 169))
    kern = 0.02 * jax.random.normal(kt, (7, 7, 32))
    H.emit(
        bench="kernels",
        case="eager_wbmm_w7_vs_depthwise_lax_k7",
        sizes={"batch": 2, "h": 14, "w": 14, "c": 32, "dtype": "float32"},
        ours=H.time_jax(_wbmm(7), x, t, repeats=args.repeats, jit=False),
        anchor="depthwise_lax",
        anchor_t=H.time_jax(depthwise_lax, x, kern, repeats=args.repeats, jit=False),
        target=None,
        note="informational: eager call time (no jit around the call)",
    )


if __name__ == "__main__":
    main()
