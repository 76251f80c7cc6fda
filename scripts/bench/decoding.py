"""WeDLM streaming decoding vs AR + KV cache on the committed counting model.

Same model, same 20 held-out prompts, 28 new tokens. Headline regime: one request
at a time (batch 1, ``lax.map`` over the prompts inside one jitted call), the
latency setting of the paper's comparisons. The AR call and the WeDLM calls of a
task level are timed round-robin (AR, WeDLM(W, tau), ..., repeated), so that load
from other jobs on a shared machine falls on both alike. Each line: wall-clock
ratio (median AR time / median WeDLM time) at one (window, tau), the median of the
per-round ratios and the min-time ratio, tokens per forward, and exact-match error
of both decoders. These plain-window lines are informational (no target): the plain
window is slower than AR on noisy text by construction. The ``best_rho0`` line is the
best (W, tau) of the noise-free task within 1 point of AR's exact match.
The ``wedlm_adaptive_vs_ar/.../paired5`` lines are the headline: the adaptive window
(``min_accept=2.5``: one-token AR steps while the average of tokens decided per window
forward is < 2.5) at W=4, tau=1.2 on rho = 0, 0.05, 0.2, greedy and sampled; ratio =
median of five paired runs (each the median per-round ratio of 7 round-robin rounds);
targets 2.5 on rho=0 and 0.95 on the noisy levels.
Both decoders draw through the fused sampler (``kernels.sampling.sample_tokens``);
``sampler=greedy`` lines decode at temperature 0, ``sampler=sampled`` lines at
temperature 0.7 with top-p 0.9 (the same compiled programs: the sampler's
hyperparameters are traced). An ``eager`` line times one eager call of
each decoder on all 20 prompts (the public functions are jitted at module level,
so an eager call after the first compiles nothing).
Each paired5 cell gets a second line, ``.../paired5/pinned`` with ``"pinned": 1``
(informational, no target): the same paired runs in a child process pinned to one
core before JAX starts (so XLA:CPU runs one thread, like ``taskset -c 0``). The
headline stays unpinned (what a user of this machine sees); the pinned line shows
how much of the ratio is the anchor's thread overhead on two cores rather than work.
``--full`` adds more taus, the noisy task levels at every tau and batch 20.
"""

import os
import statistics
import subprocess
import sys
import time

_PIN_ENV = "JAXKIT_BENCH_DECODING_PINNED"
if os.environ.get(_PIN_ENV):  # the pinned child: one core before XLA sizes its thread pool
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import _harness as H  # noqa: E402, I001
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(H.ROOT, "examples"))

from jaxkit import io  # noqa: E402
from jaxkit.decoding import _counting as C  # noqa: E402
from jaxkit.decoding import ar_generate, wedlm_generate  # noqa: E402

NEW, N_PROMPTS, TARGET, LAMBDA = 28, 20, 2.5, 0.02
SAMPLERS = {
    "greedy": {"temperature": 0.0, "top_p": 1.0, "min_p": 0.0},
    "sampled": {"temperature": 0.7, "top_p": 0.9, "min_p": 0.0},
}
# The headline setting (adaptive window): W=4, tau=1.2, AR steps below 2.5 tokens/forward.
# Chosen in wave 30 from a sweep on per-layer storage (docs/areas/decoding.md): every cell
# at or above wave 29's W=6, tau=0.4, min_accept=2 (W=6 needs 5.85 forwards a prompt
# against W=4's 7, but a 12-row forward costs more than the 8-row one saves), exact match
# equal to AR on every level. W=6 at tau>=0.8 or W=5 at tau=1.2 lose a prompt.
ADAPT = {"window": 4, "tau": 1.2, "min_accept": 2.5, "probe_every": 32}
TARGET_NOISY, PAIRED_RUNS, PAIRED_ROUNDS = 0.95, 5, 7


def _score(seq, toks, d, level):
    cons = C.rule_consistency(seq[:, C.PROMPT_LEN - 1], np.asarray(toks), d)
    return float(np.mean(cons == 1.0)) if C.LEVELS[level] == 0.0 else float(np.mean(cons))


def _mapped(fn, batch):
    """Decode the prompts in groups of ``batch`` rows, sequentially, in one jitted call."""

    def run(params, pr, pl, *extra):
        g = pr.shape[0] // batch
        out = jax.lax.map(
            lambda a: fn(params, a[0], a[1], *extra),
            (pr.reshape(g, batch, -1), pl.reshape(g, batch)),
        )
        return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]) if x.ndim > 1 else x, out)

    return run


def _compiled(fn, *args):
    """Compile once (tau is traced, so one program serves the whole sweep)."""
    t0 = time.perf_counter()
    c = jax.jit(fn).lower(*args).compile()
    return c, time.perf_counter() - t0


