"""The four criteria on a network whose engrams are known exactly (orthogonal memories)."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import editing
from tests.editing._helpers import block_memories

K, WIDTH = 3, 2
NONE_BIAS = jnp.array([0.0, 0.0, 0.0, 0.5])  # a fixed "none of them" logit


def _apply(layers, x):
    h = x @ layers["a"].w
    return h + NONE_BIAS[None, :], {"h": h}


def test_criteria_exact_on_orthogonal_memories():
    rng = np.random.default_rng(0)
    x, ids = block_memories(rng, K, WIDTH, per_memory=6, batches=1)
    x = np.abs(x).astype(np.float32)  # positive features: memory k's logit k is large
    w = np.zeros((K * WIDTH, K + 1), np.float32)
    for m in range(K):
        w[m * WIDTH : (m + 1) * WIDTH, m] = 5.0
    lin = {"a": editing.Linear(jnp.asarray(w))}
    st = editing.collect_stats(
        lambda p, bt: {"a": bt}, None, x, ids, num_memories=K, absorb_bias=False
    )
    en = editing.extract(lin, st)
    xs, rid = jnp.asarray(x[0]), jnp.asarray(ids[0])
    c = editing.criteria(_apply, lin, en, xs, rid, rid)
    np.testing.assert_allclose(c.base_accuracy, 1.0)
    np.testing.assert_allclose(c.necessity, 0.0)  # erased memory -> "none" logit wins
    np.testing.assert_allclose(c.specificity, 1.0)
    np.testing.assert_allclose(c.sufficiency, 1.0)
    np.testing.assert_allclose(c.reactivation_on, 1.0, atol=1e-5)
    np.testing.assert_allclose(c.reactivation_off, 0.0, atol=1e-5)
    np.testing.assert_allclose(c.erase_accuracy, 1.0 - np.eye(K))
    np.testing.assert_allclose(c.keep_accuracy, np.eye(K))
    with pytest.raises(ValueError, match="`ids`"):
        editing.criteria(_apply, lin, en, xs, rid, jnp.full_like(rid, 3))
    # a label outside the K + 1 classes of the logits (argmax never equals it: accuracy 0)
    for bad in (K + 1, -1):
        with pytest.raises(ValueError, match=r"`labels` must lie in \[0, 4\)"):
            editing.criteria(_apply, lin, en, xs, rid.at[0].set(bad), rid)
    # a NaN strength: erase's own guard (before, NaN accuracies came back without an error)
    with pytest.raises(ValueError, match="`alpha` must be finite"):
        editing.criteria(_apply, lin, en, xs, rid, rid, alpha=float("nan"))
