"""Shared pytest set-up: 8 fake CPU devices, strict promotion, a `key` fixture.

The jaxtyping+beartype import hook is switched on by `--jaxtyping-packages` in
pyproject's addopts, so every annotated jaxkit function is checked at call time.
"""

import os

os.environ.setdefault("EQX_ON_ERROR", "raise")

import hypothesis as hp  # noqa: E402
import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

hp.settings.register_profile(
    "jaxkit", database=None, derandomize=True, deadline=None, max_examples=30
)
hp.settings.load_profile("jaxkit")


@pytest.fixture
def key():
    return jax.random.key(0)


@pytest.fixture(scope="session")
def mesh8():
    """An explicit 1-D mesh of the 8 fake devices, axis ``data``."""
    return jax.make_mesh((8,), ("data",))
