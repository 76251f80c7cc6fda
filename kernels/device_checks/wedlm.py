"""Device check of the WeDLM decode loop: tokens/s of ``wedlm_generate`` vs ``ar_generate``
(AR + KV cache) on the same device, with the same committed model.

Model: the ``wedlm_counting`` fixture (``jaxkit.io.load_fixture``), noise-free counting
prompts from ``jaxkit.nn.tiny_task("noisy_counting", level=0)``, 28 new tokens, greedy.
Two regimes: batch 1 (``lax.map`` over the prompts inside one jitted call: the latency
setting of the paper) and one batch of all prompts. Each row times AR and WeDLM
round-robin (median over rounds) and reports tokens/s of both, the speedup (AR time /
WeDLM time), and ``err`` = the exact-match accuracy WeDLM loses against AR (ok when
``err <= 0.01``: no prompt lost).
``--interpret``: a CPU dry run (4 prompts in 2 groups, 8 new tokens, one window); its
timings mean nothing. Rows are written after each case, and the module stops starting
new cases when its time budget (``DEVICE_CHECK_BUDGET_S``, set by run_device_checks.sh)
is nearly spent.
"""

import _common as C  # noqa: I001

import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import io, nn
from jaxkit.decoding import ar_generate, wedlm_generate

KERNEL = "wedlm_decode"
SPEC = nn.NOISY_COUNTING
TOL = 0.01  # exact-match accuracy WeDLM may lose against AR (one point)


def _mapped(fn, batch):
    """Decode the prompts in groups of ``batch`` rows, one group after another, in one call."""

    def run(params, pr, pl):
        g = pr.shape[0] // batch
        out = jax.lax.map(
            lambda a: fn(params, a[0], a[1]), (pr.reshape(g, batch, -1), pl.reshape(g, batch))
        )
        return out.tokens.reshape(pr.shape[0], -1), jnp.sum(out.stats.n_forward)

    return run


def _exact_match(prompt, toks):
    seq = np.concatenate([np.asarray(prompt), np.asarray(toks)], axis=1).astype(np.int32)
    acc = np.asarray(nn.tiny_task_accuracy("noisy_counting", seq, start=SPEC.prompt_len))
    return float(np.mean(acc == 1.0))


def _round_robin(fs: dict, args: tuple, rounds: int) -> dict:
    ts: dict = {k: [] for k in fs}
    for _ in range(rounds):
        for k, f in fs.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f(*args))
            ts[k].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in ts.items()}


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0])
    deadline = C.deadline()
    if args.interpret:
        n_prompts, new, rounds = 4, 8, 2
        plan = [(2, 4, 1.2)]  # two groups of two rows: the lax.map and the batch
    else:
        n_prompts, new, rounds = 64, 28, max(args.repeats, 5)
        plan = [(1, 4, 1.2), (1, 8, 0.4), (1, 16, 0.4), (64, 4, 1.2), (64, 8, 0.4)]
    params, cfg, _ = io.load_fixture("wedlm_counting")
    data = nn.tiny_task(
        "noisy_counting",
        key=jax.random.key(123),
        batch=n_prompts,
        length=SPEC.prompt_len + new,
        level=0,
    )
    prompt = data.tokens[:, : SPEC.prompt_len]
    plen = jnp.full((n_prompts,), SPEC.prompt_len, jnp.int32)
    key = jax.random.key(0)
    dev = jax.devices()[0].platform
    rows: list[dict] = []
    ar_cache: dict = {}
    for batch, window, tau in plan:
        if time.monotonic() > deadline:
            print(f"time budget spent: skipping batch {batch} W={window}", flush=True)
            continue
        case = f"counting b{batch} x{n_prompts // batch} W{window} tau{tau:g} new{new} {dev}"
        try:
            if batch not in ar_cache:
                ar = jax.jit(
                    _mapped(
                        lambda p, a, b: ar_generate(
                            p, cfg, a, b, key=key, max_new_tokens=new, temperature=0.0
                        ),
                        batch,
                    )
                )
                ar_toks, _ = jax.block_until_ready(ar(params, prompt, plen))
                ar_cache[batch] = (ar, _exact_match(prompt, ar_toks))
            ar, acc_ar = ar_cache[batch]
            we = jax.jit(
                _mapped(
                    lambda p, a, b, w=window, t=tau: wedlm_generate(
                        p,
                        cfg,
                        a,
                        b,
                        key=key,
                        mask_token_id=SPEC.mask_id,
                        max_new_tokens=new,
                        window=w,
                        entropy_threshold=t,
                        temperature=0.0,
                    ),
                    batch,
                )
            )
            we_toks, n_fwd = jax.block_until_ready(we(params, prompt, plen))
            acc_we = _exact_match(prompt, we_toks)
            t = _round_robin({"ar": ar, "wedlm": we}, (params, prompt, plen), rounds)
            n_tok = n_prompts * new
            rows.append(
                {
                    "kernel": KERNEL,
                    "case": case,
                    "dtype": "float32",
                    "mode": "greedy",
                    "err": max(0.0, acc_ar - acc_we),
                    "tol": TOL,
                    "ok": bool(acc_ar - acc_we <= TOL),
                    "times_ms": {"wedlm": 1e3 * t["wedlm"], "ar_kv_cache": 1e3 * t["ar"]},
                    "extra": {
                        "tok/s wedlm": n_tok / t["wedlm"],
                        "tok/s ar": n_tok / t["ar"],
                        "speedup": t["ar"] / t["wedlm"],
                        "tok/fwd": new / (int(n_fwd) + n_prompts // batch) * (n_prompts // batch),
                        "acc wedlm": acc_we,
                        "acc ar": acc_ar,
                    },
                }
            )
        except Exception as e:  # noqa: BLE001  (report, keep going)
            rows.append(C.failed_row(KERNEL, case, "float32", "greedy", e))
        C.write_rows(args.out, rows)
        print(rows[-1], flush=True)
    C.write_rows(args.out, rows)


if __name__ == "__main__":
    main()
