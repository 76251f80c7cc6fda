"""The cross-modal token game of PST: weighted token-wise interaction over coalitions.

Players are the motion tokens and the text tokens of one (motion, caption) pair; a
coalition's value is HBI's weighted token-wise interaction (WTI) restricted to it, with
the token weights renormalised over the coalition. ``v`` of the full coalition is the
stage's retrieval score. Reconstructed (PST's code is not public) from HBI's WTI.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float

from jaxkit import _validate
from jaxkit.retrieval import _stii


def _masked_softmax(logits, mask):
    has = jnp.any(mask, axis=-1, keepdims=True)
    z = jnp.where(mask, logits, -jnp.inf)
    z = jnp.where(has, z, jnp.zeros_like(z))  # double where: no NaN for an empty side
    return jnp.where(mask, jax.nn.softmax(z, axis=-1), 0)


def _wti(sim, w_a, w_b, mask_a, mask_b):
    both = jnp.any(mask_a, axis=-1) & jnp.any(mask_b, axis=-1)
    neg = jnp.asarray(-jnp.inf, sim.dtype)
    col = jnp.max(jnp.where(mask_a[..., :, None], sim, neg), axis=-2)  # best a for each b
    row = jnp.max(jnp.where(mask_b[..., None, :], sim, neg), axis=-1)  # best b for each a
    col = jnp.where(mask_b & both[..., None], col, 0)
    row = jnp.where(mask_a & both[..., None], row, 0)
    text_side = jnp.sum(_masked_softmax(w_b, mask_b) * col, axis=-1)
    motion_side = jnp.sum(_masked_softmax(w_a, mask_a) * row, axis=-1)
    val = 0.5 * (text_side + motion_side)
    return jnp.where(both, val, jnp.zeros_like(val))


def _check_game(sim, w_a, w_b):
    _validate.floating(sim, name="sim")
    _validate.min_ndim(sim, 2, name="sim")
    na, nb = jnp.shape(sim)[-2:]
    _validate.shape(w_a, (*jnp.shape(sim)[:-2], na), name="w_a")
    _validate.shape(w_b, (*jnp.shape(sim)[:-2], nb), name="w_b")
    return na, nb


_wti_jit = jax.jit(_wti)


def wti_value(
    sim: Float[ArrayLike, "*batch na nb"],
    w_a: Float[ArrayLike, "*batch na"],
    w_b: Float[ArrayLike, "*batch nb"],
    mask_a: Bool[ArrayLike, "*batch na"],
    mask_b: Bool[ArrayLike, "*batch nb"],
) -> Float[Array, "*batch"]:
    """Weighted token-wise interaction of a coalition ``(A, B)`` of motion/text tokens.

    ``v(A, B) = 1/2 [sum_{b in B} w~_b max_{a in A} S_ab + sum_{a in A} w~_a max_{b in B}
    S_ab]`` with ``w~ = softmax`` of the weight logits renormalised over the coalition, and
    ``v = 0`` when ``A`` or ``B`` is empty (guarded with ``where`` before any reduction, so
    no NaN reaches values or gradients). With full masks this is HBI's WTI score.
    Batched over leading axes; jitted once at module level.

    Args:
      sim: Token similarities ``S_ab`` (e.g. cosines), motion tokens by text tokens.
      w_a: Motion-token weight logits (``softmax`` gives HBI's ``omega^m``).
      w_b: Text-token weight logits.
      mask_a: Motion tokens in the coalition.
      mask_b: Text tokens in the coalition.

    Returns:
      The coalition value per batch row, in ``sim``'s dtype.

    Raises:
      TypeError: If ``sim`` is not floating, or the weights or masks do not match its
        shape, or a mask is not boolean.

    Example:
      >>> import jax.numpy as jnp
      >>> s = jnp.array([[1.0, 0.0], [0.0, 1.0]])
      >>> float(wti_value(s, jnp.zeros(2), jnp.zeros(2), jnp.array([True, True]),
      ...                 jnp.array([True, False])))
      0.75

    References:
      Jin et al., "Video-Text as Game Players: Hierarchical Banzhaf Interaction for
      Cross-Modal Representation Learning" (HBI), CVPR 2023, arXiv:2303.14369.
    """
    na, nb = _check_game(sim, w_a, w_b)
    batch = jnp.shape(sim)[:-2]
    _validate.shape(mask_a, (*batch, na), name="mask_a")
    _validate.shape(mask_b, (*batch, nb), name="mask_b")
    _validate.boolean(mask_a, name="mask_a")
    _validate.boolean(mask_b, name="mask_b")
    return _wti_jit(jnp.asarray(sim), jnp.asarray(w_a), jnp.asarray(w_b), mask_a, mask_b)


def cross_modal_value(params, mask: Bool[Array, " n"]) -> Float[Array, ""]:
    """Value function of the cross-modal game for :func:`game_values` and the samplers.

    ``params = (sim [Na, Nb], w_a [Na], w_b [Nb])``; players ``0..Na-1`` are the motion
    tokens and ``Na..Na+Nb-1`` the text tokens, so ``mask = concat(mask_a, mask_b)``.
    Traceable; not jitted itself (it is a ``value_fn`` for jitted callers).

    Args:
      params: ``(sim, w_a, w_b)`` as in :func:`wti_value`.
      mask: ``bool [Na + Nb]`` coalition.

    Returns:
      :func:`wti_value` of the coalition.

    Example:
      >>> import jax.numpy as jnp
      >>> p = (jnp.eye(2), jnp.zeros(2), jnp.zeros(2))
      >>> float(cross_modal_value(p, jnp.array([True, True, True, True])))
      1.0
    """
    sim, w_a, w_b = params
    _validate.boolean(mask, name="mask")
    _validate.shape(mask, (sim.shape[-2] + sim.shape[-1],), name="mask")
    na = sim.shape[-2]
    return _wti(sim, w_a, w_b, mask[:na], mask[na:])


def _cross_modal_stii_core(sim, w_a, w_b, valid_a, valid_b):
    na, nb = sim.shape[-2:]
    batch = sim.shape[:-2]
    flat = (sim.reshape(-1, na, nb), w_a.reshape(-1, na), w_b.reshape(-1, nb))
    valid = jnp.concatenate([valid_a.reshape(-1, na), valid_b.reshape(-1, nb)], axis=-1)
    masks = jnp.asarray(_stii._masks_np(na + nb))

    def one(p, ok):
        return jax.vmap(lambda m: cross_modal_value(p, m & ok))(masks)

    vals = jax.vmap(one)(flat, valid)
    out = _stii._stii_core(vals)
    return out.pairs[:, :na, na:].reshape(*batch, na, nb)


_cross_modal_stii = jax.jit(_cross_modal_stii_core)


def cross_modal_stii(
    sim: Float[ArrayLike, "*batch na nb"],
    w_a: Float[ArrayLike, "*batch na"],
    w_b: Float[ArrayLike, "*batch nb"],
    valid_a: Bool[ArrayLike, "*batch na"] | None = None,
    valid_b: Bool[ArrayLike, "*batch nb"] | None = None,
) -> Float[Array, "*batch na nb"]:
    """Exact STII of every (motion token, text token) pair of the cross-modal game.

    Tabulates :func:`cross_modal_value` over all ``2^(Na+Nb)`` coalitions and returns the
    cross block ``Phi_ab = STII_{a, Na+b}`` of :func:`stii_exact` (the targets of PST's
    Shapley-Taylor alignment loss; take ``stop_gradient`` of them there). Batched over
    leading axes; jitted once at module level; ``Na + Nb <= 20``. Padding tokens
    (``valid_* = False``) are dummy players (a coalition is valued without them): their
    rows are 0 and every other pair's STII equals that of the unpadded game, so games of
    different sizes share one compiled program.

    Args:
      sim: Token similarities, motion tokens by text tokens.
      w_a: Motion-token weight logits.
      w_b: Text-token weight logits.
      valid_a: Real (unpadded) motion tokens; ``None``: all.
      valid_b: Real text tokens; ``None``: all.

    Returns:
      ``[..., Na, Nb]`` pair interactions in ``sim``'s dtype (f32 accumulation).

    Raises:
      TypeError: If ``sim`` is not floating or the weights do not match its shape.
      ValueError: If ``Na + Nb > 20``.

    Example:
      >>> import jax.numpy as jnp
      >>> phi = cross_modal_stii(jnp.eye(2), jnp.zeros(2), jnp.zeros(2))
      >>> bool(phi[0, 0] > phi[0, 1])
      True

    References:
      Sundararajan, Dhamdhere, Agarwal, "The Shapley Taylor Interaction Index",
      ICML 2020, arXiv:1902.05622.
    """
    na, nb = _check_game(sim, w_a, w_b)
    _stii._check_max(int(na + nb), "sim")
    lead = jnp.shape(sim)[:-2]
    # built on the weights so that they are sharded like them
    valid_a = jnp.ones_like(w_a, dtype=bool) if valid_a is None else valid_a
    valid_b = jnp.ones_like(w_b, dtype=bool) if valid_b is None else valid_b
    _validate.shape(valid_a, (*lead, na), name="valid_a")
    _validate.shape(valid_b, (*lead, nb), name="valid_b")
    _validate.boolean(valid_a, name="valid_a")
    _validate.boolean(valid_b, name="valid_b")
    return _cross_modal_stii(jnp.asarray(sim), jnp.asarray(w_a), jnp.asarray(w_b), valid_a, valid_b)