def _round_robin(calls: dict, repeats: int, cpu: dict | None = None) -> dict:
    """Warm up, then time every call once per round for ``repeats`` rounds.

    Wall-clock times are returned; process CPU times go to ``cpu`` when given.
    """
    outs = {k: jax.block_until_ready(f(*a)) for k, (f, a) in calls.items()}
    ts: dict = {k: [] for k in calls}
    for _ in range(repeats):
        for k, (f, a) in calls.items():
            t0, c0 = time.perf_counter(), time.process_time()
            jax.block_until_ready(f(*a))
            ts[k].append(time.perf_counter() - t0)
            if cpu is not None:
                cpu.setdefault(k, []).append(time.process_time() - c0)
    return {k: (outs[k], np.asarray(v)) for k, v in ts.items()}


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    args.repeats = max(args.repeats, 9)
    params, cfg, _ = io.load_fixture(C.FIXTURE)
    key = jax.random.key(0)
    if os.environ.get(_PIN_ENV):
        paired_lines(params, cfg, key, pinned=True)
        return
    # W=4: on CPU a forward's cost grows with its physical width (2W slots) and the
    # fixture's forwards per prompt is at W=4's bound (N/W) for tau >= 0.8.
    grid = {4: [0.4, 0.8, 1.2], 8: [0.2, 0.4]}
    if args.full:
        grid = {4: [0.2, 0.4, 0.6, 0.8, 1.2, 1.6], 8: [0.1, 0.2, 0.4, 0.8], 16: [0.2, 0.4]}
    batches = (1, 20) if args.full else (1,)
    best = None
    for batch in batches:
        pr0 = jnp.zeros((N_PROMPTS, C.PROMPT_LEN), jnp.int32)
        pl = jnp.full((N_PROMPTS,), C.PROMPT_LEN, jnp.int32)
        f0 = jnp.float32(0.0)
        ar_c, ar_cs = _compiled(
            _mapped(
                lambda p, a, b, t, tp, mp: ar_generate(
                    p,
                    cfg,
                    a,
                    b,
                    key=key,
                    max_new_tokens=NEW,
                    temperature=t,
                    top_p=tp,
                    min_p=mp,
                ),
                batch,
            ),
            params,
            pr0,
            pl,
            f0,
            f0 + 1,
            f0,
        )
        we_c = {
            w: _compiled(
                _mapped(
                    lambda p, a, b, tau, t, tp, mp, w=w: wedlm_generate(
                        p,
                        cfg,
                        a,
                        b,
                        key=key,
                        mask_token_id=C.MASK_ID,
                        max_new_tokens=NEW,
                        window=w,
                        entropy_threshold=tau,
                        pos_penalty=LAMBDA,
                        temperature=t,
                        top_p=tp,
                        min_p=mp,
                    ),
                    batch,
                ),
                params,
                pr0,
                pl,
                jnp.float32(0.4),
                f0,
                f0 + 1,
                f0,
            )
            for w in grid
        }
        runs = [("greedy", level) for level in (0, 1, 2)] + [("sampled", 0)]
        for sampler, level in runs:
            sv = tuple(jnp.float32(v) for v in SAMPLERS[sampler].values())
            rng = np.random.default_rng(1000 + level)
            seq, d, _ = C.counting_batch(rng, N_PROMPTS, NEW, level)
            pr = jnp.asarray(seq[:, : C.PROMPT_LEN])
            configs = [
                (w, tau)
                for w, taus in grid.items()
                for tau in (taus if (args.full or (level, sampler) == (0, "greedy")) else taus[-1:])
            ]
            calls = {"ar": (ar_c, (params, pr, pl, *sv))}
            for w, tau in configs:
                calls[(w, tau)] = (we_c[w][0], (params, pr, pl, jnp.float32(tau), *sv))
            res = _round_robin(calls, args.repeats)
            (t_ar, l_ar, s_ar), ts_ar = res["ar"]  # Generation(tokens, lengths, stats)
            acc_ar = _score(seq, t_ar, d, level)
            tpf_ar = float(np.sum(l_ar) / np.sum(s_ar.row_forwards))
            anchor = H.Timing(float(np.median(ts_ar)), ar_cs, None)
            for w, tau in configs:
                (toks, lens, st), ts = res[(w, tau)]
                acc = _score(seq, toks, d, level)
                tpf = float(np.sum(lens) / np.sum(st.row_forwards))
                ours = H.Timing(float(np.median(ts)), we_c[w][1], H._compiled_mem_mb(we_c[w][0]))
                line = H.emit(
                    bench="decoding",
                    case=f"wedlm_vs_ar/{sampler}/rho{C.LEVELS[level]:g}",
                    sizes={
                        "prompts": N_PROMPTS,
                        "new": NEW,
                        "batch": batch,
                        "window": w,
                        "tau": tau,
                        "lambda": LAMBDA,
                        **SAMPLERS[sampler],
                    },
                    ours=ours,
                    anchor="ar_kv_cache",
                    anchor_t=anchor,
                    target=None,
                    note=(
                        "plain window (no adaptive fallback), informational; round-robin "
                        "timing; err = 1 - "
                        + ("exact match" if level == 0 else "rule consistency")
                        + "; tpf = tokens per forward after the prefill; fwd_per_prompt "
                        "counts the prefill forward too"
                    ),
                    ours_err=1.0 - acc,
                    anchor_err=1.0 - acc_ar,
                    tpf=tpf,
                    tpf_ar=tpf_ar,
                    fwd_per_prompt=float(np.sum(st.row_forwards)) * batch / N_PROMPTS + 1,
                    fwd_per_prompt_ar=float(np.sum(s_ar.row_forwards)) * batch / N_PROMPTS + 1,
                    ratio_paired=float(statistics.median(ts_ar / ts)),
                    ratio_min=float(ts_ar.min() / ts.min()),
                    tokens_per_s=float(np.sum(lens) / ours.median_s),
                    tokens_per_s_ar=float(np.sum(l_ar) / anchor.median_s),
                )
                if (
                    level == 0
                    and sampler == "greedy"
                    and batch == 1
                    and acc >= acc_ar - 0.01
                    and (best is None or line["ratio"] > best["ratio"])
                ):
                    best = line
    if best is not None:
        print(
            H.json.dumps(
                {
                    **best,
                    "case": "wedlm_vs_ar/greedy/best_rho0",
                    "note": "best (window, tau) of the rho=0 lines at <= 1 point "
                    "below AR exact match (batch 1)",
                }
            ),
            flush=True,
        )
    paired_lines(params, cfg, key)
    pinned_lines()
    eager_line(params, cfg, args.repeats)


