"""jaxkit.io.save_checkpoint / restore_checkpoint: the adapters' orbax round trip."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import io


def test_round_trip_keeps_values_structure_and_dtypes(tmp_path):
    tree = {
        "w": jnp.arange(6.0).reshape(2, 3),
        "b": (jnp.ones(3, jnp.bfloat16), jnp.array([1, 2], jnp.int32)),
    }
    io.save_checkpoint(tmp_path / "ck", tree)
    io.save_checkpoint(tmp_path / "ck", tree)  # overwrites
    like = jax.tree.map(jnp.zeros_like, tree)
    back = io.restore_checkpoint(tmp_path / "ck", like)
    assert jax.tree.structure(back) == jax.tree.structure(tree)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(tree), strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def test_missing_checkpoint_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="`path`"):
        io.restore_checkpoint(tmp_path / "none", {"w": jnp.zeros(2)})


def test_mismatched_like_names_the_argument(tmp_path):
    io.save_checkpoint(tmp_path / "ck", {"w": jnp.zeros(2)})
    with pytest.raises(ValueError, match="`like`"):  # orbax's message alone before
        io.restore_checkpoint(tmp_path / "ck", {"w": jnp.zeros(3)})
    io.save_checkpoint(tmp_path / "np", {"w": np.zeros(2, np.float32)})
    with pytest.raises(ValueError, match="`like`"):  # came back silently as shape (2,)
        io.restore_checkpoint(tmp_path / "np", {"w": jnp.zeros(3)})
