"""Regression: PRISM on stacked LoRA layers must not emit batched LAPACK calls.

jaxlib's CPU LAPACK kernels (jax 0.10.2) split a large enough batch into chunks on
the XLA intra-op pool and block the calling pool worker until they finish; two such
calls running at once on a 2-thread pool deadlocked ``scripts/bench/privacy.py``
(rank 16, both ``tf_XLAEigen`` workers parked in ``ParallelBatchMap`` of
``lapack_sorgqr_ffi``). The transforms now map LAPACK-using pieces over stacked
layers one slice at a time (``_common.stackloop``), so every LAPACK custom call in
the lowered update has ``num_batch_dims = 0``. This reads the lowered program (no
timing, no threads; the old ``vmap`` gave ``num_batch_dims = 1``) and checks that the
stacked update still equals the per-layer updates.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import privacy
from jaxkit.privacy.lowrank import LoraFactors

_CALL = re.compile(r'custom_call @(lapack_\w+)\(.*?num_batch_dims = "(\d+)"')


@jax.jit  # one program for the inputs (eager, each op compiled alone)
def _stacked_inputs(key):
    ka, kb, kg = jax.random.split(key, 3)
    f = LoraFactors(jax.random.normal(ka, (2, 6, 2)), jax.random.normal(kb, (2, 5, 2)))
    return f, jax.tree.map(lambda x: jax.random.normal(kg, (4, *x.shape)), f)


def _stacked(key):
    f, g = _stacked_inputs(key)
    # no clipping, no noise: the layers do not interact, so slices can be compared
    tx = privacy.prism(0.1, clip_norm=jnp.inf, noise_multiplier=0.0, denom=4.0, key=key)
    return f, g, tx


def test_prism_update_on_stacked_layers_has_unbatched_lapack(key):
    f, g, tx = _stacked(key)
    # lowered only (nothing compiles), with the state built inside the program
    text = jax.jit(lambda g, f: tx.update(g, tx.init(f), f)).lower(g, f).as_text()
    calls = _CALL.findall(text)
    names = {n for n, _ in calls}
    assert {"lapack_sgeqrf_ffi", "lapack_sgesdd_ffi", "lapack_ssyevd_ffi"} <= names, calls
    assert all(nb == "0" for _, nb in calls), calls


@pytest.mark.slow
def test_prism_stacked_update_equals_per_layer_updates(key):
    f, g, tx = _stacked(key)
    u, _ = tx.update(g, tx.init(f), f)
    for i in range(2):
        fi = jax.tree.map(lambda x, i=i: x[i], f)
        gi = jax.tree.map(lambda x, i=i: x[:, i], g)
        ui, _ = tx.update(gi, tx.init(fi), fi)
        np.testing.assert_allclose(u.a[i], ui.a, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(u.b[i], ui.b, rtol=1e-4, atol=1e-6)
