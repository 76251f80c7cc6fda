"""Exact Shapley-Taylor interaction (order 2) of the cross-modal WTI game vs shapiq.

The same game (random token similarities and weight logits, n/2 motion + n/2 text
players) for n in {8, 10, 12, 14} (``--full`` adds 16): ours is the jitted
``retrieval.cross_modal_stii`` (game tabulated over all 2^n masks, Moebius butterflies,
one Gram product for all pairs); the anchor is ``shapiq.ExactComputer(game,
n).__call__("STII", order=2)`` on a vectorised NumPy transcription of the same game (a
fresh computer per call, so its value cache does not hide the work). Both in float64;
``ours_err`` is the max |difference| over all pairs. Target >= 10x at n = 12.
"""

import time

import _harness as H  # noqa: I001
import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402

from jaxkit import retrieval  # noqa: E402


def _np_game(sim, wa, wb):
    """Vectorised NumPy WTI value of boolean coalitions ``[C, Na+Nb]`` (the anchor's game)."""
    na = sim.shape[0]

    def game(coal):
        ma, mb = coal[:, :na], coal[:, na:]
        both = ma.any(1) & mb.any(1)
        with np.errstate(invalid="ignore"):
            col = np.where(ma[:, :, None], sim[None], -np.inf).max(1)
            row = np.where(mb[:, None, :], sim[None], -np.inf).max(2)

            def soft(w, m):
                z = np.where(m, w[None], -np.inf)
                z = z - np.where(m.any(1, keepdims=True), z.max(1, keepdims=True), 0)
                e = np.where(m, np.exp(z), 0.0)
                return e / np.maximum(e.sum(1, keepdims=True), 1e-300)

            val = 0.5 * (
                (soft(wb, mb) * np.where(mb, col, 0)).sum(1)
                + (soft(wa, ma) * np.where(ma, row, 0)).sum(1)
            )
        return np.where(both, val, 0.0)

    return game


def _shapiq_pairs(game, n, na):
    import shapiq

    iv = shapiq.ExactComputer(game, n_players=n)(index="STII", order=2)
    return np.array([[iv[(a, na + b)] for b in range(n - na)] for a in range(na)])


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    ns = [8, 10, 12, 14] + ([16] if args.full else [])
    for n in ns:
        na = n // 2
        rng = np.random.default_rng(n)
        sim = rng.uniform(-1, 1, (na, n - na))
        wa, wb = rng.normal(size=na), rng.normal(size=n - na)
        ours = H.time_jax(
            retrieval.cross_modal_stii,
            jnp.asarray(sim),
            jnp.asarray(wa),
            jnp.asarray(wb),
            repeats=args.repeats,
        )
        try:
            game = _np_game(sim, wa, wb)
            reps = max(1, min(args.repeats, 3 if n >= 12 else args.repeats))
            anchor = H.time_python(lambda g=game, n=n, na=na: _shapiq_pairs(g, n, na), repeats=reps)
            err = float(np.max(np.abs(np.asarray(ours.output) - anchor.output)))
            note = f"shapiq exact STII, {reps} timed calls"
        except ImportError as e:
            anchor, err, note = None, None, f"shapiq not installed: {e}"
        H.emit(
            bench="retrieval",
            case="stii_exact_vs_shapiq",
            sizes={"n": n, "motion_tokens": na, "text_tokens": n - na},
            ours=ours,
            anchor="shapiq",
            anchor_t=anchor,
            target=10.0 if n == 12 else None,
            note=note,
            ours_err=err,
        )


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
