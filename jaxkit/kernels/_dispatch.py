"""Kernel dispatch: ``implementation="auto" | "xla" | "pallas" | "pallas_interpret"``.

* ``"xla"``: the jnp reference (the specification of every kernel).
* ``"pallas"``: the compiled Pallas kernel (GPU/TPU only; on CPU JAX raises).
* ``"pallas_interpret"``: the Pallas kernel in interpret mode (tests, debugging).
* ``"auto"``: Pallas on GPU/TPU, the reference on CPU, and the reference on a
  backend the kernel is not written for (``platforms=``: a Triton-only kernel
  passes ``GPU_PLATFORMS`` and falls back to the reference on TPU). A kernel that raises
  ``NotImplementedError`` ("valid input, but this kernel can't take it") falls
  back to the reference; any other exception propagates. ``"auto"`` never uses
  interpret mode.
"""

from collections.abc import Callable
from typing import TypeVar

import jax

from jaxkit import _validate

IMPLEMENTATIONS = ("auto", "xla", "pallas", "pallas_interpret")
"""The values of every kernel's ``implementation=`` argument."""
ACCELERATORS = ("gpu", "tpu", "cuda", "rocm")
GPU_PLATFORMS = ("gpu", "cuda", "rocm")

T = TypeVar("T")


def resolve(
    implementation: str,
    *,
    backend: str | None = None,
    platforms: tuple[str, ...] = ACCELERATORS,
) -> str:
    """Map ``implementation`` to 'xla', 'pallas' or 'pallas_interpret' for ``backend``.

    ``"auto"`` picks 'pallas' only on a backend in ``platforms`` (the backends the
    kernel is written for), else 'xla'.
    """
    _validate.one_of(IMPLEMENTATIONS, implementation=implementation)
    if implementation != "auto":
        return implementation
    backend = jax.default_backend() if backend is None else backend
    return "pallas" if backend in platforms and backend in ACCELERATORS else "xla"


def dispatch(
    implementation: str,
    *,
    reference: Callable[[], T],
    kernel: Callable[[bool], T],
    backend: str | None = None,
    platforms: tuple[str, ...] = ACCELERATORS,
) -> T:
    """Run ``reference()`` or ``kernel(interpret)`` as ``implementation`` says.

    Args:
      implementation: one of :data:`IMPLEMENTATIONS`.
      reference: zero-argument callable running the jnp reference.
      kernel: callable taking ``interpret: bool`` and running the Pallas kernel.
      backend: overrides ``jax.default_backend()`` (for tests).
      platforms: backends the kernel runs on; ``"auto"`` uses the reference elsewhere.

    Returns:
      Whatever the chosen path returns.
    """
    choice = resolve(implementation, backend=backend, platforms=platforms)
    if choice == "xla":
        return reference()
    if choice == "pallas_interpret":
        return kernel(True)
    if implementation == "auto":
        try:
            return kernel(False)
        except NotImplementedError:
            return reference()
    return kernel(False)
