"""Mesh and placement helpers for examples, scripts and tests.

Library functions never build meshes or call ``device_put``; callers do, with
these helpers. The axis vocabulary is ``"data"`` (batch) and ``"model"``
(tensor-parallel). ``rowwise`` runs a per-row function under ``jax.shard_map``
so each device works on its own rows.
"""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jaxkit import _validate


def make_mesh(
    *,
    model: int = 1,
    devices: Sequence[jax.Device] | None = None,
    explicit: bool = True,
) -> jax.sharding.Mesh:
    """Build a 2-D mesh with axes ``("data", "model")`` over all devices.

    Args:
      model: size of the ``model`` axis; ``data`` gets the rest.
      devices: devices to use (default: ``jax.devices()``).
      explicit: make both axes ``AxisType.Explicit`` (jax's default); ``False``
        gives ``Auto`` axes for GSPMD-style propagation.

    Returns:
      A ``jax.sharding.Mesh`` of shape ``(n_devices // model, model)``.

    Raises:
      ValueError: if ``model`` does not divide the number of devices.
    """
    devices = list(jax.devices() if devices is None else devices)
    n = len(devices)
    if n == 0:
        raise ValueError("`devices` must hold at least one device.")
    model = _validate.python_int(model, name="model")
    _validate.flags(explicit=explicit)
    if model < 1 or n % model:
        raise ValueError(
            f"`model` must be a positive divisor of the device count {n}, got model={model!r}."
        )
    axis_type = jax.sharding.AxisType.Explicit if explicit else jax.sharding.AxisType.Auto
    return jax.make_mesh(
        (n // model, model),
        ("data", "model"),
        axis_types=(axis_type, axis_type),
        devices=devices,
    )


def _check_mesh(mesh: Any) -> None:
    if not isinstance(mesh, jax.sharding.Mesh):
        raise TypeError(f"`mesh` must be a jax.sharding.Mesh, got {type(mesh).__name__}.")


def batch_spec(ndim: int) -> jax.sharding.PartitionSpec:
    """Partition spec that shards the leading axis over ``data``."""
    _validate.python_int(ndim, name="ndim", minimum=1)
    return jax.P("data", *([None] * (ndim - 1)))


def shard_batch(batch: Any, mesh: jax.sharding.Mesh) -> Any:
    """Place every array leaf of ``batch`` with its leading axis split over ``data``.

    Raises:
      ValueError: if a leading axis is not divisible by the ``data`` axis size.
    """
    _check_mesh(mesh)
    n_data = mesh.shape["data"]

    def place(x):
        x = np.asarray(x) if not isinstance(x, jax.Array) else x
        if x.ndim == 0:
            return jax.device_put(x, jax.NamedSharding(mesh, jax.P()))
        if x.shape[0] % n_data:
            raise ValueError(
                f"`batch` leading axis {x.shape[0]} is not divisible by the mesh's "
                f"'data' axis size {n_data}."
            )
        return jax.device_put(x, jax.NamedSharding(mesh, batch_spec(x.ndim)))

    return jax.tree.map(place, batch)


def replicate(tree: Any, mesh: jax.sharding.Mesh) -> Any:
    """Place every leaf of ``tree`` replicated over ``mesh``."""
    _check_mesh(mesh)
    return jax.tree.map(lambda x: jax.device_put(x, jax.NamedSharding(mesh, jax.P())), tree)


def rowwise(
    fn: Callable[..., Any],
    mesh: jax.sharding.Mesh,
    *,
    axis: str = "data",
) -> Callable[..., Any]:
    """Wrap a row-independent ``fn`` so each device runs it on its own rows.

    Every positional argument and every output is split along its leading axis
    over mesh axis ``axis``; no collective is needed because rows are
    independent. Use it for per-example functions (soft sorts over a batch,
    sampling, per-example gradients) to keep them device-local.
    """
    if not callable(fn):
        raise TypeError(f"`fn` must be callable, got {type(fn).__name__}.")
    _check_mesh(mesh)
    _validate.one_of(mesh.axis_names, axis=axis)

    def wrapped(*args):
        specs = tuple(jax.tree.map(lambda a: _lead(jax.numpy.ndim(a), axis), args))
        out_shape = jax.eval_shape(fn, *args)
        out_specs = jax.tree.map(lambda o: _lead(len(o.shape), axis), out_shape)
        return jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=out_specs)(*args)

    return wrapped


def gather_sharded(x: jax.Array) -> jax.Array:
    """Replicate ``x`` when an explicit mesh axis shards it; return it unchanged otherwise.

    For operations that need every row on every device (a sort or median over the
    batch axis, all pairs of a batch): under an ``AxisType.Explicit`` mesh jax refuses
    them on a sharded axis. Under ``Auto`` axes or outside a mesh this is the identity.
    Unlike :func:`replicate` it is traceable (``jax.sharding.reshard``), so library
    functions may call it inside ``jit``. ``x`` may have any shape (a string: a
    ``TypeError`` naming ``x``).
    """
    spec = explicit_spec(x)
    if spec is not None and any(a is not None for a in spec):
        return jax.sharding.reshard(x, jax.P())
    return x


def explicit_spec(x: jax.Array) -> jax.sharding.PartitionSpec | None:
    """``x``'s ``PartitionSpec`` when its mesh has an ``Explicit`` axis, else ``None``.

    Traceable: what an ``out_sharding=`` argument (a gather or scatter under an
    Explicit mesh) or :func:`gather_sharded` needs to know about an operand. ``x`` may
    have any shape; what JAX cannot type (a string) is a ``TypeError`` naming ``x``.
    """
    try:
        aval = jax.typeof(x)
    except TypeError:
        raise TypeError(f"`x` must be an array, got {type(x).__name__} {x!r:.80}.") from None
    sh = getattr(aval, "sharding", None)
    mesh = getattr(sh, "mesh", None)
    explicit = mesh is not None and any(
        t == jax.sharding.AxisType.Explicit for t in getattr(mesh, "axis_types", ())
    )
    return sh.spec if explicit else None


def _lead(nd: int, axis: str) -> jax.sharding.PartitionSpec:
    return jax.P(axis, *([None] * (nd - 1))) if nd else jax.P()


def process_info() -> dict[str, int]:
    """Return this process's index and count, and the local and global device counts."""
    return {
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "local_devices": jax.local_device_count(),
        "devices": jax.device_count(),
    }
