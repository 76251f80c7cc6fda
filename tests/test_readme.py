import importlib.util
import pathlib

import jax

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_readme_snippets_run():
    spec = importlib.util.spec_from_file_location("check_readme", ROOT / "scripts/check_readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    codes = mod.snippets()
    assert codes, "README has no python snippet"
    # The README shows user code, which runs under jax's default promotion rules.
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        for i, code in enumerate(codes):
            exec(compile(code, f"README snippet {i}", "exec"), {"__name__": "__readme__"})
