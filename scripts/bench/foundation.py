"""Harness self-check: jitted `jnp.sort` against NumPy's sort on the same rows.

It exercises the bench protocol (compile excluded, warm-up, median, JSON line) on
a comparison whose answer is known in advance, so a broken harness shows.
"""

import _harness as H  # noqa: I001
import jax.numpy as jnp
import numpy as np


def main() -> None:
    args = H.parse_args(__doc__.splitlines()[0])
    sizes = [(64, 1000), (64, 10000)] + ([(64, 100000)] if args.full else [])
    for b, n in sizes:
        x = np.random.default_rng(0).standard_normal((b, n)).astype(np.float32)
        xj = jnp.asarray(x)
        ours = H.time_jax(lambda a: jnp.sort(a, axis=-1), xj, repeats=args.repeats)
        anchor = H.time_python(lambda x=x: np.sort(x, axis=-1), repeats=args.repeats)
        err = float(np.max(np.abs(np.asarray(ours.output) - np.sort(x, axis=-1))))
        H.emit(
            bench="foundation",
            case="sort_jnp_vs_numpy",
            sizes={"batch": b, "n": n},
            ours=ours,
            anchor="numpy",
            anchor_t=anchor,
            target=None,
            note="harness self-check; no target",
            ours_err=err,
            anchor_err=0.0,
        )


if __name__ == "__main__":
    main()
