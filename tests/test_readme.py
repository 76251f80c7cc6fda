import importlib.util
import pathlib

import jax
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _snippets() -> list[str]:
    spec = importlib.util.spec_from_file_location("check_readme", ROOT / "scripts/check_readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.snippets()


SNIPPETS = _snippets()


def _is_composition(code: str) -> bool:
    # The "Composing methods" program trains with PRISM and decodes with WeDLM and AR: about
    # 16 s of CPU, mostly compiling, so it runs in the slow tier (tests/README.md budget).
    return "privacy.prism(" in code and "decoding.wedlm_generate(" in code


def test_readme_has_snippets():
    assert SNIPPETS, "README has no python snippet"
    assert sum(map(_is_composition, SNIPPETS)) == 1, "README: one 'Composing methods' program"


@pytest.mark.parametrize(
    "i",
    [
        pytest.param(i, marks=[pytest.mark.slow] if _is_composition(code) else [])
        for i, code in enumerate(SNIPPETS)
    ],
)
def test_readme_snippet_runs(i):
    # The README shows user code, which runs under jax's default promotion rules.
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        exec(compile(SNIPPETS[i], f"README snippet {i}", "exec"), {"__name__": "__readme__"})
