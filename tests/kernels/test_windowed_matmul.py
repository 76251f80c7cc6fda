"""WBMM operator: oracles (per-window depthwise conv), padding rule, kernel vs reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
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
    """Zero-padded SAME depthwise cross-correlation, NHWC / (K, L, C), odd K and L.

    In NumPy (float64): a closed-form reference, no eager jax op compiles for it.
    """
    x, k = np.asarray(x, np.float64), np.asarray(k, np.float64)
    kh, kw, _ = k.shape
    ph, pw = (kh - 1) // 2, (kw - 1) // 2
    xp = np.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    h, w = xp.shape[1] - kh + 1, xp.shape[2] - kw + 1
    out = np.zeros((x.shape[0], h, w, x.shape[3]), np.float64)
    for i in range(kh):
        for j in range(kw):
            out += xp[:, i : i + h, j : j + w, :] * k[i, j]
    return out


def _per_window_dw(x, k, window):
    """The oracle: an independent zero-padded depthwise conv inside every window, + x."""
    wh, ww = window
    out = np.zeros(x.shape, np.float64)
    for i in range(0, x.shape[1], wh):
        for j in range(0, x.shape[2], ww):
            xw = x[:, i : i + wh, j : j + ww, :]
            out[:, i : i + wh, j : j + ww, :] = np.asarray(_dw(xw, k)) + np.asarray(xw)
    return out


def _np_rand(seed, *shape, scale=1.0, dtype=np.float32):
    """Standard normal draws in NumPy (eager ``jax.random`` compiles once per shape)."""
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(dtype)


def _rand(seed, *shape, scale=1.0, dtype=jnp.float32):
    return jnp.asarray(_np_rand(seed, *shape, scale=scale, dtype=dtype))


@pytest.mark.parametrize("window", [(3, 3), (7, 7), (2, 4)])
def test_equals_per_window_depthwise_conv_f32(window):
    wh, ww = window
    x = _rand(0, 2, 2 * wh, 3 * ww, 3)
    k = _rand(1, 2 * wh - 1, 2 * ww - 1, 3)  # asymmetric kernel (catches a flip)
    got = windowed_matmul(x, table_from_depthwise_kernel(k, window=window), window=window)
    want = _per_window_dw(x, k, window)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    # ... and it is NOT the global sliding conv
    glob = np.asarray(_dw(x, k)) + np.asarray(x)
    assert np.max(np.abs(np.asarray(got) - glob)) > 1e-3


def test_equals_per_window_depthwise_conv_f64():
    with jax.enable_x64(True):
        window = (7, 7)
        x = _rand(0, 1, 14, 7, 2, dtype=np.float64)
        k = _rand(1, 13, 13, 2, dtype=np.float64)
        got = windowed_matmul(x, table_from_depthwise_kernel(k, window=window), window=window)
        np.testing.assert_allclose(
            np.asarray(got), _per_window_dw(x, k, window), rtol=1e-12, atol=1e-12
        )


def test_single_window_equals_global_conv():
    """One window covering the map: WBMM == SAME depthwise conv + identity."""
    window = (5, 5)
    x = _rand(0, 2, 5, 5, 4)
    k = _rand(1, 9, 9, 4)
    got = windowed_matmul(x, table_from_depthwise_kernel(k, window=window), window=window)
    np.testing.assert_allclose(got, _dw(x, k) + np.asarray(x), rtol=1e-5, atol=1e-5)


def test_excess_taps_are_inert():
    window = (3, 3)
    x = _rand(0, 1, 6, 6, 2)
    k5 = _np_rand(1, 5, 5, 2)
    big = _np_rand(2, 9, 9, 2)
    big[2:7, 2:7] = k5  # random outer taps
    k5, big = jnp.asarray(k5), jnp.asarray(big)
    a = windowed_matmul(x, table_from_depthwise_kernel(k5, window=window), window=window)
    b = windowed_matmul(x, table_from_depthwise_kernel(big, window=window), window=window)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(a, _per_window_dw(x, big, window), rtol=1e-5, atol=1e-5)


def test_relative_index_centre_and_range():
    idx = relative_position_index((7, 7))
    assert idx.shape == (49, 49) and idx.min() == 0 and idx.max() == 168
    assert np.all(np.diag(idx) == 6 * 13 + 6)  # offset 0 = centre
    assert len(np.unique(relative_position_index((2, 3)))) == 3 * 5


def test_padding_rule_pad_bottom_right_then_crop():
    window = (4, 4)
    x = _rand(0, 2, 6, 9, 3)
    t = _rand(1, 3, 49)
    got = windowed_matmul(x, t, window=window)
    xp = jnp.asarray(np.pad(np.asarray(x), ((0, 0), (0, 2), (0, 3), (0, 0))))
    want = np.asarray(windowed_matmul(xp, t, window=window))[:, :6, :9]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match="pad_to_window"):
        windowed_matmul(x, t, window=window, pad_to_window=False)


def test_window_translation_equivariance():
    window = (3, 3)
    x = _np_rand(0, 1, 9, 9, 2)  # shifts and differences in NumPy: no eager op compiles
    t = _rand(1, 2, 25)
    y = np.asarray(windowed_matmul(jnp.asarray(x), t, window=window))
    y_shift = windowed_matmul(jnp.asarray(np.roll(x, 3, axis=2)), t, window=window)
    np.testing.assert_allclose(y_shift, np.roll(y, 3, axis=2), rtol=1e-6, atol=1e-6)
    # a one-pixel shift is NOT equivariant (windows break translation equivariance)
    y1 = np.asarray(windowed_matmul(jnp.asarray(np.roll(x, 1, axis=2)), t, window=window))
    assert np.max(np.abs(y1 - np.roll(y, 1, axis=2))) > 1e-3


def test_cached_matches_table_and_bias_residual():
    window = (3, 3)
    x = _rand(0, 2, 6, 3, 4)
    t = _rand(1, 4, 25)
    bias = _rand(2, 4)
    m = window_matrix(t, window=window)
    a = windowed_matmul(x, t, window=window, bias=bias, residual=False)
    b = windowed_matmul_cached(x, m, window=window, bias=bias, residual=False)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    c = windowed_matmul(x, t, window=window)
    x, bias, c = np.asarray(x), np.asarray(bias), np.asarray(c)
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
def test_kernel_matches_reference_values_and_grads(impl, dtype):
    """Window 7, 3 x 2 windows of 2 images (N not a multiple of the block), padded H."""
    x = _rand(0, 2, 20, 14, 3, dtype=dtype)  # H=20 pads to 21
    t = _rand(1, 3, 169, scale=0.1)
    g = _rand(2, 2, 20, 14, 3)
    x32 = jnp.asarray(np.asarray(x).astype(np.float32))
    got = windowed_matmul(x, t, implementation=impl)
    # the reference as one program (eager, each of its ops would compile alone)
    want = jax.jit(windowed_matmul_reference, static_argnames="window")(x32, t, window=(7, 7))
    assert got.dtype == jnp.dtype(dtype)
    tol = TOL[jnp.dtype(dtype)]
    f32 = lambda a: np.asarray(a).astype(np.float32)  # noqa: E731  (checks in NumPy)
    np.testing.assert_allclose(f32(got), want, rtol=tol, atol=8 * tol)

    def loss(impl_, a, b):
        return jnp.sum(windowed_matmul(a, b, implementation=impl_).astype(jnp.float32) * g)

    # jitted: one program per gradient instead of one eager compile per op
    gx, gt = jax.jit(jax.grad(lambda a, b: loss(impl, a, b), argnums=(0, 1)))(x, t)
    rx, rt = jax.jit(jax.grad(lambda a, b: loss("xla", a, b), argnums=(0, 1)))(x32, t)
    assert gx.dtype == jnp.dtype(dtype) and gt.dtype == t.dtype
    gt, rt = np.asarray(gt), np.asarray(rt)
    scale = np.max(np.abs(rt))
    np.testing.assert_allclose(f32(gx), rx, rtol=tol, atol=8 * tol)
    np.testing.assert_allclose(gt / scale, rt / scale, rtol=tol, atol=8 * tol)


@pytest.mark.parametrize("impl", IMPLS)
def test_kernel_residual_false_bias_cached(impl):
    window = (3, 3)
    x = _rand(0, 1, 6, 6, 2)
    m = _rand(1, 2, 9, 9)
    bias = _rand(2, 2)
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
    x = _rand(0, 2, 10, 30, 1)  # 2 * 5 * 15 = 150 windows of 2x2
    t = _rand(1, 1, 9)
    m = window_matrix(t, window=(2, 2))

    def run(a, b):  # d = 4 pads to d_p = 16, tiled in 8 x 8 blocks
        return _api._kernel_path(
            a, b, window=(2, 2), residual=True, interpret=True, block_n=16, block_d=8
        )

    want = windowed_matmul_cached(x, m, window=(2, 2), implementation="xla")
    np.testing.assert_allclose(run(x, m), want, rtol=1e-5, atol=1e-5)
    g = _rand(2, *x.shape)
    gk = jax.grad(lambda a, b: jnp.sum(run(a, b) * g), argnums=(0, 1))(x, m)
    gr = jax.grad(
        lambda a, b: jnp.sum(windowed_matmul_cached(a, b, window=(2, 2), implementation="xla") * g),
        argnums=(0, 1),
    )(x, m)
    for u, v in zip(gk, gr, strict=True):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- errors


def test_errors():
    x = _rand(0, 1, 7, 7, 2)
    t = _rand(0, 2, 169)
    with pytest.raises(TypeError):
        windowed_matmul(x[0], t)  # rank
    with pytest.raises(TypeError):
        windowed_matmul(x, t[:, :100])  # table columns
    with pytest.raises(TypeError):
        windowed_matmul(x, _rand(0, 3, 169))  # channels
    with pytest.raises(ValueError, match="window"):
        windowed_matmul(x, t, window=0)
    with pytest.raises(ValueError, match="implementation"):
        windowed_matmul(x, t, implementation="triton")
    with pytest.raises(TypeError):
        table_from_depthwise_kernel(_rand(0, 4, 4, 2), window=3)
    with pytest.raises(TypeError):
        windowed_matmul(x, t, bias=_rand(0, 3))


@pytest.mark.slow
def test_kernel_inside_shard_map(key):
    """The kernel is per-device: run it sharded over the batch with shard_map. (Interpret
    mode's grid loop trips shard_map's vma check, hence check_vma=False here; the table
    gradient is then summed over devices by hand.)"""
    mesh = jax.make_mesh((2,), ("data",), devices=jax.devices()[:2])
    x = _rand(0, 2, 4, 4, 2)
    t = _rand(1, 2, 9)

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


def test_auto_on_tpu_falls_back_to_reference(monkeypatch):
    """The WBMM kernel is Triton-only: "auto" on TPU runs the reference, without error."""
    from jaxkit.kernels import _dispatch

    assert _dispatch.resolve("auto", backend="tpu", platforms=_dispatch.GPU_PLATFORMS) == "xla"
    assert _dispatch.resolve("auto", backend="gpu", platforms=_dispatch.GPU_PLATFORMS) == "pallas"
    assert _dispatch.resolve("auto", backend="tpu") == "pallas"  # other kernels: unchanged
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    x = _np_rand(0, 1, 3, 5, 3)  # a shape no other test traces (fresh trace)
    t = _rand(1, 3, 9, scale=0.3)
    got = windowed_matmul(jnp.asarray(x), t, window=(2, 2), implementation="auto")
    xp = jnp.asarray(np.pad(x, ((0, 0), (0, 1), (0, 1), (0, 0))))
    # the reference as one program (eager, each of its ops would compile alone)
    want = jax.jit(windowed_matmul_reference, static_argnames="window")(xp, t, window=(2, 2))
    np.testing.assert_allclose(got, np.asarray(want)[:, :3, :5], rtol=1e-6, atol=1e-6)
