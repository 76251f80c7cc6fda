"""Save and restore the DLMR adapter with orbax (host-side, not jitted)."""

import pathlib

import jax

from jaxkit import _extras, io
from jaxkit.memory._checks import check_params
from jaxkit.memory._dlmr import DLMRParams


def save_adapter(path, params: DLMRParams) -> None:
    """Write the adapter's arrays (banks, injector, router) to the folder ``path``.

    Through :func:`jaxkit.io.save_checkpoint` (orbax, ``jaxkit[ckpt]``); never the backbone.
    Host-side I/O; overwrites.
    """
    if not isinstance(params, DLMRParams):
        raise TypeError(f"`params` must be DLMRParams, got {type(params).__name__}.")
    check_params(params, name="params")  # a malformed adapter would restore as one
    io.save_checkpoint(path, params)


def _name(path) -> str:
    """A key path as a dotted name (``router.l1.w``), orbax's naming of a saved leaf."""
    parts = []
    for k in path:
        if isinstance(k, jax.tree_util.GetAttrKey):
            parts.append(k.name)
        elif isinstance(k, jax.tree_util.DictKey):
            parts.append(str(k.key))
        elif isinstance(k, jax.tree_util.SequenceKey):
            parts.append(str(k.idx))
        else:  # pragma: no cover - other key kinds do not occur in DLMRParams
            parts.append(str(k))
    return ".".join(parts)


def _saved_shapes(path) -> dict:
    """``{dotted name: shape}`` of the arrays in an orbax checkpoint folder (its metadata)."""
    ocp = _extras.require("orbax.checkpoint", extra="ckpt", what="checkpoints need orbax")
    with ocp.StandardCheckpointer() as ck:
        meta = ck.metadata(path)
    tree = getattr(meta, "item_metadata", meta)
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {_name(k): tuple(getattr(v, "shape", ())) for k, v in flat}


def restore_adapter(path, like: DLMRParams) -> DLMRParams:
    """Read a :func:`save_adapter` folder into the structure of ``like``.

    ``like``: e.g. a fresh ``init_dlmr`` with the same configs. Host-side I/O. The saved
    arrays are checked against ``like``'s first, by name (``router.l1.w``) and shape, so
    an adapter saved under another layout (e.g. before the router gained its
    standardisation constants ``router.mean``/``router.scale``) or another config fails
    with the names that differ instead of orbax's structure error.

    Raises:
      FileNotFoundError: no checkpoint at ``path``.
      TypeError: ``like`` is not a DLMRParams.
      ValueError: the checkpoint's arrays differ from ``like``'s (names missing from
        it, extra names in it, or other shapes); the message lists them.
    """
    if not isinstance(like, DLMRParams):
        raise TypeError(f"`like` must be DLMRParams, got {type(like).__name__}.")
    path = pathlib.Path(path).absolute()
    if not path.exists():
        raise FileNotFoundError(f"`path` has no checkpoint: {path}.")
    saved = _saved_shapes(path)
    want = {_name(k): tuple(v.shape) for k, v in jax.tree_util.tree_flatten_with_path(like)[0]}
    missing = sorted(set(want) - set(saved))
    extra = sorted(set(saved) - set(want))
    common = sorted(set(want) & set(saved))
    shapes = [f"{n} {saved[n]} vs {want[n]}" for n in common if saved[n] != want[n]]
    if missing or extra or shapes:
        raise ValueError(
            f"the adapter at `path` does not fit `like`: missing from the checkpoint "
            f"{missing or 'none'}; extra in it {extra or 'none'}; other shapes (saved vs like) "
            f"{shapes or 'none'}. An adapter saved before the router's standardisation "
            "(`router.mean`, `router.scale`) must be retrained or converted; a config "
            "mismatch needs `like` built with the saving run's configs."
        )
    return io.restore_checkpoint(path, like)
