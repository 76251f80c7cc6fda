"""jaxkit: JAX-first functional implementations of recent research methods.

Pure functions over pytrees, explicit keyword-only ``key=`` arguments, public
functions jitted the way ``jax.numpy``'s are (once, at module level, static choices
static and continuous hyperparameters traced, so eager calls hit the compile cache
and sweeps never recompile), sharding-preserving, with Pallas kernels beside their
jnp references.
Subpackages are imported lazily (``jaxkit.soft``, ``jaxkit.nn``, ...), so
``import jaxkit`` stays cheap and optional dependencies stay optional.
"""

import importlib
import importlib.metadata

try:
    __version__ = importlib.metadata.version("jaxkit")
except importlib.metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.1.0"

# Only subpackages that exist: ``hasattr(jaxkit, name)`` is False for any other name.
_SUBPACKAGES = (
    "data",
    "decoding",
    "diffusion",
    "editing",
    "equivariance",
    "hypospace",
    "interop",
    "io",
    "kernels",
    "memory",
    "neuro",
    "nn",
    "privacy",
    "retrieval",
    "robust",
    "sharding",
    "soft",
    "splat",
    "steering",
    "timeseries",
    "vision",
)


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"jaxkit.{name}")
    raise AttributeError(f"module 'jaxkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_SUBPACKAGES])
