"""Credal DRO: JAX L-BFGS solve vs cvxpy + Clarabel per solve; newsvendor closed form vs LP.

(1) `credal_lad_ellipsoid`: scikit-learn's bundled diabetes data (442 x 10, target/100),
LAD loss, split-conformal ellipsoid bulk over (z, y) at alpha = 0.1, eps = 0.1. Ours:
`robust.fit` (smoothing continuation + L-BFGS in one jit, float64), compile reported
apart; anchor: the same problem in cvxpy (DPP: eps is a parameter, so a timed re-solve
skips canonicalisation) solved by Clarabel. Target (issue 21): >= 2x faster per solve at
relative objective gap <= 1e-4 (`ours_err`). Timed interleaved (median of rounds).
(2) `newsvendor_closed_form_vs_lp`: n = 300 heavy-tailed demands, 64 eps values: the
closed form vmapped over eps vs 64 DPP re-solves of the LP (Clarabel); informational.
`--full` adds a synthetic LAD scale test (n = 1e3, 1e4, 1e5; d = 20; box bulk).
"""

import statistics
import time

import _harness as H  # noqa: I001
import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxkit import robust as R  # noqa: E402


def _interleaved(ours_fn, ours_args, anchor_fn, repeats):
    t0 = time.perf_counter()
    compiled = jax.jit(ours_fn).lower(*ours_args).compile()
    comp = time.perf_counter() - t0
    out = jax.block_until_ready(compiled(*ours_args))
    anchor_out = anchor_fn()
    to, ta = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*ours_args))
        to.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        anchor_fn()
        ta.append(time.perf_counter() - t0)
    mem = H._compiled_mem_mb(compiled)
    return (
        H.Timing(statistics.median(to), comp, mem, out),
        H.Timing(statistics.median(ta), None, None, anchor_out),
    )


def _lad_case(z, y, bulk, eps, steps, repeats, case, sizes, target):
    fam = R.lad()
    p0 = R.LinearParams(jnp.zeros(z.shape[1]), jnp.asarray(0.0))
    prob = R.build_conic(fam, (np.asarray(z), np.asarray(y)), bulk)

    def ours(z_, y_, e_):
        return R.fit(fam, (z_, y_), bulk, e_, p0, steps=steps)

    def anchor():
        return prob.solve(eps)

    t_ours, t_anchor = _interleaved(ours, (z, y, jnp.asarray(eps)), anchor, repeats)
    ref = t_anchor.output.value
    gap = abs(float(t_ours.output.value) - ref) / abs(ref)
    H.emit(
        bench="robust",
        case=case,
        sizes=sizes,
        ours=t_ours,
        anchor="cvxpy",
        anchor_t=t_anchor,
        target=target,
        note=f"ok needs gap <= 1e-4 too: gap {gap:.2e}; steps/stage {steps}, 4 stages; "
        f"cvxpy status {t_anchor.output.status}, DPP re-solve (canonicalisation cached)",
        ours_err=gap,
        anchor_err=0.0,
        ok_gap=bool(gap <= 1e-4),
    )


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True)
    z, y = jnp.asarray(x), jnp.asarray(y / 100.0)
    bulk = R.calibrate_ellipsoid(
        jnp.concatenate([z, y[:, None]], axis=1), alpha=0.1, key=jax.random.key(0)
    )
    for steps in (40, 150):
        _lad_case(
            z,
            y,
            bulk,
            0.1,
            steps,
            args.repeats,
            "credal_lad_ellipsoid",
            {"n": 442, "d": 10, "eps": 0.1, "alpha": 0.1, "steps": steps},
            # the target (>= 2x at gap <= 1e-4) is judged at the step budget that reaches
            # the gap; the 150-step solve (gap ~5e-6) is an informational tighter line
            2.0 if steps == 40 else None,
        )

    # newsvendor: closed form vmapped over 64 eps vs 64 LP re-solves
    rng = np.random.default_rng(0)
    xi = jnp.asarray(20 + 60 * rng.pareto(2.5, 300))
    iv = R.calibrate_interval(xi, alpha=0.02)
    eps = jnp.linspace(0.0, 0.5, 64)
    prob = R.build_conic(R.newsvendor(1.0, 4.0), np.asarray(xi), iv)

    def ours(xi_, e_):
        return jax.vmap(lambda e: R.newsvendor_closed_form(xi_, e, iv, h=1.0, b=4.0).value)(e_)

    def anchor():
        return [prob.solve(float(e)).value for e in np.asarray(eps)]

    t_ours, t_anchor = _interleaved(ours, (xi, eps), anchor, max(3, args.repeats // 2))
    err = float(np.max(np.abs(np.asarray(t_ours.output) - np.asarray(t_anchor.output))))
    H.emit(
        bench="robust",
        case="newsvendor_closed_form_vs_lp",
        sizes={"n": 300, "n_eps": 64, "alpha": 0.02},
        ours=t_ours,
        anchor="cvxpy",
        anchor_t=t_anchor,
        target=None,
        note="informational; anchor = 64 DPP re-solves of the LP with Clarabel; "
        f"max |J_closed - J_LP| = {err:.2e} (Clarabel tolerance; HiGHS gives <= 1e-13)",
        ours_err=0.0,
        anchor_err=err,
    )

    if args.full:
        for n in (1_000, 10_000, 100_000):
            k1, k2 = jax.random.split(jax.random.key(n))
            zz = jax.random.normal(k1, (n, 20), jnp.float64)
            yy = zz @ jnp.linspace(-1, 1, 20) + jax.random.t(k2, 3.0, (n,), jnp.float64)
            box = R.calibrate_box(jnp.concatenate([zz, yy[:, None]], axis=1), alpha=0.1)
            _lad_case(
                zz,
                yy,
                box,
                0.1,
                40,
                3,
                "credal_lad_scale",
                {"n": n, "d": 20, "eps": 0.1, "alpha": 0.1, "bulk": "box"},
            )


if __name__ == "__main__":
    main()
