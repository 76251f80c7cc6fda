"""Keyword-sweep recipes for io (see tests/keywords.py)."""

import tempfile

import jax

from jaxkit import io, nn

CFG = nn.TransformerConfig(
    vocab_size=8, d_model=8, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=4, mlp_dim=8
)


def _save(**kw):
    params = nn.init_params(CFG, key=jax.random.key(0))
    with tempfile.TemporaryDirectory() as d:
        io.save_safetensors(params, CFG, d, **kw)


RECIPES = {
    "jaxkit.io.save_safetensors": _save,
    # the default `name` given explicitly: a call with no argument binds none, and the array
    # sweep reads an empty binding as a recipe that never reached the function
    "jaxkit.io.load_fixture": lambda **kw: io.load_fixture(**{"name": "tiny_lm", **kw}),
    "jaxkit.io.config_to_hf": lambda **kw: io.config_to_hf(CFG, **kw),
}

EXEMPT: dict[str, str] = {}