def pinned_lines() -> None:
    """The paired5 cells again in a child process pinned to one core (``"pinned": 1``)."""
    if not hasattr(os, "sched_setaffinity"):  # not Linux: no pinned lines
        return
    env = {**os.environ, _PIN_ENV: "1"}
    subprocess.run([sys.executable, os.path.abspath(__file__)], env=env, check=True)


def paired_lines(params, cfg, key, *, pinned: bool = False) -> None:
    """The headline: adaptive WeDLM vs AR, median of five paired runs per (sampler, rho).

    Each run times AR and WeDLM round-robin (``PAIRED_ROUNDS`` rounds) and keeps the
    median of the per-round ratios; the line's ratio is the median of the runs'.
    ``pinned``: this process runs on one core; the lines are informational (no target).
    """
    pl = jnp.full((N_PROMPTS,), C.PROMPT_LEN, jnp.int32)
    pr0 = jnp.zeros((N_PROMPTS, C.PROMPT_LEN), jnp.int32)
    f0 = jnp.float32(0.0)
    args0 = (params, pr0, pl, f0, f0 + 1, f0)

    def ar(p, a, b, t, tp, mp):
        return ar_generate(
            p, cfg, a, b, key=key, max_new_tokens=NEW, temperature=t, top_p=tp, min_p=mp
        )

    def we(p, a, b, t, tp, mp):
        return wedlm_generate(
            p,
            cfg,
            a,
            b,
            key=key,
            mask_token_id=C.MASK_ID,
            max_new_tokens=NEW,
            window=ADAPT["window"],
            entropy_threshold=ADAPT["tau"],
            pos_penalty=LAMBDA,
            temperature=t,
            top_p=tp,
            min_p=mp,
            min_accept=ADAPT["min_accept"],
            probe_every=ADAPT["probe_every"],
        )

    ar_c, ar_cs = _compiled(_mapped(ar, 1), *args0)
    we_c, we_cs = _compiled(_mapped(we, 1), *args0)
    for sampler in SAMPLERS:
        sv = tuple(jnp.float32(v) for v in SAMPLERS[sampler].values())
        for level in (0, 1, 2):
            seq, d, _ = C.counting_batch(np.random.default_rng(1000 + level), N_PROMPTS, NEW, level)
            pr = jnp.asarray(seq[:, : C.PROMPT_LEN])
            calls = {"ar": (ar_c, (params, pr, pl, *sv)), "we": (we_c, (params, pr, pl, *sv))}
            runs, all_ar, all_we, runs_cpu = [], [], [], []
            for _ in range(PAIRED_RUNS):
                cpu: dict = {}
                res = _round_robin(calls, PAIRED_ROUNDS, cpu)
                runs.append(float(statistics.median(res["ar"][1] / res["we"][1])))
                runs_cpu.append(float(statistics.median(np.asarray(cpu["ar"]) / cpu["we"])))
                all_ar.extend(res["ar"][1])
                all_we.extend(res["we"][1])
            (t_ar, _, s_ar), (toks, lens, st) = res["ar"][0], res["we"][0]
            acc_ar, acc = _score(seq, t_ar, d, level), _score(seq, toks, d, level)
            ratio = float(statistics.median(runs))
            target = TARGET if level == 0 else TARGET_NOISY
            extra = {"ok": bool(ratio >= target and acc >= acc_ar - 0.01)}
            if pinned:
                target, extra = None, {"pinned": 1}
            H.emit(
                bench="decoding",
                case=f"wedlm_adaptive_vs_ar/{sampler}/rho{C.LEVELS[level]:g}/paired5"
                + ("/pinned" if pinned else ""),
                sizes={
                    "prompts": N_PROMPTS,
                    "new": NEW,
                    "batch": 1,
                    **ADAPT,
                    "lambda": LAMBDA,
                    **SAMPLERS[sampler],
                },
                ours=H.Timing(float(np.median(all_we)), we_cs, H._compiled_mem_mb(we_c)),
                anchor="ar_kv_cache",
                anchor_t=H.Timing(float(np.median(all_ar)), ar_cs, None),
                target=target,
                note=(
                    (
                        "pinned to one core (XLA:CPU runs one thread; informational, no "
                        "target): how much of the unpinned ratio is thread overhead; "
                        if pinned
                        else ""
                    )
                    + f"ratio = median over {PAIRED_RUNS} runs of the median per-round "
                    f"(AR time / WeDLM time) of {PAIRED_ROUNDS} round-robin rounds; "
                    + ("" if pinned else f"ok needs ratio >= {target:g} and acc >= AR acc - 0.01; ")
                    + "adaptive window: one-token AR steps while < min_accept tokens per "
                    "window forward; ratio_cpu: the same with process CPU times (robust to "
                    "other jobs on the machine)"
                ),
                ratio=ratio,
                ratio_runs=[round(r, 4) for r in runs],
                ratio_pooled=float(np.median(all_ar) / np.median(all_we)),
                ratio_cpu=float(statistics.median(runs_cpu)),
                **extra,
                ours_err=1.0 - acc,
                anchor_err=1.0 - acc_ar,
                tpf=float(np.sum(lens) / np.sum(st.row_forwards)),
                fwd_per_prompt=float(np.sum(st.row_forwards)) / N_PROMPTS + 1,
                fwd_per_prompt_ar=float(np.sum(s_ar.row_forwards)) / N_PROMPTS + 1,
            )


