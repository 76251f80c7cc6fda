"""Make ``jaxkit/_fixtures/soft_golden_ot.npz``: softjax 0.1.1 p-norm OT (modes c0/c1/c2).

softjax solves the p-norm regularised transport dual with L-BFGS and needs
``jax_enable_x64`` for these modes, so the child interpreter (Python >= 3.12 with
``softjax==0.1.1``; first argument or ``SOFTJAX_PYTHON``) enables it and gets float64
inputs. Reuses the child program and driver of ``scripts/make_soft_golden.py``.
``tests/soft/test_ot_pnorm.py`` compares ``jaxkit.soft`` (under x64) against it.

    python scripts/make_soft_golden_ot.py /path/to/python3.12
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_soft_golden as base  # noqa: E402

OUT = os.path.join(base.ROOT, "jaxkit", "_fixtures", "soft_golden_ot.npz")
TIGHT = 1e-10
CHILD = base.CHILD.replace(
    "import softjax as sj", "jax.config.update('jax_enable_x64', True)\nimport softjax as sj"
)


def configs() -> list[dict]:
    c = []
    for n in (5, 9):
        x = f"x{n}"
        for m in ("c0", "c1", "c2"):
            kw = dict(axis=-1, softness=0.2, mode=m, method="ot")
            for d in (False, True):
                c.append(
                    dict(
                        name=f"argsort/{m}/n={n}/desc={d}",
                        fn="argsort",
                        args=[x],
                        kw={**kw, "descending": d},
                    )
                )
                c.append(
                    dict(
                        name=f"rank/{m}/n={n}/desc={d}",
                        fn="rank",
                        args=[x],
                        kw={**kw, "descending": d},
                    )
                )
            c.append(dict(name=f"sort/{m}/n={n}", fn="sort", args=[x], kw=kw))
            c.append(dict(name=f"argmax/{m}/n={n}", fn="argmax", args=[x], kw=kw))
            c.append(dict(name=f"max/{m}/n={n}", fn="max", args=[x], kw=kw))
            c.append(dict(name=f"top_k/{m}/n={n}", fn="top_k", args=[x, 2], kw=kw))
            c.append(dict(name=f"argquantile/{m}/n={n}", fn="argquantile", args=[x, "q"], kw=kw))
            c.append(dict(name=f"quantile/{m}/n={n}", fn="quantile", args=[x, "q"], kw=kw))
            c.append(
                dict(
                    name=f"argsort/{m}/n={n}/s=0.05",
                    fn="argsort",
                    args=[x],
                    kw={**kw, "softness": 0.05},
                )
            )
    # the same settings with softjax's L-BFGS run to a tight tolerance: separates its
    # solver error (tol 1e-5 by default) from any difference in the formulas
    tight = []
    for cf in c:
        if cf["fn"] in ("argsort", "rank", "argmax", "top_k") and "desc=True" not in cf["name"]:
            tight.append(
                dict(
                    cf,
                    name=cf["name"] + "/tight",
                    kw={**cf["kw"], "ot_kwargs": {"lbfgs_tol": TIGHT}},
                )
            )
    return c + tight


def inputs() -> dict:
    rng = np.random.default_rng(1)
    return dict(x5=rng.normal(size=(3, 5)), x9=rng.normal(size=(3, 9)), q=np.array([0.3, 0.5]))


def main() -> None:
    base.generate(base.softjax_python(), CHILD, configs(), inputs(), OUT)


if __name__ == "__main__":
    main()
