"""Interventions in the residual stream of the transformer backbone.

One pure, jittable mechanism shared by :func:`jaxkit.nn.apply`,
:func:`~jaxkit.nn.run_layers`, :func:`~jaxkit.nn.prefill`,
:func:`~jaxkit.nn.decode_step` and the generators of ``jaxkit.decoding``: an
:class:`Interventions` pytree passed as ``interventions=``. It holds

* **additive edits** ``add = {l: vec}``: ``vec`` (``[D]``, ``[B, D]`` or ``[B, T, D]``)
  is added to the residual stream after block ``l`` (activation steering);
* **inserted latents**: ``K`` extra positions that exist only above block
  ``insert_layer``. They occupy ordinary cache slots ``insert_at[b] ..
  insert_at[b] + K - 1`` (the caller reserves them in the token sequence, e.g. with
  pad tokens, and gives them their logical positions like any other token), so each
  row's cache length stays one number. In blocks ``<= insert_layer`` those slots are
  hidden from every other query (the reserved tokens influence nothing); after
  block ``insert_layer`` their hidden states are replaced by ``latents [B, K, D]``
  and later blocks and later tokens attend to them like to any token. The same
  object is passed to every call of a generation: a chunk whose slots do not meet
  the span only gets the masking (a decode step), so the K/V cache stays
  consistent;
* **read sites** ``read_mlp = (l, ...)``: the inputs of block ``l``'s MLP, returned as
  :class:`MLPRead` (the normalised input of ``w_gate``/``w_up`` and the input of
  ``w_down``), the quantities that MLP editing methods need.

At a block both apply in the order: insertion, then the additive edit. With
``interventions=None`` (or an empty object) the forward is the plain one, bit for
bit. Layer indices and ``read_mlp`` are static (part of the pytree structure: one
compiled program per set of sites); vectors, latents and slots are traced.
"""

import functools
from collections.abc import Mapping
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from jaxkit import _validate


class MLPRead(NamedTuple):
    """The inputs of one block's MLP (a read site).

    Attributes:
      mlp_in: ``[B, T, D]`` the RMS-normalised input of ``w_gate`` and ``w_up``.
      down_in: ``[B, T, F]`` the input of ``w_down`` (``silu(x w_gate) * x w_up``).
    """

    mlp_in: Array
    down_in: Array


