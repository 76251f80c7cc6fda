"""HypoSpace gravity-constrained 3D voxel domain (spec eval_robust.md §1.2.3) [C].

A structure is a stack of ``L`` layers (layer 0 = bottom) of ``g x g`` 0/1 arrays; gravity
holds iff every block above the bottom sits on a block in the same cell one layer down,
so supported structures are height maps ``h in {0..H}^{g x g}``. The observation is the
top view ``T = OR_z layer_z``; ``H_O`` is every height map positive exactly on ``T``'s
cells with ``h <= H``: ``K = H^{#cells}``.

Upstream's validator checks the top view and support but *not* the height cap
(``strict=False``, compat: a too-tall answer is valid yet never in ``H_O``);
``strict=True`` adds the cap. Malformed layers (entries outside {0, 1}) are invalid.
Canonical ids are the base-``(H+1)`` number of the height map (row-major, cell 0 most
significant); they must fit int32 (``(H+1)^(g*g) <= 2^31``), else a ``ValueError``
(g = 4 with H = 3 is 2^32; g = 3 breaks at H >= 10).
"""

import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Int, Shaped

from jaxkit import _validate as V
from jaxkit.hypospace._metrics import _check_task_ids


class VoxelTask(NamedTuple):
    """One top view.

    ``name`` ``g{g}_h{H}_b{b}_{counter:03d}``, ``top`` ``int8[g, g]``, ``admissible``
    sorted canonical ids of ``H_O``.
    """

    name: str
    top: np.ndarray
    admissible: np.ndarray


def _check_layers(layers):
    V.min_ndim(layers, 3, name="layers")
    s = jnp.shape(layers)
    if s[-1] != s[-2]:
        raise TypeError(f"`layers` must be [..., L, g, g], got shape {s}.")
    _int_or_bool(layers, "layers")
    return int(s[-1])


def _int_or_bool(x, name: str) -> None:
    """Voxels and heights are counts: floats (``1.5``) would compare as no height does."""
    dt = jnp.result_type(x)
    if not (jnp.issubdtype(dt, jnp.integer) or dt == jnp.bool_):
        raise TypeError(f"`{name}` must be an integer or bool array, got dtype {dt}.")


def _heights_core(layers):
    la = layers.astype(jnp.int32)
    well = jnp.all((la == 0) | (la == 1), axis=(-3, -2, -1))
    supported = jnp.all(la[..., 1:, :, :] <= la[..., :-1, :, :], axis=(-3, -2, -1))
    return jnp.sum(la, axis=-3, dtype=jnp.int32), well & supported


_heights_jit = jax.jit(_heights_core)


def heights_from_layers(
    layers: Shaped[ArrayLike, "..."],
) -> tuple[Int[Array, "... g g"], Bool[Array, "..."]]:
    """Column block counts and whether each stack is well formed and supported.

    Returns ``(heights, ok)``: ``ok`` iff entries are in {0, 1} and every block above the
    bottom sits on a block; ``heights`` is a height map only where ``ok``. Jitted.
    ``layers`` is ``[..., L, g, g]``: any leading batch axes.
    """
    _check_layers(layers)
    return _heights_jit(layers)


def _validate_core(layers, top, max_height, strict):
    h, ok = _heights_core(layers)
    ok = ok & jnp.all((h > 0) == jnp.broadcast_to(top != 0, h.shape), axis=(-2, -1))
    if strict:
        ok = ok & jnp.all(h <= jnp.broadcast_to(max_height, h.shape), axis=(-2, -1))
    return ok


_validate_jit = jax.jit(_validate_core, static_argnames=("strict",))


