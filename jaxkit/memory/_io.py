"""Save and restore the DLMR adapter with orbax (host-side, not jitted)."""

from jaxkit import io
from jaxkit.memory._dlmr import DLMRParams


def save_adapter(path, params: DLMRParams) -> None:
    """Write the adapter's arrays (banks, injector, router) to the folder ``path``.

    Through :func:`jaxkit.io.save_checkpoint` (orbax, ``jaxkit[ckpt]``); never the backbone.
    Host-side I/O; overwrites.
    """
    if not isinstance(params, DLMRParams):
        raise TypeError(f"`params` must be DLMRParams, got {type(params).__name__}.")
    io.save_checkpoint(path, params)


def restore_adapter(path, like: DLMRParams) -> DLMRParams:
    """Read a :func:`save_adapter` folder into the structure of ``like``.

    ``like``: e.g. a fresh ``init_dlmr`` with the same configs. Host-side I/O.

    Raises:
      FileNotFoundError: no checkpoint at ``path``.
    """
    return io.restore_checkpoint(path, like)