class Interventions(eqx.Module):
    """Residual-stream edits, inserted latents and MLP read sites (see the module doc).

    Example:
      >>> import jax.numpy as jnp
      >>> steer_vec = jnp.ones(16)                  # [D]: d_model = 16
      >>> iv = Interventions(add={1: steer_vec})    # CAA: added after block 1
      >>> m, z = jnp.array([3, 5]), jnp.zeros((2, 4, 16))  # rows' insert slots, [B, K, D]
      >>> iv = Interventions(insert_layer=1, insert_at=m, latents=z)
      >>> iv.n_insert                               # K = z.shape[1]
      4
      >>> iv = Interventions(read_mlp=(0,))  # LMOutput.reads[0].mlp_in / .down_in
    """

    add: dict
    insert_at: Array | None
    latents: Array | None
    insert_layer: int | None = eqx.field(static=True)
    n_insert: int = eqx.field(static=True)
    read_mlp: tuple[int, ...] = eqx.field(static=True)

    def __init__(
        self,
        add: dict[int, Float[ArrayLike, "..."]] | None = None,
        *,
        insert_layer: int | None = None,
        insert_at: Int[ArrayLike, " B"] | None = None,
        latents: Float[ArrayLike, "B K D"] | None = None,
        n_insert: int | None = None,
        read_mlp: tuple[int, ...] | list[int] = (),
    ):
        """Build the edits (type checks here; shapes against a model in the calls).

        Args:
          add: ``{layer: vec}``, ``vec`` of shape ``[D]``, ``[B, D]`` or ``[B, T, D]``
            (T = the chunk length of the call; only ``[D]`` and ``[B, D]`` in
            generation), added after that block.
          insert_layer: Block after which the latents enter (None: no insertion).
          insert_at: ``int[B]`` first cache slot (physical index; the query index
            without a cache) of the inserted span of each row.
          latents: ``[B, K, D]`` hidden states of the K inserted positions.
          n_insert: K, needed only when ``latents`` is None (masking alone, e.g.
            a cache whose span was filled earlier).
          read_mlp: Blocks whose MLP inputs are returned (``reads`` of the output).

        Raises:
          TypeError: non-int layers, non-float vectors/latents, non-int slots.
          ValueError: an insertion without ``insert_at`` or without K.
        """
        if add is not None and not isinstance(add, Mapping):
            raise TypeError(
                f"`add` must be a dict {{layer: vector}} or None, got {type(add).__name__}."
            )
        out = {}
        for layer, vec in dict(add or {}).items():
            layer = _validate.python_int(layer, name="add (layer)")
            vec = jnp.asarray(vec)
            _validate.floating(vec, name=f"add[{layer}]")
            _validate.ndim(vec, (1, 2, 3), name=f"add[{layer}]")
            out[layer] = vec
        self.add = out
        self.read_mlp = tuple(sorted({_validate.python_int(r, name="read_mlp") for r in read_mlp}))
        if insert_layer is None:
            if insert_at is not None or latents is not None or n_insert is not None:
                raise ValueError("`insert_at`/`latents`/`n_insert` need `insert_layer`.")
            self.insert_layer, self.insert_at, self.latents, self.n_insert = None, None, None, 0
            return
        self.insert_layer = _validate.python_int(insert_layer, name="insert_layer")
        if insert_at is None:
            raise ValueError("an insertion needs `insert_at` (int[B] first slot per row).")
        insert_at = jnp.asarray(insert_at)
        _validate.integer(insert_at, name="insert_at")
        _validate.ndim(insert_at, 1, name="insert_at")
        self.insert_at = insert_at.astype(jnp.int32)
        if latents is not None:
            latents = jnp.asarray(latents)
            _validate.floating(latents, name="latents")
            _validate.ndim(latents, 3, name="latents")
            k = latents.shape[1]
            if n_insert is not None and _validate.python_int(n_insert, name="n_insert") != k:
                raise ValueError(f"`n_insert`={n_insert} disagrees with latents of K={k}.")
            self.n_insert = k
        elif n_insert is None:
            raise ValueError("give `latents` or `n_insert` with an insertion.")
        else:
            self.n_insert = _validate.python_int(n_insert, name="n_insert", minimum=1)
        self.latents = latents

    def add_to(self, layer: int, h: Array) -> Array:
        """``h [B, T, D]`` plus the edit after block ``layer``, as the forward adds it.

        The edit is cast to ``h``'s dtype; ``[D]`` and ``[B, D]`` act at every position,
        ``[B, T, D]`` as is. No edit at ``layer``: ``h`` itself. For code that builds rows
        of the stream outside the forward (inserted latents of its own) and must give them
        the block's edit exactly as the forward would.

        Raises:
          TypeError: a non-int ``layer``; an ``h`` that is not a floating ``[B, T, D]``
            array the edit fits (its width, its rows, ``[B, T, D]`` its whole shape).
        """
        layer = _validate.python_int(layer, name="layer")
        _validate.floating(h, name="h")
        h = jnp.asarray(h)
        _validate.ndim(h, 3, name="h")
        vec = self.add.get(layer)
        if vec is None:
            return h
        fits = vec.shape[-1] == h.shape[-1] and (
            vec.ndim == 1 or vec.shape[0] == h.shape[0] and (vec.ndim == 2 or vec.shape == h.shape)
        )
        if not fits:
            raise TypeError(
                f"`h` of shape {h.shape} does not take the edit add[{layer}] {vec.shape}."
            )
        vec = vec.astype(h.dtype)
        return h + (vec if vec.ndim == 3 else vec.reshape((-1, 1, vec.shape[-1])))


