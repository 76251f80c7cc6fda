"""A pytree of arrays to and from an orbax checkpoint folder (host-side, not jitted)."""

import pathlib
from typing import Any

import jax

from jaxkit._extras import require


def _ocp():
    return require("orbax.checkpoint", extra="ckpt", what="checkpoints need orbax")


def save_checkpoint(path, tree: Any) -> None:
    """Write a pytree of arrays to the folder ``path`` with orbax's ``StandardCheckpointer``.

    Host-side I/O; overwrites. The adapters' ``save_adapter`` (``jaxkit.steering``,
    ``jaxkit.memory``) write their parameters through it, never the backbone.

    Raises:
      ImportError: Without orbax (``pip install 'jaxkit[ckpt]'``).
    """
    ocp = _ocp()
    with ocp.StandardCheckpointer() as ck:
        ck.save(pathlib.Path(path).absolute(), tree, force=True)


def restore_checkpoint(path, like: Any) -> Any:
    """Read a :func:`save_checkpoint` folder into the structure, shapes and dtypes of ``like``.

    Host-side I/O.

    Raises:
      FileNotFoundError: No checkpoint at ``path``.
      ImportError: Without orbax (``pip install 'jaxkit[ckpt]'``).
    """
    path = pathlib.Path(path).absolute()
    if not path.exists():
        raise FileNotFoundError(f"`path` has no checkpoint: {path}.")
    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), like)
    with _ocp().StandardCheckpointer() as ck:
        try:
            out = ck.restore(path, abstract)
        except ValueError as e:  # orbax's message does not name our argument
            raise ValueError(f"`like` does not match the checkpoint at {path}: {e}") from e
    # NumPy leaves come back in their stored shape whatever `like` asks for: check
    for got, want in zip(jax.tree.leaves(out), jax.tree.leaves(abstract), strict=True):
        if tuple(got.shape) != tuple(want.shape):
            raise ValueError(
                f"`like` does not match the checkpoint at {path}: a leaf is stored with shape "
                f"{tuple(got.shape)}, `like` asks for {tuple(want.shape)}."
            )
    return out