def validate_voxel(
    layers: Shaped[ArrayLike, "..."],
    top: Shaped[ArrayLike, "..."],
    *,
    max_height: Int[ArrayLike, ""] = 3,
    strict: bool = False,
) -> Bool[Array, "..."]:
    """Score stacks of layers against a top view.

    Valid iff well formed, supported, top view equal to ``top`` (and, when ``strict``,
    no column above ``max_height``). Jitted; batches over leading axes; never raises on
    a malformed or unsupported candidate (scored False).

    Args:
      layers: Integer or bool stacks ``[..., L, g, g]``: any leading batch axes, one
        score each (a single ``[L, g, g]`` stack gives a scalar).
      top: The top view ``[g, g]``, shared by every stack.
      max_height: Height cap (int > 0), read when ``strict``.
      strict: Also require every column ``<= max_height``.

    Raises:
      TypeError: ``layers`` of rank < 3, not square in its last two axes or not
        integer/bool; ``top`` not an integer/bool ``[g, g]``.
      ValueError: ``max_height <= 0``.
    """
    g = _check_layers(layers)
    V.shape(top, (g, g), name="top")
    _int_or_bool(top, "top")
    strict = V.flag(strict, name="strict")
    V.integer(max_height, name="max_height")
    mh = V.guard_positive(
        V.real_array(max_height, name="max_height", dtype=jnp.int32), max_height, name="max_height"
    )
    return _validate_jit(layers, top, mh, strict)


def _check_ids(g, max_height):
    g = V.python_int(g, name="g", minimum=1)
    max_height = V.python_int(max_height, name="max_height", minimum=1)
    if (max_height + 1) ** (g * g) > 2**31:
        raise ValueError(
            f"voxel ids overflow int32: (max_height+1)^(g*g) = {max_height + 1}^{g * g} > 2^31"
            f" (g={g}, max_height={max_height})."
        )
    return g, max_height


def _check_task(task: VoxelTask, max_height: int, *, name: str = "task") -> tuple[int, int]:
    """Check a :class:`VoxelTask` under the cap ``max_height`` (host-side record).

    ``top`` an integer or bool ``[g, g]`` view, ``admissible`` voxel ids in
    ``[0, (max_height+1)**(g*g))``. Returns ``(g, max_height)`` as :func:`_check_ids`.
    """
    if not isinstance(task, VoxelTask):
        raise TypeError(f"`{name}` must be a VoxelTask, got {type(task).__name__}.")
    V.ndim(task.top, 2, name=f"{name}.top")
    s = jnp.shape(task.top)
    if s[0] != s[1]:
        raise TypeError(f"`{name}.top` must be a square [g, g] view, got shape {s}.")
    _int_or_bool(task.top, f"{name}.top")  # a float 0.5 would read as a block
    g, max_height = _check_ids(s[0], max_height)
    _check_task_ids(task.admissible, (max_height + 1) ** (g * g), name=f"{name}.admissible")
    return g, max_height


def _id_core(heights, base):
    g = heights.shape[-1]
    w = np.asarray([base ** (g * g - 1 - c) for c in range(g * g)], np.int64).astype(np.int32)
    flat = heights.reshape((*heights.shape[:-2], g * g)).astype(jnp.int32)
    return jnp.sum(flat * jnp.broadcast_to(jnp.asarray(w), flat.shape), axis=-1, dtype=jnp.int32)


_id_jit = jax.jit(_id_core, static_argnames=("base",))


def voxel_id(heights: Int[ArrayLike, "... g g"], *, max_height: int) -> Int[Array, "..."]:
    """Base-``(max_height+1)`` code of height maps (int32; overflow is a ``ValueError``).

    ``heights`` is ``[..., g, g]``: any leading batch axes, one code each (an empty batch
    gives an empty result).

    Raises:
      TypeError: ``heights`` not an integer array ``[..., g, g]`` of square maps with
        ``g >= 1`` (a string included).
      ValueError: a height outside ``[0, max_height]``, ``max_height < 1`` or ids that
        overflow int32.
    """
    V.min_ndim(heights, 2, name="heights")
    V.integer(heights, name="heights")
    g = jnp.shape(heights)[-1]
    if g == 0 or jnp.shape(heights)[-2] != g:
        raise TypeError(
            f"`heights` must be [..., g, g] square height maps with g >= 1, got shape "
            f"{jnp.shape(heights)}."
        )
    g, max_height = _check_ids(jnp.shape(heights)[-1], max_height)
    heights = V.error_if(
        jnp.asarray(heights),
        V.any_outside(heights, 0, max_height),
        f"`heights` must lie in [0, max_height={max_height}].",
    )
    return _id_jit(heights, max_height + 1)


