"""The conformance suite must catch broken functions: each check fails on a function
broken in exactly the way it guards against, and passes on a correct one."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import _validate
from tests import conformance
from tests.conformance import Bad, Case


def good(x, *, scale):
    """A correct function: softplus(scale * x) along rows, with validation."""
    x = jnp.asarray(x)
    _validate.floating(x, name="x")
    x = _validate.guard_positive(x, scale, name="scale")  # eagerly and under jit
    return jax.nn.softplus(scale * x)


def make(k, dt):
    return (jax.random.normal(k, (8, 5), dt),)


BAD = (
    Bad("integer x", lambda k: ((jnp.ones((8, 5), jnp.int32),), {}), TypeError),
    Bad("scale <= 0", lambda k: ((jnp.ones((8, 5)),), {"scale": 0.0}), ValueError, "`scale`"),
)
GOOD = Case("selftest.good", good, make, hparams={"scale": (0.5, 2.0)}, bad=BAD)


def eager_only_guard(x, *, scale):  # validates a concrete scale only: NaN passes under jit
    x = jnp.asarray(x)
    _validate.floating(x, name="x")
    _validate.positive(scale=scale)
    return jax.nn.softplus(scale * x)


def converts_first(x, *, scale):  # jnp.asarray before the check: a string gets JAX's error
    x = jnp.asarray(x)
    _validate.floating(x, name="x")
    s = jnp.asarray(scale)
    return jax.nn.softplus(s * _validate.guard_positive(x, s, name="scale"))


def retraces(x, *, scale):  # branches in Python on a hyperparameter: retraces per value
    return jax.nn.softplus(float(scale) * jnp.asarray(x))


def upcasts(x, *, scale):  # silently returns f32 for bf16 input
    return jax.nn.softplus(scale * jnp.asarray(x).astype(jnp.float32))


def wrong_grad(x, *, scale):  # custom derivative off by a factor of 2
    @jax.custom_jvp
    def f(x):
        return jax.nn.softplus(scale * x)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), 2.0 * scale * jax.nn.sigmoid(scale * x) * t

    return f(jnp.asarray(x))


def unchecked(x, *, scale):  # no validation: bad inputs pass silently
    return jax.nn.softplus(scale * jnp.asarray(x, jnp.float32))


def replicates(x, *, scale):  # creates its output from a shape: loses sharding
    x = jnp.asarray(x)
    return jnp.zeros(x.shape, x.dtype) + jax.nn.softplus(scale * x).sum() / x.size


def jit_differs(x, *, scale):  # uses a Python-side global counter: eager != jit
    jit_differs.calls += 1
    return jnp.asarray(x) * scale * jit_differs.calls


jit_differs.calls = 0


def compiles_per_call(x, *, scale):  # a loop body closure made per call: recompiles eagerly
    def body(i, c):
        return c * scale + i

    return jax.lax.fori_loop(0, 3, body, jax.nn.softplus(jnp.asarray(x)))


def centres(x, *, scale):  # a mean over the batch: NaN for an empty one, silently
    x = jnp.asarray(x)
    return jax.nn.softplus(scale * (x - jnp.mean(x, axis=0)))


def flattens(x, *, scale):  # reshape(b, -1): a ZeroDivisionError for an empty batch
    x = jnp.asarray(x)
    return jax.nn.softplus(scale * x.reshape(x.shape[0], -1)).reshape(x.shape)


def test_good_function_passes_every_check(key, mesh8):
    for check in conformance.CHECKS.values():
        check(GOOD, key)
    conformance.check_sharding(GOOD, key, mesh8)


@pytest.mark.parametrize(
    "fn, check",
    [
        (retraces, "jit"),
        (upcasts, "dtypes"),
        (wrong_grad, "grads"),
        (unchecked, "bad_inputs"),
        (converts_first, "bad_inputs"),
        (jit_differs, "jit"),
        (eager_only_guard, "jit"),
        (compiles_per_call, "eager_cache"),
        (centres, "empty_batch"),
        (flattens, "empty_batch"),
    ],
)
def test_suite_catches_broken_function(fn, check, key):
    broken = Case("selftest.broken", fn, make, hparams={"scale": (0.5, 2.0)}, bad=BAD)
    with pytest.raises((AssertionError, jax.errors.ConcretizationTypeError)):
        conformance.CHECKS[check](broken, key)


def test_vmap_check_catches_wrong_batching_rule(key):
    # a kernel-style op whose custom batching rule is wrong (reverses the batch)
    @jax.custom_batching.custom_vmap
    def op(x):
        return jax.nn.softplus(x)

    @op.def_vmap
    def op_vmap(axis_size, in_batched, x):
        return jax.nn.softplus(x)[::-1], in_batched[0]

    broken = Case(
        "selftest.bad_vmap_rule",
        lambda x, *, scale: op(scale * x),
        make,
        hparams={"scale": (0.5, 2.0)},
    )
    with pytest.raises(AssertionError):
        conformance.check_vmap(broken, key)


def test_sharding_check_catches_replication(key, mesh8):
    broken = Case("selftest.replicates", replicates, make, hparams={"scale": (0.5, 2.0)})
    with pytest.raises(AssertionError):
        conformance.check_sharding(broken, key, mesh8)


def test_eval_shape_check_catches_value_dependent_shape(key):
    broken = Case(
        "selftest.nonzero",
        lambda x, *, scale: jnp.nonzero(x > scale)[0],
        make,
        hparams={"scale": (0.5, 2.0)},
        grad_modes=(),
    )
    with pytest.raises((AssertionError, jax.errors.ConcretizationTypeError)):
        conformance.check_eval_shape(broken, key)


def test_registry_has_no_duplicates():
    names = [c.name for c in conformance.registry()]
    assert len(names) == len(set(names))
    np.testing.assert_equal(sorted(names), sorted(set(names)))


def test_built_once_builds_float32_even_first_asked_in_x64():
    # the WBMMNet case failed CI once: its cached net was first built inside the x64 grads
    # check, and the float64 state then reached the worker's later float32 jit check
    calls = []

    @conformance.built_once
    def build():
        calls.append(1)
        return {"w": jnp.zeros(3), "b": jax.random.normal(jax.random.key(0), (2,))}

    with jax.enable_x64(True):
        first = build()
    again = build()
    assert again is first and len(calls) == 1
    assert {str(v.dtype) for v in first.values()} == {"float32"}


def test_a_family_runs_its_first_case_by_default_and_the_others_bad_inputs():
    first, second = (dataclasses.replace(GOOD, name=f"selftest.fam/{v}") for v in ("a", "b"))
    alone = dataclasses.replace(GOOD, name="selftest.alone")
    leads = conformance.family_leads([first, second, alone])
    assert leads == {"selftest.fam/a", "selftest.alone"}
    assert not conformance.is_slow(first, "jit", lead=True)
    assert conformance.is_slow(second, "jit", lead=False)
    assert conformance.is_slow(second, "sharding", lead=False)
    assert not conformance.is_slow(second, "bad_inputs", lead=False)
    assert conformance.is_slow(first, "grads", lead=True)  # SLOW_TIER for every case
