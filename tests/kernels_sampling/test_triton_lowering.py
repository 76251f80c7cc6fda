"""The Pallas sampler lowers to a valid Triton module for a GPU, checked on a CPU.

``jax.export`` for ``platforms=["cuda"]`` runs Pallas' Triton lowering without a GPU; the
Triton module it embeds is then checked with the MLIR verifier (which is where an H200
run failed: a ``fori_loop`` trip count computed from the data gives an ``scf.for`` whose
bounds have different types). Compiling that module to PTX needs the GPU
(``kernels/device_checks/sampling.py``).
"""

import functools
import re

import jax
import jax.numpy as jnp
import pytest
from jax._src import config as jax_config

from jaxkit.kernels.sampling import _pallas

try:
    from jax._src.pallas.triton import pallas_call_registration as _triton_reg
except ImportError as e:  # jaxlib built without the Triton dialect
    _triton_reg = None
    _WHY = f"jaxlib has no Pallas Triton lowering ({e})"
else:
    _WHY = "jax's Triton lowering has no lower_jaxpr_to_triton_module to check"
    if not hasattr(getattr(_triton_reg, "lowering", None), "lower_jaxpr_to_triton_module"):
        _triton_reg = None


def _export_triton(monkeypatch, r, v, dtype, *, hash_noise=True, **static):
    """Export the kernel for CUDA; return (exported MLIR text or None, [Triton modules])."""
    modules = []
    lower = _triton_reg.lowering.lower_jaxpr_to_triton_module

    def spy(*args, **kwargs):
        out = lower(*args, **kwargs)
        modules.append(out.module)
        return out

    monkeypatch.setattr(_triton_reg.lowering, "lower_jaxpr_to_triton_module", spy)
    x = jax.ShapeDtypeStruct((r, v), dtype)
    noise = (
        jax.ShapeDtypeStruct((2,), jnp.uint32)
        if hash_noise
        else jax.ShapeDtypeStruct((r, v), jnp.float32)
    )
    rows = [jax.ShapeDtypeStruct((r,), d) for d in (jnp.float32, jnp.int32) + (jnp.float32,) * 2]
    f = functools.partial(_pallas.sample_rows_pallas, platform="cuda", **static)
    try:
        exp = jax.export.export(
            jax.jit(f),
            platforms=["cuda"],
            disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")],
        )(x, noise, *rows)
    except RuntimeError as e:
        # jaxlib > 0.10.2 compiles the module at lowering time through the CUDA plugin's
        # handler; without one (a CPU-only install) the module is still there to verify
        if "compilation handler" not in str(e) or not modules:
            raise
        return None, modules
    return exp.mlir_module(), modules


@pytest.mark.skipif(_triton_reg is None, reason=_WHY)
@pytest.mark.parametrize(
    ("r", "v", "dtype", "hash_noise", "static", "block", "warps", "loops"),
    [
        # filters on, in-kernel noise: one row of 32768 per program, 32 warps, 2 bisections
        (64, 32000, jnp.bfloat16, True, {}, "1x32768", 32, 2),
        (64, 32000, jnp.bfloat16, True, {"num_warps": 8}, "1x32768", 8, 2),  # tuning knob
        # small vocabulary: several rows per program; noise read from HBM; logits stats
        (8, 100, jnp.float32, False, {"stats": "logits"}, "8x128", 4, 2),
        # no filter (plain): one arg-max, no loop
        (4, 4096, jnp.bfloat16, True, {"plain": True}, "1x4096", 8, 0),
    ],
)
def test_triton_module_verifies(monkeypatch, r, v, dtype, hash_noise, static, block, warps, loops):
    # explicit Triton compiler params: Triton even where jax_pallas_use_mosaic_gpu is True
    with jax_config.jax_pallas_use_mosaic_gpu(True):
        text, modules = _export_triton(monkeypatch, r, v, dtype, hash_noise=hash_noise, **static)
    if text is not None:  # jaxlib <= 0.10.2: the custom call carries the module
        assert "__gpu$xla.gpu.triton" in text
        assert re.findall(r"num_warps = (\d+)", text) == [str(warps)]
    assert len(modules) == 1
    module = modules[0]
    with module.context:
        assert module.operation.verify()  # raises with the verifier's message
    asm = module.operation.get_asm()
    assert f"tensor<{block}x" in asm  # the GPU block (rows x padded vocab)
    assert asm.count('"scf.for"') + asm.count("scf.for ") == loops
