"""jaxkit: JAX-first functional implementations of recent research methods.

Pure functions over pytrees, explicit ``key=`` arguments, no hidden ``jit``,
sharding-preserving, with Pallas kernels beside their jnp references.
Subpackages are imported lazily (``jaxkit.soft``, ``jaxkit.nn``, ...), so
``import jaxkit`` stays cheap and optional dependencies stay optional.
"""

import importlib
import importlib.metadata

try:
    __version__ = importlib.metadata.version("jaxkit")
except importlib.metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.1.0"

_SUBPACKAGES = (
    "decoding",
    "diffusion",
    "editing",
    "equivariance",
    "interop",
    "io",
    "kernels",
    "memory",
    "nn",
    "privacy",
    "sharding",
    "soft",
    "vision",
)


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"jaxkit.{name}")
    raise AttributeError(f"module 'jaxkit' has no attribute {name!r}")
