"""Save and restore the DLMR adapter with orbax (host-side, not jitted)."""

import pathlib

import jax

from jaxkit.memory._dlmr import DLMRParams


def save_adapter(path, params: DLMRParams) -> None:
    """Write the adapter's arrays (banks, injector, router) to the folder ``path``.

    orbax ``StandardCheckpointer`` (``jaxkit[ckpt]``); never the backbone. Host-side
    I/O; overwrites.
    """
    import orbax.checkpoint as ocp

    if not isinstance(params, DLMRParams):
        raise TypeError(f"`params` must be DLMRParams, got {type(params).__name__}.")
    path = pathlib.Path(path).absolute()
    with ocp.StandardCheckpointer() as ck:
        ck.save(path, params, force=True)


def restore_adapter(path, like: DLMRParams) -> DLMRParams:
    """Read a :func:`save_adapter` folder into the structure of ``like``.

    ``like``: e.g. a fresh ``init_dlmr`` with the same configs. Host-side I/O.

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
