"""Foundation III conventions in privacy: guarded clip_norm, named results, errors, extras."""

import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import privacy
from jaxkit.privacy import audit
from jaxkit.privacy import lowrank as L
from tests.privacy._helpers import factor_grads, factors


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))  # one program (eager: op by op)
def _grads(key, b=4, m=6, n=5, r=2):
    k1, k2 = jax.random.split(key)
    f = L.balance(factors(k1, m, n, r, jnp.float32))
    return f, factor_grads(f, jax.random.normal(k2, (b, m, n)))


def _update(tx, g, f):
    return jax.block_until_ready(tx.update(g, tx.init(f), f)[0])


@pytest.mark.parametrize(
    "aggregator", ["prism_privatize", pytest.param("dp_aggregate", marks=pytest.mark.slow)]
)
def test_traced_bad_clip_norm_raises_under_jit(key, aggregator):
    """The guard is shared (_common.guard_dp_hparams): one aggregator in the default run."""
    f, g = _grads(key)
    make = getattr(privacy, aggregator)

    @jax.jit
    def step(c, s):
        tx = make(clip_norm=c, noise_multiplier=s, denom=4.0, key=key)
        return tx.update(g, tx.init(f), f)[0]

    jax.block_until_ready(step(1.0, 1.0))  # valid: runs
    for c, s in ((-1.0, 1.0), (jnp.nan, 1.0), (0.0, 0.0), (jnp.inf, 1.0), (1.0, jnp.nan)):
        with pytest.raises(Exception, match="clip_norm|noise_multiplier"):
            jax.block_until_ready(step(c, s))


def test_inf_clip_norm_needs_noise_off(key):
    with pytest.raises(ValueError, match="clip_norm.*finite"):
        privacy.prism_privatize(clip_norm=np.inf, noise_multiplier=1.0, denom=1.0, key=key)
    with pytest.raises(ValueError, match="clip_norm.*finite"):
        privacy.dp_aggregate(clip_norm=np.inf, noise_multiplier=0.5, denom=1.0, key=key)
    with pytest.raises(ValueError, match="clip_norm"):
        privacy.prism_privatize(clip_norm=np.nan, noise_multiplier=0.0, denom=1.0, key=key)
    # without noise, inf disables clipping: the release is the plain mean of the
    # per-example gradients (finite, no NaN/-inf), whatever their norms
    f, g = _grads(key)
    g = jax.tree.map(lambda x: 1e3 * x, g)
    out = _update(
        privacy.dp_aggregate(clip_norm=np.inf, noise_multiplier=0.0, denom=4.0, key=key), g, f
    )
    np.testing.assert_allclose(out.a, jnp.sum(g.a, 0) / 4.0, rtol=1e-5)
    prism = _update(
        privacy.prism_privatize(clip_norm=np.inf, noise_multiplier=0.0, denom=4.0, key=key), g, f
    )
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(prism))
    # a huge finite clip gives the same release as inf (no example is clipped)
    big = _update(
        privacy.prism_privatize(clip_norm=1e12, noise_multiplier=0.0, denom=4.0, key=key), g, f
    )
    np.testing.assert_allclose(prism.a, big.a, rtol=1e-5, atol=1e-6)


def test_named_results_and_type_errors(key):
    params = {"w": jnp.ones((4, 3))}
    init = privacy.lora_init(params, targets="w", rank=2, key=key)
    assert isinstance(init, privacy.LoraInit)
    assert init.params is not None and isinstance(init.lora["w"], L.LoraFactors)
    with pytest.raises(TypeError, match=r"[`']rank[`']"):
        privacy.lora_init(params, targets="w", rank=2.0, key=key)
    ci = audit.clopper_pearson(3, 10)
    assert isinstance(ci, audit.Interval) and 0.0 < ci.low < 0.3 < ci.high < 1.0
    with pytest.raises(TypeError, match=r"[`']k[`']"):
        audit.clopper_pearson(1.5, 10)
    with pytest.raises(ValueError, match="`k`"):
        audit.clopper_pearson(11, 10)
    with pytest.raises(TypeError, match=r"[`']trials[`']"):
        audit.canary_audit(
            lambda g, k: g, base=jnp.ones((2, 3)), canary=jnp.ones(3), key=key, trials=10.0
        )
    with pytest.raises(TypeError, match=r"[`']steps[`']"):
        privacy.epsilon(q=0.01, noise_multiplier=1.0, steps=10.0, delta=1e-5)


def test_missing_dp_accounting_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "dp_accounting", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'jaxkit\[privacy\]'"):
        privacy.epsilon(q=0.01, noise_multiplier=1.0, steps=10, delta=1e-5)
    with pytest.raises(ImportError, match=r"jaxkit\[privacy\]"):
        privacy.calibrate_sigma(epsilon=1.0, delta=1e-5, q=0.01, steps=10)


# That `import jaxkit.privacy` leaves dp_accounting unimported is checked, with every other
# subpackage, by tests/test_foundation.py::test_subpackage_imports_touch_no_optional_dependency
# (one fresh interpreter for all of them instead of one more here).
