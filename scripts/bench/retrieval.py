"""Exact Shapley-Taylor interaction (order 2) of the cross-modal WTI game vs shapiq.

The same game (random token similarities and weight logits, n/2 motion + n/2 text
players) for n in {8, 10, 12, 14} (``--full`` adds 16): ours is the jitted
``retrieval.cross_modal_stii`` (game tabulated over all 2^n masks, Moebius butterflies,
one Gram product for all pairs); the anchor is ``shapiq.ExactComputer(game,
n).__call__("STII", order=2)`` on a vectorised NumPy transcription of the same game (a
fresh computer per call, so its value cache does not hide the work). Both in float64;
``ours_err`` is the max |difference| over all pairs. Target >= 10x at n = 12.

DPC-KNN token clustering (PST's compressor, ``retrieval.dpc_knn``, float32, ratio 0.5,
k = 3) on batches of Gaussian-blob token sequences (segment stage: 64 x 196 tokens;
joint stage: 16 x 1024), against a vectorised NumPy float32 transcription of the same
rule (anchor ``numpy``: what a user without JAX would write; HBI's own code needs
torch); ``ours_err`` is the share of tokens assigned differently. Target >= 1.

Exact Banzhaf interaction (HBI's index, ``retrieval.banzhaf_exact``) of the same cross-modal
game at n = 12 vs ``shapiq.ExactComputer(...)(index="BII", order=2)`` on the NumPy
transcription of the game; ours tabulates the game (``game_values``) and transforms it in one
jitted call; float64 both. Target >= 1.
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


def _shapiq_pairs(game, n, na, index="STII"):
    import shapiq

    iv = shapiq.ExactComputer(game, n_players=n)(index=index, order=2)
    return np.array([[iv[(a, na + b)] for b in range(n - na)] for a in range(na)])


def _np_dpc_knn(x, n_centers, k):
    """Vectorised NumPy DPC-KNN of ``x [B, N, D]`` (no padding; ties by position)."""
    b, n, d = x.shape
    sq = np.einsum("bnd,bnd->bn", x, x)
    d2 = np.maximum(sq[:, :, None] + sq[:, None, :] - 2 * x @ x.transpose(0, 2, 1), 0) / d
    d2[:, np.arange(n), np.arange(n)] = 0
    rho = np.exp(-np.mean(np.partition(d2, k - 1, axis=-1)[..., :k], axis=-1))
    dist = np.sqrt(d2)
    pos = np.arange(n)
    denser = (rho[:, None, :] > rho[:, :, None]) | (
        (rho[:, None, :] == rho[:, :, None]) & (pos[None, None, :] < pos[None, :, None])
    )
    delta = np.where(denser, dist, np.inf).min(-1)
    far = dist.max(axis=(1, 2))
    delta = np.where(np.isfinite(delta), delta, far[:, None])
    score = rho * delta
    top = np.sort(np.argsort(-score, axis=-1, kind="stable")[:, :n_centers], axis=-1)
    to_c = np.take_along_axis(d2, top[:, None, :], axis=-1)
    assign = to_c.argmin(-1)
    rows = np.arange(b)[:, None]
    assign[rows, top] = np.arange(n_centers)[None, :]
    return assign


def _dpc_bench(args) -> None:
    for batch, n in ((64, 196), (16, 1024)):
        rng = np.random.default_rng(n)
        d, c = 256, n // 2
        centres = rng.normal(size=(batch, n // 8, d)).astype(np.float32) * 3
        lab = rng.integers(0, n // 8, size=(batch, n))
        x = np.take_along_axis(centres, lab[..., None], axis=1)
        x = (x + rng.normal(size=x.shape)).astype(np.float32)
        ours = H.time_jax(
            lambda v, c=c: retrieval.dpc_knn(v, n_centers=c).assign,
            jnp.asarray(x),
            repeats=args.repeats,
        )
        anchor = H.time_python(lambda x=x, c=c: _np_dpc_knn(x, c, 3), repeats=args.repeats)
        err = float(np.mean(np.asarray(ours.output) != anchor.output))
        H.emit(
            bench="retrieval",
            case="dpc_knn_vs_numpy",
            sizes={"batch": batch, "tokens": n, "dim": d, "centers": c, "k": 3},
            ours=ours,
            anchor="numpy",
            anchor_t=anchor,
            target=1.0,
            note="float32 both; ours_err = share of tokens assigned differently",
            ours_err=err,
        )


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
    _dpc_bench(args)
    _banzhaf_bench(args)


def _banzhaf_bench(args) -> None:
    n, na = 12, 6
    rng = np.random.default_rng(n + 1)
    sim = rng.uniform(-1, 1, (na, n - na))
    wa, wb = rng.normal(size=na), rng.normal(size=n - na)
    game = _np_game(sim, wa, wb)

    def banzhaf(params):  # tabulate the game over all coalitions, then the transform
        v = retrieval.game_values(retrieval.cross_modal_value, params, n_players=n)
        return retrieval.banzhaf_exact(v)

    params = tuple(jnp.asarray(a) for a in (sim, wa, wb))
    ours = H.time_jax(banzhaf, params, repeats=args.repeats)
    try:
        reps = max(1, min(args.repeats, 3))
        anchor = H.time_python(lambda: _shapiq_pairs(game, n, na, "BII"), repeats=reps)
        err = float(np.max(np.abs(np.asarray(ours.output.pairs)[:na, na:] - anchor.output)))
        note = f"shapiq exact BII, {reps} timed calls"
    except ImportError as e:
        anchor, err, note = None, None, f"shapiq not installed: {e}"
    H.emit(
        bench="retrieval",
        case="banzhaf_exact_vs_shapiq",
        sizes={"n": n, "motion_tokens": na, "text_tokens": n - na},
        ours=ours,
        anchor="shapiq",
        anchor_t=anchor,
        target=1.0,
        note=note,
        ours_err=err,
    )


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
