"""Post-hoc baselines on a fitted lrRNN: lrRNN+ICA and LINT (the authors' comparison set).

Both return an exact reparameterisation of the fitted model: a :class:`LowRankRNN` with
the same connectivity ``J = A B`` and the same predictions, whose latents are rotated.

* ``lrRNN+ICA``: FastICA (scikit-learn) on the model's posterior means; the unmixing
  ``W`` (whitening included) and the ICA mean ``m`` give ``z' = W (z - m)``, i.e.
  ``B' = W B``, ``b' = W (b - m)``, ``A' = A W^{-1}``, ``a' = a + A m``.
* ``LINT`` (Valente et al. 2022): the rank-``K`` SVD of ``J = U S V^T`` gives
  ``A' = U S``, ``B' = V^T`` (orthonormal read-in rows); the bias moves with the same
  change of basis ``M = V^T B^+``.

Host-side (NumPy float64, scikit-learn for ICA); not jitted.
"""

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from jaxkit import _validate
from jaxkit.neuro._model import LowRankRNN


def _check(model):
    if not isinstance(model, LowRankRNN):
        raise TypeError(f"`model` must be a LowRankRNN, got {type(model).__name__}.")


def _replace(model, A, B, a, b):
    dt = model.A.dtype
    new = (jnp.asarray(v, dt) for v in (A, B, a, b))
    return eqx.tree_at(lambda m: (m.A, m.B, m.a, m.b), model, tuple(new))


def ica_baseline(model: LowRankRNN, x_prev, *, seed: int = 0, max_iter: int = 1000) -> LowRankRNN:
    """lrRNN+ICA: the fitted model with its latents rotated by FastICA (host-side).

    FastICA (``sklearn.decomposition.FastICA``, ``n_components = K``, unit-variance
    whitening, ``random_state=seed``) is fitted on ``model.encode(x_prev)``; the returned
    model's ``encode`` gives the ICA sources, with the same ``J`` and the same predictions.

    Args:
      model: A fitted :class:`LowRankRNN` (usually ``G = 1``, ``beta = 0``).
      x_prev: Read-in activity ``[S, N]`` the ICA is fitted on.
      seed: FastICA's random state.
      max_iter: FastICA's iteration cap.

    Returns:
      The reparameterised :class:`LowRankRNN`.

    Raises:
      TypeError: ``model`` not a LowRankRNN; ``x_prev`` not ``[S, N]`` for it.
      ValueError: non-finite ``x_prev``; fewer than ``K + 1`` rows.
      ImportError: scikit-learn missing (``pip install jaxkit[examples]``).
    """
    _check(model)
    _validate.floating(x_prev, name="x_prev")
    _validate.ndim(x_prev, 2, name="x_prev")
    x = np.asarray(x_prev, np.float64)
    if x.shape[1] != model.n_neurons:
        raise TypeError(f"`x_prev` must have N = {model.n_neurons} columns, got {x.shape}.")
    if not np.all(np.isfinite(x)):
        raise ValueError("`x_prev` must be finite (no NaN or inf).")
    k = model.rank
    if x.shape[0] <= k:
        raise ValueError(f"`x_prev` must hold more than K = {k} rows, got {x.shape[0]}.")
    seed = _validate.python_int(seed, name="seed", minimum=0)
    max_iter = _validate.python_int(max_iter, name="max_iter", minimum=1)
    from sklearn.decomposition import FastICA

    A, B = np.asarray(model.A, np.float64), np.asarray(model.B, np.float64)
    a, b = np.asarray(model.a, np.float64), np.asarray(model.b, np.float64)
    z = np.tanh(x) @ B.T + b
    ica = FastICA(n_components=k, random_state=seed, max_iter=max_iter, whiten="unit-variance")
    ica.fit(z)
    W, m = ica.components_, ica.mean_
    Winv = np.linalg.inv(W)
    return _replace(model, A @ Winv, W @ B, a + A @ m, W @ (b - m))


def lint_baseline(model: LowRankRNN) -> LowRankRNN:
    """LINT: the fitted model's connectivity refactorised by its rank-``K`` SVD (host-side).

    ``J = A B = U S V^T`` gives ``A' = U S`` (orthogonal columns) and ``B' = V^T``
    (orthonormal rows); ``b`` moves with ``M = V^T B^+`` so predictions are unchanged when
    ``B`` has full row rank.

    Raises:
      TypeError: ``model`` not a LowRankRNN.
    """
    _check(model)
    A, B = np.asarray(model.A, np.float64), np.asarray(model.B, np.float64)
    k = model.rank
    U, S, Vt = np.linalg.svd(A @ B)
    A2, B2 = U[:, :k] * S[:k], Vt[:k]
    M = B2 @ np.linalg.pinv(B)
    return _replace(model, A2, B2, np.asarray(model.a), M @ np.asarray(model.b, np.float64))
