"""Run every example's main() in quick mode and assert its own `ok` (slow)."""

import jax
import pytest

from tests._subprocess import ROOT, load_example

EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))


# user programs: they run with XLA's default back end, as `make demo` does (the second pass
# of `make test-slow`; most of their time is running, not compiling)
@pytest.mark.slow
@pytest.mark.xla_defaults
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example(path, tmp_path):
    mod = load_example(path.stem)
    # Examples are user programs: they run under jax's default (standard) promotion,
    # as `make demo` does; the library itself is tested under strict promotion.
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        res = mod.main(quick=True, seed=0, out_dir=str(tmp_path))
    for field in ("method", "metric", "value", "baseline", "ok"):
        assert field in res, f"{path.stem}: result lacks {field!r}"
    assert res["ok"] is True, res