def enumerate_admissible(top, max_height: int) -> np.ndarray:
    """``H_O`` of a top view as ``int8[K, g, g]`` height maps (host-side).

    Every map with ``h > 0`` exactly on ``top``'s cells and ``h <= max_height``, in
    mixed-radix order over the cells (row-major); ``K = max_height^{#cells}``.
    """
    top = np.asarray(top)
    if top.ndim != 2 or top.shape[0] != top.shape[1]:
        raise TypeError(f"`top` must be [g, g], got shape {top.shape}.")
    max_height = V.python_int(max_height, name="max_height", minimum=1)
    cells = np.flatnonzero(top.reshape(-1) != 0)
    out = np.zeros((max_height ** len(cells), top.size), np.int8)
    for i, digits in enumerate(itertools.product(range(1, max_height + 1), repeat=len(cells))):
        out[i, cells] = digits
    return out.reshape(-1, *top.shape)


def voxel_collection(
    g: int = 3, max_height: int = 3, max_blocks: int = 1, *, fixed: bool = True
) -> list[VoxelTask]:
    """Top views with exactly ``max_blocks`` occupied cells (``fixed``) or 1..max_blocks.

    Host-side; placements in ``itertools.combinations`` order over row-major cells, per
    ``b`` ascending; names upstream's ``g{g}_h{H}_b{b}_{counter:03d}`` (counter per ``b``,
    from 1). Counts
    (g = 3, H = 3, b <= 3, not fixed): 9 + 36 + 84 = 129 sets, K in {3, 9, 27}.
    """
    g, max_height = _check_ids(g, max_height)
    max_blocks = V.python_int(max_blocks, name="max_blocks", minimum=1)
    V.flags(fixed=fixed)
    if max_blocks > g * g:
        raise ValueError(f"`max_blocks` must be <= g*g = {g * g}, got {max_blocks}.")
    tasks = []
    for b in [max_blocks] if fixed else range(1, max_blocks + 1):
        for counter, cells in enumerate(itertools.combinations(range(g * g), b), start=1):
            top = np.zeros(g * g, np.int8)
            top[list(cells)] = 1
            top = top.reshape(g, g)
            ids = np.sort(np.asarray(voxel_id(enumerate_admissible(top, max_height),
                                              max_height=max_height)))  # fmt: skip
            tasks.append(VoxelTask(f"g{g}_h{max_height}_b{b}_{counter:03d}", top, ids))
    return tasks


def layers_from_heights(heights, num_layers: int | None = None) -> np.ndarray:
    """``int8[L, g, g]`` stack of a height map (host-side; ``L`` = max height by default).

    One map at a time: ``heights`` is an integer ``[g, g]`` array (stack several with
    ``np.stack``; :func:`validate_voxel` batches them).

    Raises:
      TypeError: ``heights`` not an integer ``[g, g]`` array (a string included).
      ValueError: ``num_layers < 0``.
    """
    V.integer(heights, name="heights")
    h = np.asarray(heights)
    if h.ndim != 2 or h.shape[0] != h.shape[1]:
        raise TypeError(f"`heights` must be a [g, g] height map, got shape {h.shape}.")
    if num_layers is None:
        num = int(h.max())
    else:
        num = V.python_int(num_layers, name="num_layers", minimum=0)
    return (np.arange(num)[:, None, None] < h[None]).astype(np.int8)
