"""Conformance cases for the fused categorical sampler.

The reference path (``implementation="xla"``) is differentiable in both modes; the
Pallas path runs through a ``custom_vjp`` (reverse mode only) and, in interpret
mode, is checked on a tiny shape. ``key`` is an argument so vmap/jit see it traced.
Each case returns ``(probability, entropy, token as float)``: the token is a
piecewise-constant function of the logits (zero derivative almost everywhere).
"""

import jax
import jax.numpy as jnp

from jaxkit.kernels import sampling
from tests.conformance import Bad, Case


def _fn(implementation):
    def fn(x, key, *, temperature, top_p, min_p, top_k):
        out = sampling.sample_tokens(
            x,
            key=key,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            implementation=implementation,
        )
        return out.probability, out.entropy, out.token.astype(out.probability.dtype)

    return fn


def _args(key, dtype, vocab=16):
    kx, ks = jax.random.split(key)
    return (2.0 * jax.random.normal(kx, (8, vocab), dtype), ks)


def _bad(**kw):
    def make(key):
        x = kw.pop("x", None)
        if x is None:
            x = jax.random.normal(key, (8, 16), jnp.float32)
        return (x, jax.random.key(1)), dict(kw)

    return make


BAD = (
    Bad(
        "integer logits",
        lambda k: ((jnp.ones((8, 16), jnp.int32), jax.random.key(1)), {}),
        TypeError,
        "logits",
    ),
    Bad("top_p = 0", _bad(top_p=0.0), ValueError, "top_p"),
    Bad("top_p > 1", _bad(top_p=1.5), ValueError, "top_p"),
    Bad("negative temperature", _bad(temperature=-0.5), ValueError, "temperature"),
    Bad("min_p > 1", _bad(min_p=1.5), ValueError, "min_p"),
    Bad("top_k > vocab", _bad(top_k=17), ValueError, "top_k"),
    Bad(
        "NaN logits",
        lambda k: ((jnp.full((8, 16), jnp.nan), jax.random.key(1)), {}),
        ValueError,
        "logits",
    ),
)

HP = {"temperature": (0.8, 1.3), "top_p": (0.9, 0.7), "min_p": (0.02, 0.05)}

CASES = [
    Case(
        "kernels.sampling/xla",
        _fn("xla"),
        _args,
        hparams=HP,
        static={"top_k": 6},
        grad_modes=("fwd", "rev"),
        bad=BAD,
        grad_atol=1e-6,
        grad_rtol=1e-6,
    ),
    Case(
        "kernels.sampling/pallas_interpret",
        _fn("pallas_interpret"),
        _args,
        hparams=HP,
        static={"top_k": 6},
        grad_modes=("rev",),
        grad_atol=1e-6,
        grad_rtol=1e-6,
        shard_argnums=(),
        # the xla case carries the full set by default; the kernel's grads, dtypes and
        # vmap checks run in `make test-slow` (test_sampling checks kernel == reference)
        slow_checks=("grads", "dtypes", "vmap"),
    ),  # a pallas_call is per-device: use it inside shard_map
]
