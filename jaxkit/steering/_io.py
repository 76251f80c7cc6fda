"""Save and restore the SVGT value side with orbax (host-side, not jitted)."""

import pathlib

import jax

from jaxkit.steering._svgt import SVGTParams


def save_adapter(path, vparams: SVGTParams) -> None:
    """Write the adapter's arrays to the folder ``path`` (orbax ``StandardCheckpointer``).

    Only the value side is written (never the backbone). Host-side I/O; overwrites.
    """
    import orbax.checkpoint as ocp

    if not isinstance(vparams, SVGTParams):
        raise TypeError(f"`vparams` must be SVGTParams, got {type(vparams).__name__}.")
    path = pathlib.Path(path).absolute()
    with ocp.StandardCheckpointer() as ck:
        ck.save(path, vparams, force=True)


def restore_adapter(path, like: SVGTParams) -> SVGTParams:
    """Read a :func:`save_adapter` folder into the structure of ``like``.

    ``like``: e.g. a fresh ``init_svgt`` with the same configs. Host-side I/O.

    Raises:
      FileNotFoundError: no checkpoint at ``path``.
    """
    import orbax.checkpoint as ocp

    path = pathlib.Path(path).absolute()
    if not path.exists():
        raise FileNotFoundError(f"`path` has no adapter checkpoint: {path}.")
    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), like)
    with ocp.StandardCheckpointer() as ck:
        return ck.restore(path, abstract)
