"""WBMM operator: oracles (per-window depthwise conv), padding rule, kernel vs reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.test_util import check_grads

from jaxkit.kernels.windowed_matmul import (
    relative_position_index,
    table_from_depthwise_kernel,
    window_matrix,
    windowed_matmul,
    windowed_matmul_cached,
    windowed_matmul_reference,
)

IMPLS = ["pallas_interpret"] + (["pallas"] if jax.default_backend() != "cpu" else [])
TOL = {jnp.dtype(jnp.float32): 1e-5, jnp.dtype(jnp.bfloat16): 2e-2}


def _dw(x, k):
    """Zero-padded SAME depthwise cross-correlation, NHWC / (K, L, C)."""
    kh, kw, c = k.shape
    return lax.conv_general_dilated(
        x,
        k[:, :, None, :],
        (1, 1),
        [((kh - 1) // 2,) * 2, ((kw - 1) // 2,) * 2],
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=c,
        precision=lax.Precision.HIGHEST,
    )


def _per_window_dw(x, k, window):
    """The oracle: an independent zero-padded depthwise conv inside every window, + x."""
    wh, ww = window
    out = np.zeros(x.shape, np.float64)
    for i in range(0, x.shape[1], wh):
        for j in range(0, x.shape[2], ww):
            xw = x[:, i : i + wh, j : j + ww, :]
            out[:, i : i + wh, j : j + ww, :] = np.asarray(_dw(xw, k)) + np.asarray(xw)
    return out


def _rand(key, *shape, dtype=jnp.float32):
    return jax.random.normal(key, shape, jnp.float32).astype(dtype)


@pytest.mark.parametrize("window", [(3, 3), (7, 7), (2, 4)])
def test_equals_per_window_depthwise_conv_f32(window, key):
    kx, kk = jax.random.split(key)
    wh, ww = window
    x = _rand(kx, 2, 2 * wh, 3 * ww, 3)
    k = _rand(kk, 2 * wh - 1, 2 * ww - 1, 3)  # asymmetric kernel (catches a flip)
    got = windowed_matmul(x, table_from_depthwise_kernel(k, window=window), window=window)
    want = _per_window_dw(x, k, window)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    # ... and it is NOT the global sliding conv
    glob = np.asarray(_dw(x, k)) + np.asarray(x)
    assert np.max(np.abs(np.asarray(got) - glob)) > 1e-3


def test_equals_per_window_depthwise_conv_f64(key):
    with jax.enable_x64(True):
        window = (7, 7)
        x = jax.random.normal(key, (1, 14, 7, 2), jnp.float64)
        k = jax.random.normal(jax.random.fold_in(key, 1), (13, 13, 2), jnp.float64)
        got = windowed_matmul(x, table_from_depthwise_kernel(k, window=window), window=window)
        np.testing.assert_allclose(
            np.asarray(got), _per_window_dw(x, k, window), rtol=1e-12, atol=1e-12
        )


def test_single_window_equals_global_conv(key):
    """One window covering the map: WBMM == SAME depthwise conv + identity."""
    window = (5, 5)
    x = _rand(key, 2, 5, 5, 4)
    k = _rand(jax.random.fold_in(key, 1), 9, 9, 4)
    got = windowed_matmul(x, table_from_depthwise_kernel(k, window=window), window=window)
    np.testing.assert_allclose(got, _dw(x, k) + x, rtol=1e-5, atol=1e-5)


def test_excess_taps_are_inert(key):
    window = (3, 3)
    x = _rand(key, 1, 6, 6, 2)
    k5 = _rand(jax.random.fold_in(key, 1), 5, 5, 2)
    big = _rand(jax.random.fold_in(key, 2), 9, 9, 2).at[2:7, 2:7].set(k5)  # random outer taps
    a = windowed_matmul(x, table_from_depthwise_kernel(k5, window=window), window=window)
    b = windowed_matmul(x, table_from_depthwise_kernel(big, window=window), window=window)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(a, _per_window_dw(x, big, window), rtol=1e-5, atol=1e-5)


def test_relative_index_centre_and_range():
    idx = relative_position_index((7, 7))
    assert idx.shape == (49, 49) and idx.min() == 0 and idx.max() == 168
    assert np.all(np.diag(idx) == 6 * 13 + 6)  # offset 0 = centre
    assert len(np.unique(relative_position_index((2, 3)))) == 3 * 5


def test_padding_rule_pad_bottom_right_then_crop(key):
    window = (4, 4)
    x = _rand(key, 2, 6, 9, 3)
    t = _rand(jax.random.fold_in(key, 1), 3, 49)
    got = windowed_matmul(x, t, window=window)
    xp = jnp.pad(x, ((0, 0), (0, 2), (0, 3), (0, 0)))
    want = windowed_matmul(xp, t, window=window)[:, :6, :9]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match="pad_to_window"):
        windowed_matmul(x, t, window=window, pad_to_window=False)


def test_window_translation_equivariance(key):
    window = (3, 3)
    x = _rand(key, 1, 9, 9, 2)
    t = _rand(jax.random.fold_in(key, 1), 2, 25)
    y = windowed_matmul(x, t, window=window)
    y_shift = windowed_matmul(jnp.roll(x, 3, axis=2), t, window=window)
    np.testing.assert_allclose(y_shift, jnp.roll(y, 3, axis=2), rtol=1e-6, atol=1e-6)
    # a one-pixel shift is NOT equivariant (windows break translation equivariance)
    y1 = windowed_matmul(jnp.roll(x, 1, axis=2), t, window=window)
    assert np.max(np.abs(np.asarray(y1 - jnp.roll(y, 1, axis=2)))) > 1e-3


def test_cached_matches_table_and_bias_residual(key):
    window = (3, 3)
    x = _rand(key, 2, 6, 3, 4)
    t = _rand(jax.random.fold_in(key, 1), 4, 25)
    bias = _rand(jax.random.fold_in(key, 2), 4)
    m = window_matrix(t, window=window)
    a = windowed_matmul(x, t, window=window, bias=bias, residual=False)
    b = windowed_matmul_cached(x, m, window=window, bias=bias, residual=False)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    c = windowed_matmul(x, t, window=window)
    np.testing.assert_allclose(c - x + bias.reshape(1, 1, 1, 4), a, rtol=1e-5, atol=1e-5)


def test_check_grads_reference():
    with jax.enable_x64(True):
        key = jax.random.key(3)
        x = jax.random.normal(key, (1, 4, 6, 2), jnp.float64)
        t = jax.random.normal(jax.random.fold_in(key, 1), (2, 15), jnp.float64)
        check_grads(
            lambda a, b: windowed_matmul(a, b, window=(2, 3), implementation="xla"),
            (x, t),
            order=1,
            modes=("fwd", "rev"),
        )


# ----------------------------------------------------------------------------- kernel


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [jnp.float32, pytest.param(jnp.bfloat16, marks=pytest.mark.slow)])
def test_kernel_matches_reference_values_and_grads(impl, dtype, key):
    """Window 7, 3 x 2 windows of 2 images (N not a multiple of the block), padded H."""
    kx, kt, kg = jax.random.split(key, 3)
    x = _rand(kx, 2, 20, 14, 3, dtype=dtype)  # H=20 pads to 21
    t = _rand(kt, 3, 169) * 0.1
    g = _rand(kg, 2, 20, 14, 3)
    x32 = x.astype(jnp.float32)
    got = windowed_matmul(x, t, implementation=impl)
    want = windowed_matmul_reference(x32, t, window=(7, 7))
    assert got.dtype == jnp.dtype(dtype)
    tol = TOL[jnp.dtype(dtype)]
    np.testing.assert_allclose(got.astype(jnp.float32), want, rtol=tol, atol=8 * tol)

    def loss(impl_, a, b):
        return jnp.sum(windowed_matmul(a, b, implementation=impl_).astype(jnp.float32) * g)

    # jitted: one program per gradient instead of one eager compile per op
    gx, gt = jax.jit(jax.grad(lambda a, b: loss(impl, a, b), argnums=(0, 1)))(x, t)
    rx, rt = jax.jit(jax.grad(lambda a, b: loss("xla", a, b), argnums=(0, 1)))(x32, t)
    assert gx.dtype == jnp.dtype(dtype) and gt.dtype == t.dtype
    scale = float(jnp.max(jnp.abs(rt)))
    np.testing.assert_allclose(gx.astype(jnp.float32), rx, rtol=tol, atol=8 * tol)
    np.testing.assert_allclose(gt / scale, rt / scale, rtol=tol, atol=8 * tol)


@pytest.mark.parametrize("impl", IMPLS)
def test_kernel_residual_false_bias_cached(impl, key):
    window = (3, 3)
    x = _rand(key, 1, 6, 6, 2)
    m = _rand(jax.random.fold_in(key, 1), 2, 9, 9)
    bias = _rand(jax.random.fold_in(key, 2), 2)
    got = windowed_matmul_cached(
        x, m, window=window, residual=False, bias=bias, implementation=impl
    )
    want = windowed_matmul_cached(
        x, m, window=window, residual=False, bias=bias, implementation="xla"
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # the default run compares the kernel's gradients with the reference's
@pytest.mark.parametrize("impl", IMPLS)
def test_kernel_check_grads(impl):
    with jax.enable_x64(True):
        key = jax.random.key(5)
        x = jax.random.normal(key, (1, 4, 4, 2), jnp.float64)
        t = jax.random.normal(jax.random.fold_in(key, 1), (2, 9), jnp.float64)
        check_grads(
            lambda a, b: windowed_matmul(a, b, window=(2, 2), implementation=impl),
            (x, t),
            order=1,
            modes=("rev",),
        )


@pytest.mark.slow
def test_kernel_many_blocks_layout(key):
    """Many window blocks, split partial sums and tiled d: N = 150 windows, block 16 ->
    10 blocks = 5 splits x 2 steps (the dM kernel's inner loop runs twice); d_p = 16
    in 8-wide column blocks and contraction chunks."""
    from jaxkit.kernels.windowed_matmul import _api

    assert _api._layout(288, None) == (128, 1, 384)
    assert _api._layout(72, 16) == (16, 1, 80)
    assert _api._layout(150, 16) == (16, 2, 160)
    x = _rand(key, 2, 10, 30, 1)  # 2 * 5 * 15 = 150 windows of 2x2
    t = _rand(jax.random.fold_in(key, 1), 1, 9)
    m = window_matrix(t, window=(2, 2))

    def run(a, b):  # d = 4 pads to d_p = 16, tiled in 8 x 8 blocks
        return _api._kernel_path(
            a, b, window=(2, 2), residual=True, interpret=True, block_n=16, block_d=8
        )

    want = windowed_matmul_cached(x, m, window=(2, 2), implementation="xla")
    np.testing.assert_allclose(run(x, m), want, rtol=1e-5, atol=1e-5)
    g = _rand(jax.random.fold_in(key, 2), *x.shape)
    gk = jax.grad(lambda a, b: jnp.sum(run(a, b) * g), argnums=(0, 1))(x, m)
    gr = jax.grad(
        lambda a, b: jnp.sum(windowed_matmul_cached(a, b, window=(2, 2), implementation="xla") * g),
        argnums=(0, 1),
    )(x, m)
    for u, v in zip(gk, gr, strict=True):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- errors


def test_errors(key):
    x = _rand(key, 1, 7, 7, 2)
    t = _rand(key, 2, 169)
    with pytest.raises(TypeError):
        windowed_matmul(x[0], t)  # rank
    with pytest.raises(TypeError):
        windowed_matmul(x, t[:, :100])  # table columns
    with pytest.raises(TypeError):
        windowed_matmul(x, _rand(key, 3, 169))  # channels
    with pytest.raises(ValueError, match="window"):
        windowed_matmul(x, t, window=0)
    with pytest.raises(ValueError, match="implementation"):
        windowed_matmul(x, t, implementation="triton")
    with pytest.raises(TypeError):
        table_from_depthwise_kernel(_rand(key, 4, 4, 2), window=3)
    with pytest.raises(TypeError):
        windowed_matmul(x, t, bias=_rand(key, 3))


@pytest.mark.slow
def test_kernel_inside_shard_map(key):
    """The kernel is per-device: run it sharded over the batch with shard_map. (Interpret
    mode's grid loop trips shard_map's vma check, hence check_vma=False here; the table
    gradient is then summed over devices by hand.)"""
    mesh = jax.make_mesh((2,), ("data",), devices=jax.devices()[:2])
    x = _rand(key, 2, 4, 4, 2)
    t = _rand(jax.random.fold_in(key, 1), 2, 9)

    def local(a, b):
        y = windowed_matmul(a, b, window=2, implementation="pallas_interpret")
        gx, gt = jax.grad(
            lambda u, v: jnp.sum(
                windowed_matmul(u, v, window=2, implementation="pallas_interpret") ** 2
            ),
            argnums=(0, 1),
        )(a, b)
        return y, gx, jax.lax.psum(gt, "data")

    f = jax.jit(
        jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(jax.P("data"), jax.P()),
            out_specs=(jax.P("data"), jax.P("data"), jax.P()),
            check_vma=False,
        )
    )
    with jax.set_mesh(mesh):
        y, gx, gt = f(jax.device_put(x, jax.NamedSharding(mesh, jax.P("data"))), t)
    ry = windowed_matmul(x, t, window=2, implementation="xla")
    rx, rt = jax.grad(
        lambda u, v: jnp.sum(windowed_matmul(u, v, window=2, implementation="xla") ** 2),
        argnums=(0, 1),
    )(x, t)
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gx, rx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gt, rt, rtol=1e-5, atol=1e-4)


def test_auto_on_tpu_falls_back_to_reference(key, monkeypatch):
    """The WBMM kernel is Triton-only: "auto" on TPU runs the reference, without error."""
    from jaxkit.kernels import _dispatch

    assert _dispatch.resolve("auto", backend="tpu", platforms=_dispatch.GPU_PLATFORMS) == "xla"
    assert _dispatch.resolve("auto", backend="gpu", platforms=_dispatch.GPU_PLATFORMS) == "pallas"
    assert _dispatch.resolve("auto", backend="tpu") == "pallas"  # other kernels: unchanged
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    x = jax.random.normal(key, (1, 3, 5, 3))  # a shape no other test traces (fresh trace)
    t = 0.3 * jax.random.normal(jax.random.fold_in(key, 1), (3, 9))
    got = windowed_matmul(x, t, window=(2, 2), implementation="auto")
    want = windowed_matmul_reference(jnp.pad(x, ((0, 0), (0, 1), (0, 1), (0, 0))), t, window=(2, 2))
    np.testing.assert_allclose(got, want[:, :3, :5], rtol=1e-6, atol=1e-6)
