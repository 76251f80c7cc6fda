"""Optional dependencies: import one, or raise an ``ImportError`` that names its extra.

One copy of the guard every area uses for a field dependency (orbax, safetensors,
dp-accounting, e3nn-jax, cvxpy, flax, dm-haiku): a core install imports every subpackage,
and the first call that needs an extra says which one to install.
"""

import importlib
from types import ModuleType


def require(module: str, *, extra: str, what: str) -> ModuleType:
    """Import ``module``; if that fails, ``ImportError("{what}: pip install 'jaxkit[{extra}]'")``.

    Parents are imported first, as ``import a.b`` does, so a package set to ``None`` in
    ``sys.modules`` counts as missing even when its submodule is already loaded.
    """
    parts = module.split(".")
    try:
        for i in range(1, len(parts) + 1):
            mod = importlib.import_module(".".join(parts[:i]))
        return mod
    except ImportError as e:
        raise ImportError(f"{what}: pip install 'jaxkit[{extra}]'") from e