# `*interventions` is not annotated `Interventions | None`: the checks below name the entry
# (`interventions[1]`), where the test suite's runtime type checker would name only the tuple
def combine_interventions(*interventions: Any) -> Interventions:
    """One :class:`Interventions` doing what each of ``interventions`` does, in one forward.

    The functions and generators of the backbone take one ``interventions=`` object; this
    composes the edits of several methods into it: a steering vector
    (``jaxkit.steering.steer_add``), a memory span (``jaxkit.memory.memory_interventions``),
    read sites of your own. Like ``optax.chain`` for transforms, the result is an ordinary
    :class:`Interventions`: pass it to ``nn.apply`` / ``prefill`` / ``decode_step`` or a
    ``jaxkit.decoding`` generator, under ``jit`` or not (the inputs may hold tracers).

    * **Additive edits** at different blocks are kept; edits at the same block are summed
      (``h + a + b``: both added after that block, as if one followed the other, up to float
      rounding; the sum is taken in the vectors' promoted dtype and cast to the stream's
      dtype, as one edit is). Shapes combine as the forward broadcasts them: ``[D]`` with
      anything, ``[B, D]`` with ``[B, D]`` or ``[B, T, D]`` (the row's vector at every
      position).
    * **An insertion** (inserted latents, or a masked span) comes from at most one input:
      the K/V cache holds one inserted span per row, so two are a ``ValueError`` (insert
      them as one span of concatenated latents instead).
    * **Read sites** are the union.

    Args:
      *interventions: :class:`Interventions` or None (skipped). None at all gives the
        empty object (the plain forward, bit for bit).

    Returns:
      The combined :class:`Interventions`.

    Raises:
      TypeError: an entry that is not an :class:`Interventions` or None, or edits at one
        block whose shapes do not combine (naming ``interventions[i].add[l]``).
      ValueError: more than one entry with an insertion.

    Example:
      >>> import jax.numpy as jnp
      >>> a = Interventions({1: jnp.ones(16)})                 # a steering vector
      >>> b = Interventions({1: jnp.ones((2, 16))}, read_mlp=(0,))
      >>> iv = combine_interventions(a, None, b)
      >>> iv.add[1].shape, iv.read_mlp
      ((2, 16), (0,))
    """
    add: dict[int, Array] = {}
    where: dict[int, str] = {}
    reads: set[int] = set()
    ins: tuple[int, Interventions] | None = None
    for i, iv in enumerate(interventions):
        if iv is None:
            continue
        if not isinstance(iv, Interventions):
            raise TypeError(
                f"`interventions[{i}]` must be an Interventions or None, got {type(iv).__name__}."
            )
        for layer, vec in iv.add.items():
            name = f"interventions[{i}].add[{layer}]"
            if layer not in add:
                add[layer], where[layer] = vec, name
                continue
            prev = add[layer]
            ok = prev.shape[-1] == vec.shape[-1] and (
                min(prev.ndim, vec.ndim) == 1
                or (prev.shape[0] == vec.shape[0] and (prev.ndim < 3 or vec.ndim < 3))
                or prev.shape == vec.shape
            )
            if not ok:  # what the forward itself would not broadcast, or only by accident
                raise TypeError(
                    f"`{name}` has shape {vec.shape}, which does not combine with "
                    f"{prev.shape} of `{where[layer]}` (edits at one block are summed)."
                )
            rank = max(prev.ndim, vec.ndim)
            add[layer] = _lift(prev, rank) + _lift(vec, rank)
        reads.update(iv.read_mlp)
        if iv.insert_layer is not None:
            if ins is not None:
                raise ValueError(
                    f"`interventions[{ins[0]}]` and `interventions[{i}]` both insert a span: "
                    "one inserted span per call (concatenate the latents into one span)."
                )
            ins = (i, iv)
    if ins is None:
        return Interventions(add, read_mlp=tuple(reads))
    iv = ins[1]
    return Interventions(
        add,
        insert_layer=iv.insert_layer,
        insert_at=iv.insert_at,
        latents=iv.latents,
        n_insert=iv.n_insert,
        read_mlp=tuple(reads),
    )


def _lift(vec: Array, rank: int) -> Array:
    """``vec`` with the axes the forward gives it against an edit of rank ``rank``."""
    if vec.ndim == 2 and rank == 3:
        return vec[:, None, :]
    return vec.reshape((1,) * (rank - vec.ndim) + vec.shape)  # explicit: no rank promotion


def is_empty(iv) -> bool:
    return iv is None or (not iv.add and iv.insert_layer is None and not iv.read_mlp)


