"""``window="auto"``: dense rows where the band would not pay, the band where it does.

Oracles: the explicit ``window=None`` (dense, exact ``|.|``) and ``window=w`` paths of the
same operators, which ``"auto"`` must reproduce exactly on the side it picks; the static
rule itself (:func:`band_window`); bad ``window`` values.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkit.soft as S
from jaxkit.soft import _axis_front as F

X_SHORT = jnp.asarray(np.random.default_rng(0).standard_normal((2, 40)), jnp.float32)
X_LONG = jnp.asarray(np.random.default_rng(1).standard_normal((2, 200)), jnp.float32)


def test_rule_is_static_in_n_and_window():
    o = F.options(F.VALUE_METHODS, method="neuralsort", window="auto")
    w = F.AUTO_WINDOW["neuralsort"]
    edge = F.BAND_PAYS * (2 * w + 1)
    assert F.band_window(o, edge, "sort") is None
    assert F.band_window(o, edge + 1, "sort") == w
    assert F.band_window(o, edge + 1, "rank") == w
    assert F.band_window(o, 10**6, "top_k") is None  # k rows: dense rows are cheaper
    o = F.options(F.VALUE_METHODS, method="softsort", window="auto")
    assert all(F.band_window(o, 10**6, op) is None for op in ("sort", "rank", "top_k"))
    o = F.options(F.VALUE_METHODS, method="neuralsort", window=3)  # explicit: kept
    assert F.band_window(o, 5, "sort") == 3


@pytest.mark.parametrize("method", [pytest.param("softsort", marks=pytest.mark.slow), "neuralsort"])
def test_auto_equals_dense_where_it_picks_dense(method):
    kw = dict(softness=0.05, method=method)
    dense = dict(kw, abs_mode="hard")
    auto = dict(kw, window="auto")

    @jax.jit  # both sides of the four operators in one program (one compile, not eight)
    def both(x):
        return [
            [
                S.sort(x, **o),
                S.rank(x, **o),
                S.top_k(x, 3, **o)[0],
                S.quantile(x, 0.3, axis=-1, **o),
            ]
            for o in (auto, dense)
        ]

    for got, want in zip(*both(X_SHORT), strict=True):
        np.testing.assert_array_equal(got, want)
    # the certified bound of the dense rows is 0
    assert float(jnp.max(S.banded_error_bound("sort", X_SHORT, window="auto", **kw))) == 0.0


def test_auto_equals_band_where_it_picks_band():
    kw = dict(softness=0.01, method="neuralsort")
    w = F.AUTO_WINDOW["neuralsort"]

    @jax.jit  # both sides of sort and rank in one program
    def both(x):
        return [[S.sort(x, window=v, **kw), S.rank(x, window=v, **kw)] for v in ("auto", w)]

    for got, want in zip(*both(X_LONG), strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(
        S.banded_error_bound("rank", X_LONG, window="auto", **kw),
        S.banded_error_bound("rank", X_LONG, window=w, **kw),
    )


@pytest.mark.parametrize(
    ("window", "err"), [("dense", ValueError), ("", ValueError), (-1, ValueError), (2.0, TypeError)]
)
def test_bad_window_raises(window, err):
    with pytest.raises(err, match="window"):
        S.sort(X_SHORT, method="neuralsort", window=window)


def test_auto_window_needs_a_pairwise_method():
    with pytest.raises(ValueError, match="window"):
        S.sort(X_SHORT, method="pav", window="auto")


def test_softsort_top_k_anchors_from_hard_indices():
    """top_k/softsort takes its anchors from the hard top-k indices: same as the dense rows."""
    x = X_LONG
    k, s = 5, 0.1
    v, _ = S.top_k(x, k, softness=s, method="softsort")
    P = S.argtop_k(x, k, softness=s, method="softsort")
    np.testing.assert_allclose(v, jnp.einsum("...kn,...n->...k", P, x), rtol=1e-5, atol=1e-6)
