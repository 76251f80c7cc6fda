"""Save and restore the SVGT value side with orbax (host-side, not jitted)."""

from jaxkit import io
from jaxkit.steering._svgt import SVGTParams


def save_adapter(path, vparams: SVGTParams) -> None:
    """Write the value side's arrays to the folder ``path`` (never the backbone).

    Through :func:`jaxkit.io.save_checkpoint` (orbax, ``jaxkit[ckpt]``). Host-side I/O;
    overwrites.
    """
    if not isinstance(vparams, SVGTParams):
        raise TypeError(f"`vparams` must be SVGTParams, got {type(vparams).__name__}.")
    io.save_checkpoint(path, vparams)


def restore_adapter(path, like: SVGTParams) -> SVGTParams:
    """Read a :func:`save_adapter` folder into the structure of ``like``.

    ``like``: e.g. a fresh ``init_svgt`` with the same configs. Host-side I/O.

    Raises:
      FileNotFoundError: no checkpoint at ``path``.
    """
    return io.restore_checkpoint(path, like)
