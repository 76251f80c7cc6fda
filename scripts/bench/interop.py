"""Interop adapters: jitted gradient through to_nnx / to_haiku vs plain equinox.

The adapters only move arrays between containers at trace time, so under ``jit``
the compiled program should match the unwrapped equinox layer's. Each line times
``value_and_grad`` of a squared loss of an ``eqx.nn.MLP`` (batch vmapped) through
the adapter (ours) and with the bare module (anchor); target 0.9 means the adapter
may cost at most about 1.1x the bare layer. ``ours_err`` is the largest difference
of the loss and gradients between the two.
"""

import _harness as H  # noqa: I001

import equinox as eqx
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxkit.interop.flax import to_nnx
from jaxkit.interop.haiku import to_haiku


def _max_err(a, b):
    return float(
        max(
            np.max(np.abs(np.asarray(x) - np.asarray(y)))
            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
        )
    )


def run_case(batch: int, d: int, width: int, repeats: int) -> None:
    mlp = eqx.nn.MLP(d, d, width, 2, key=jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (batch, d))
    params, static = eqx.partition(mlp, eqx.is_array)

    def plain(p, x):
        return jax.value_and_grad(lambda p: jnp.mean(jax.vmap(eqx.combine(p, static))(x) ** 2))(p)

    anchor = H.time_jax(plain, params, x, repeats=repeats)
    ref_val, ref_grad = anchor.output
    sz = {"batch": batch, "d": d, "width": width}

    names = [f"layers.{i}.{n}" for i in range(3) for n in ("bias", "weight")]
    ref_leaves = [getattr(ref_grad.layers[int(k.split(".")[1])], k.split(".")[2]) for k in names]

    def report(case, fn, tree, leaves_of, note):
        ours = H.time_jax(fn, tree, x, repeats=repeats)
        val, grad = ours.output
        err = max(abs(float(val) - float(ref_val)), _max_err(leaves_of(grad), ref_leaves))
        H.emit(
            bench="interop",
            case=case,
            sizes=sz,
            ours=ours,
            anchor="equinox (unwrapped)",
            anchor_t=anchor,
            target=0.9,
            note=note,
            ours_err=err,
            anchor_err=0.0,
        )

    graphdef, state = nnx.split(to_nnx(mlp, batch_axis=0))

    def flax_fn(s, x):
        return jax.value_and_grad(lambda s: jnp.mean(nnx.merge(graphdef, s)(x) ** 2))(s)

    report(
        "to_nnx_mlp_value_and_grad",
        flax_fn,
        state,
        lambda g: [g["params"][k][...] for k in names],
        "jit(value_and_grad) through nnx.merge",
    )

    f = hk.without_apply_rng(hk.transform(lambda x: to_haiku(mlp, batch_axis=0)(x)))
    hp = f.init(None, x)

    def haiku_fn(p, x):
        return jax.value_and_grad(lambda p: jnp.mean(f.apply(p, x) ** 2))(p)

    report(
        "to_haiku_mlp_value_and_grad",
        haiku_fn,
        hp,
        lambda g: [g["haiku_adapter"][k] for k in names],
        "jit(value_and_grad) through hk.transform",
    )


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    sizes = [(256, 256, 512), (1024, 256, 1024)] + ([(4096, 1024, 2048)] if args.full else [])
    for batch, d, width in sizes:
        run_case(batch, d, width, args.repeats)


if __name__ == "__main__":
    main()
