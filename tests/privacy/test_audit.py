"""The canary audit: below the accounted epsilon for PRISM and baselines, above it when broken."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from jaxkit import privacy
from jaxkit.privacy import audit
from jaxkit.privacy import lowrank as L
from tests.privacy._helpers import factor_grads, factors

SIGMA, CLIP, DELTA = 2.0, 1.0, 1e-5


@jax.jit  # one program for the inputs (eager, each op compiled alone)
def _setup(key):
    k1, k2, k3 = jax.random.split(key, 3)
    f = L.balance(factors(k1, 8, 6, 2))
    base = factor_grads(f, jax.random.normal(k2, (3, 8, 6)))
    canary = jax.tree.map(lambda x: x[0], factor_grads(f, 50.0 * jax.random.normal(k3, (1, 8, 6))))
    return f, base, canary


def _release(agg, f):
    def rel(g, k):
        st = privacy.PrivatizeState(jnp.zeros([], jnp.int32), k, jnp.zeros([], jnp.float32))
        return agg.update(g, st, f)[0]

    return rel


def test_clopper_pearson_matches_scipy():
    for k, n in ((0, 500), (3, 500), (250, 500), (500, 500)):
        lo, hi = audit.clopper_pearson(k, n, alpha=0.05)
        want = scipy.stats.binomtest(k, n).proportion_ci(0.95, method="exact")
        assert lo == pytest.approx(want.low, abs=1e-4) and hi == pytest.approx(want.high, abs=1e-4)


def _full_release(tx, f):
    """Release of a whole transform (aggregator + post-processing), key injected per trial."""
    st0 = tx.init(f)
    idx = next(i for i, s in enumerate(st0) if isinstance(s, privacy.PrivatizeState))

    def rel(g, k):
        st = list(st0)
        st[idx] = privacy.PrivatizeState(jnp.zeros([], jnp.int32), k, jnp.zeros([], jnp.float32))
        return tx.update(g, tuple(st), f)[0]

    return rel


@pytest.mark.parametrize(
    "method",
    [
        pytest.param("prism_privatize", marks=pytest.mark.slow),
        "naive",
        pytest.param("prism", marks=pytest.mark.slow),
        pytest.param("ffa", marks=pytest.mark.slow),
    ],
)
def test_audit_below_accounted_epsilon(key, method):
    f, base, canary = _setup(key)
    kw = dict(clip_norm=CLIP, noise_multiplier=SIGMA, denom=4.0, key=key)
    if method == "prism_privatize":
        rel = _release(privacy.prism_privatize(**kw), f)
    elif method == "prism":
        rel = _full_release(privacy.prism(0.1, **kw), f)
    elif method == "naive":
        rel = _full_release(privacy.naive_dp_lora(0.1, **kw), f)
    else:
        rel = _full_release(privacy.ffa_lora(0.1, **kw), f)
    claimed = privacy.epsilon(q=1.0, noise_multiplier=SIGMA, steps=1, delta=DELTA)
    res = audit.canary_audit(rel, base=base, canary=canary, key=key, trials=1000, delta=DELTA)
    assert res.trials >= 1000
    assert res.epsilon_lower < claimed
    if method == "prism_privatize":
        assert res.tpr > res.fpr  # the test does see the canary


@pytest.mark.parametrize("broken", ["noise_off", pytest.param("clip_off", marks=pytest.mark.slow)])
def test_audit_catches_broken_mechanism(key, broken):
    f, base, canary = _setup(key)
    claimed = privacy.epsilon(q=1.0, noise_multiplier=SIGMA, steps=1, delta=DELTA)
    if broken == "noise_off":  # claims sigma=2 but adds no noise
        agg = privacy.prism_privatize(clip_norm=CLIP, noise_multiplier=0.0, denom=4.0, key=key)
    else:  # claims C=1 but effectively does not clip
        agg = privacy.prism_privatize(
            clip_norm=1e4, noise_multiplier=SIGMA / 1e4, denom=4.0, key=key
        )
    res = audit.canary_audit(
        _release(agg, f), base=base, canary=canary, key=key, trials=1000, delta=DELTA
    )
    assert res.epsilon_lower > claimed, (res, claimed)


def test_audit_bad_inputs(key):
    f, base, canary = _setup(key)
    with pytest.raises(ValueError, match="trials"):
        audit.canary_audit(lambda g, k: g, base=base, canary=canary, key=key, trials=1)
    with pytest.raises(ValueError, match="delta"):
        audit.canary_audit(lambda g, k: g, base=base, canary=canary, key=key, delta=1.0)
    with pytest.raises(TypeError, match="`base.a`"):  # no batch axis: one leaf per example
        audit.canary_audit(lambda g, k: g, base=canary, canary=canary, key=key)
    assert np.isfinite(audit.clopper_pearson(1, 10).high)
