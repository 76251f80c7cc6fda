"""Shared set-up of the scripts that train an example's base model into a fixture.

``ROOT`` goes on ``sys.path`` (so ``jaxkit`` imports from the checkout),
:func:`load_example` imports ``examples/<name>.py`` by path, and :func:`parse_args`
reads the common ``--steps`` / ``--seed`` / ``--out`` flags.
"""

import argparse
import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def load_example(name: str):
    """The module ``examples/<name>.py``, imported by path."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def parse_args(doc: str, fixture: str, *, steps: int = 1500) -> argparse.Namespace:
    """``--steps``, ``--seed`` and ``--out`` (default ``jaxkit/_fixtures/<fixture>``)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "jaxkit" / "_fixtures" / fixture))
    return p.parse_args()