def eager_line(params, cfg, repeats: int) -> None:
    """Eager call time of wedlm_generate vs the anchor's (ar_generate), all prompts at once."""
    rng = np.random.default_rng(1000)
    seq, _, _ = C.counting_batch(rng, N_PROMPTS, NEW, 0)
    pr = jnp.asarray(seq[:, : C.PROMPT_LEN])
    pl = jnp.full((N_PROMPTS,), C.PROMPT_LEN, jnp.int32)
    key = jax.random.key(0)
    kw = dict(key=key, max_new_tokens=NEW, **SAMPLERS["sampled"])
    we = lambda: wedlm_generate(  # noqa: E731
        params, cfg, pr, pl, mask_token_id=C.MASK_ID, window=4, entropy_threshold=0.8, **kw
    )
    ar = lambda: ar_generate(params, cfg, pr, pl, **kw)  # noqa: E731
    first = {}
    for name, f in (("we", we), ("ar", ar)):
        t0 = time.perf_counter()
        jax.block_until_ready(f())
        first[name] = time.perf_counter() - t0
    ours = H.time_python(lambda: jax.block_until_ready(we()), repeats=repeats)
    anchor = H.time_python(lambda: jax.block_until_ready(ar()), repeats=repeats)
    H.emit(
        bench="decoding",
        case="eager/wedlm_vs_ar/sampled",
        sizes={"prompts": N_PROMPTS, "new": NEW, "window": 4, "tau": 0.8},
        ours=ours,
        anchor="ar_kv_cache_eager",
        anchor_t=anchor,
        target=None,
        note="eager calls (no user jit) after the first; both are jitted at module level, "
        "so these are dispatch + run times; first_call_s includes the compile",
        first_call_s=first["we"],
        first_call_s_ar=first["ar"],
    )


if __name__ == "__main__":
    main()
