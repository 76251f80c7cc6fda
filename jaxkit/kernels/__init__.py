"""Pallas kernels, each beside its jnp reference, behind ``implementation=``."""

from jaxkit.kernels._dispatch import IMPLEMENTATIONS as IMPLEMENTATIONS
from jaxkit.kernels._dispatch import dispatch as dispatch
from jaxkit.kernels._dispatch import resolve as resolve