def check(iv, cfg, b: int, t: int):
    """Check ``iv`` against the model and the call's batch/chunk; None if empty.

    Shapes and layer indices: TypeError / ValueError. ``insert_at`` is guarded at
    run time (``eqx.error_if``) to be ``>= 0``. (The generators' stricter check, edits of
    ``[D]`` / ``[B, D]`` only, is :func:`jaxkit._tokens.check_interventions`.)
    """
    if iv is None:
        return None
    if not isinstance(iv, Interventions):
        raise TypeError(f"`interventions` must be an Interventions, got {type(iv).__name__}.")
    n, d = cfg.n_layers, cfg.d_model

    def in_range(layer, what):
        if not 0 <= layer < n:
            raise ValueError(f"`{what}` layer index must lie in [0, {n}), got {layer}.")

    for layer, vec in iv.add.items():
        in_range(layer, "interventions.add")
        ok = [(d,), (b, d), (b, t, d)]
        if tuple(vec.shape) not in ok:
            raise TypeError(
                f"`interventions.add[{layer}]` must have shape one of {ok}, got {vec.shape}."
            )
    for r in iv.read_mlp:
        in_range(r, "interventions.read_mlp")
    if iv.insert_layer is None:
        return None if is_empty(iv) else iv
    in_range(iv.insert_layer, "interventions.insert_layer")
    if iv.insert_at.shape != (b,):
        raise TypeError(
            f"`interventions.insert_at` must have shape ({b},), got {iv.insert_at.shape}."
        )
    if iv.latents is not None and iv.latents.shape != (b, iv.n_insert, d):
        raise TypeError(
            f"`interventions.latents` must have shape ({b}, {iv.n_insert}, {d}), "
            f"got {iv.latents.shape}."
        )
    bad = jnp.any(iv.insert_at < 0)
    at = _validate.error_if(iv.insert_at, bad, "`interventions.insert_at` must be >= 0.")
    return Interventions(
        iv.add,
        insert_layer=iv.insert_layer,
        insert_at=at,
        latents=iv.latents,
        n_insert=iv.n_insert,
        read_mlp=iv.read_mlp,
    )


# ----------------------------------------------------------------------------- traced pieces


def hide_span(iv, mask: Array, base: Array) -> Array:
    """``mask [B, T, S]`` with the inserted span's key slots hidden from other queries.

    ``base``: ``int[B]`` physical slot of query 0 (cache length, or 0 without cache).
    """
    _, t, s = mask.shape
    j = jnp.arange(s, dtype=jnp.int32)[None, None, :]
    lo = iv.insert_at[:, None, None]
    span = (j >= lo) & (j < lo + iv.n_insert)
    own = j == (base[:, None, None] + jnp.arange(t, dtype=jnp.int32)[None, :, None])
    return mask & ~(span & ~own)


def edit(iv, layer: int, h: Array, base: Array) -> Array:
    """Apply the insertion (if ``layer`` is ``insert_layer``) then ``add[layer]``."""
    if iv.insert_layer == layer and iv.latents is not None:
        t = h.shape[1]
        idx = (
            jnp.arange(t, dtype=jnp.int32)[None, :] + (base - iv.insert_at)[:, None]
        )  # [B, T] index in span
        hit = (idx >= 0) & (idx < iv.n_insert)
        lat = jnp.take_along_axis(
            iv.latents.astype(h.dtype), jnp.clip(idx, 0, iv.n_insert - 1)[:, :, None], axis=1
        )
        h = jnp.where(hit[:, :, None], lat, h)
    return iv.add_to(layer, h)


def edit_at(iv, sites: tuple[int, ...], layer: Array, h: Array, base: Array, n_layers: int):
    """:func:`edit` of the block with the traced index ``layer`` (unedited off ``sites``).

    One site: a select of the edited or the unedited value. More: a switch on the
    block's site (branch 0 = no edit), so each block computes only its own edit (a
    select per site would cost ``L x sites`` edits for an edit at every layer). Exact.
    """
    if len(sites) == 1:
        return jnp.where(layer == sites[0], edit(iv, sites[0], h, base), h)
    branch = np.zeros(n_layers, np.int32)
    branch[list(sites)] = np.arange(1, len(sites) + 1)
    fns = [lambda h: h] + [functools.partial(edit, iv, site, base=base) for site in sites]
    return jax.lax.switch(jnp.asarray(branch)[layer], fns, h)
