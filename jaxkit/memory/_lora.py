"""The spec's ``"lora_replica"`` injector: per-bank LoRA adapters on a replica of the frozen LM.

[R] (spec §4.2, after VisMem): ``M = g_phi(E, Z_{1:k})`` is the last-block state at the
``k`` latent slots of the frozen LM run, with a bank's LoRA adapter, on
``inputs_embeds = [E ; Z_{1:k}]`` (causal attention; ``E`` the embeddings of the
context). The adapters are a functional, merge-free view: :func:`lora_apply` returns
new weights ``W + (alpha / r) (a b^T)^T`` and never touches the frozen parameters;
they are applied only inside the injector (the decode path reads the untouched
backbone). ``a`` (PEFT's ``lora_B``) starts at zero, so a fresh adapter *is* the
frozen LM. LoRA factors and the merge are ``jaxkit.privacy``'s public ones.
Not ported: VisMem's dropout 0.05 (the injector is deterministic here) and its
context cap of 1024 states (the context is every valid slot).
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxkit import _validate, nn, privacy

# spec target names -> jaxkit.nn weight names
TARGETS = {
    "q": "wq",
    "k": "wk",
    "v": "wv",
    "o": "wo",
    "gate": "w_gate",
    "up": "w_up",
    "down": "w_down",
}


def _pattern(targets) -> str:
    return "^layers/(" + "|".join(TARGETS[t] for t in targets) + ")$"


class LoraInjector(eqx.Module):
    """``g_phi`` as a LoRA-adapted replica of the frozen LM (one adapter per bank).

    Attributes:
      adapters: Per bank (one with ``shared_bank``), a tree like the backbone's
        parameters with ``privacy.LoraFactors`` at the targets and ``None`` elsewhere.
      scale: ``alpha / rank``.
    """

    adapters: tuple
    scale: float = eqx.field(static=True)

    def __init__(self, lm_cfg: nn.TransformerConfig, *, n_banks, rank, alpha, targets, key):
        _validate.is_key(key)
        shapes = jax.eval_shape(functools.partial(nn.init_params, lm_cfg), key=jax.random.key(0))
        names = {TARGETS[t] for t in targets}

        def leaf(path, s):
            ps = jax.tree_util.keystr(path, simple=True, separator="/")
            hit = ps.startswith("layers/") and ps.split("/")[-1] in names
            return jnp.zeros(s.shape, jnp.float32) if hit else None

        skel = jax.tree_util.tree_map_with_path(leaf, shapes)
        # "ffa": a (PEFT lora_B) = 0, b (lora_A) random: a fresh adapter is the frozen LM
        self.adapters = tuple(
            privacy.lora_init(skel, targets=_pattern(targets), rank=rank, key=k, method="ffa").lora
            for k in jax.random.split(key, n_banks)
        )
        self.scale = float(alpha) / float(rank)


def lora_apply(lm_params: dict, adapter, scale) -> dict:
    """The adapted weights ``W + scale (a b^T)^T`` as a new tree (``lm_params`` untouched).

    Differentiable in ``adapter``; the frozen parameters enter under ``stop_gradient``.
    A NaN or infinite ``scale`` raises ValueError (traced: under ``jit``).
    """
    scale = _validate.guard_finite(_validate.real_array(scale, name="scale"), scale, name="scale")
    return privacy.lora_merge(jax.lax.stop_gradient(lm_params), adapter, scale=scale)


def replica_memory(
    inj: LoraInjector,
    lm_params: dict,
    lm_cfg: nn.TransformerConfig,
    ctx: Float[Array, "B S D"],
    ctx_valid: Bool[Array, "B S"],
    at: Int[Array, " B"],
    latents: Float[Array, "B W D"],
    bank: Int[Array, " B"],
    ctx_pos: Int[Array, "B S"] | None = None,
) -> Float[Array, "B W D"]:
    """Last-block states at the latent slots of the adapted LM on ``[ctx ; latents]``.

    ``ctx`` (embeddings) at positions ``ctx_pos`` (default ``0..S-1``, its slot index,
    gaps included; increasing over the valid entries), ``ctx_valid`` the slots the
    latents may read; latent ``i`` at position ``at + i``. Causal attention, so latent
    ``i`` reads ``Z_{1:i+1}`` only. Row ``b`` uses the adapter of ``bank[b]`` (each
    adapter runs on the whole batch: two passes with two banks). f32 result.
    """
    b, s, _ = ctx.shape
    w = latents.shape[1]
    dt = lm_params["embed"].dtype
    x = jnp.concatenate([ctx.astype(dt), latents.astype(dt)], axis=1)
    # batch-shaped pieces built from ``at`` keep its (batch) sharding
    lat_pos = at[:, None] + jnp.arange(w, dtype=jnp.int32)[None, :]
    if ctx_pos is None:
        ctx_pos = jnp.zeros_like(at)[:, None] + jnp.arange(s, dtype=jnp.int32)[None, :]
    pos = jnp.concatenate([ctx_pos, lat_pos], axis=1)
    e = jnp.arange(s + w, dtype=jnp.int32)
    key_ok = jnp.concatenate([ctx_valid, lat_pos >= 0], axis=1)  # latents: always readable
    # causal over [ctx ; latents], invalid slots hidden (each query keeps itself: no empty row)
    mask = (e[None, None, :] <= e[None, :, None]) & key_ok[:, None, :]
    mask = mask | (e[None, None, :] == e[None, :, None])
    outs = []
    for adapter in inj.adapters:
        ad = lora_apply(lm_params, adapter, inj.scale)
        outs.append(nn.run_layers(ad, lm_cfg, x, pos, attn_mask=mask).h[:, s:])
    mem = outs[0] if len(outs) == 1 else jnp.where((bank == 0)[:, None, None], outs[0], outs[1])
    return mem.astype(jnp.float32)
