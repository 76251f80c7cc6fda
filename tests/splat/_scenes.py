"""Small scenes and an independent NumPy brute-force renderer (the tests' oracle)."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import splat

HW = (8, 8)


def scene(key, n=5, dtype=jnp.float32):
    """``n`` random anisotropic Gaussians in front of :func:`camera`, distinct depths."""
    ks = jax.random.split(key, 5)
    means = jax.random.uniform(ks[0], (n, 3), minval=-0.6, maxval=0.6)
    log_s = jax.random.uniform(ks[1], (n, 3), minval=-2.0, maxval=-1.0)
    quat = jax.random.normal(ks[2], (n, 4))
    g = splat.from_scale_rotation(
        means, log_s, quat, jax.random.normal(ks[3], (n,)), jax.random.uniform(ks[4], (n, 3))
    )
    return jax.tree.map(lambda a: a.astype(dtype), g)


def camera(dtype=jnp.float32, hw=HW, focal=10.0):
    cam = splat.look_at((0.3, -3.0, 0.4), (0.0, 0.0, 0.0), focal=focal, hw=hw)
    return jax.tree.map(lambda a: a.astype(dtype), cam)


def numpy_render(g, cam, hw, bg=0.0, near=0.2):
    """Per-pixel loop in float64, written from the formulas (no jaxkit code)."""
    means, covs = np.asarray(g.means, np.float64), np.asarray(g.covariances, np.float64)
    opac = 1.0 / (1.0 + np.exp(-np.asarray(g.opacity_logits, np.float64)))
    cols = np.asarray(g.colors, np.float64)
    rot, ctr = np.asarray(cam.rotation, np.float64), np.asarray(cam.center, np.float64)
    (fx, fy), (cx, cy) = np.asarray(cam.focal, np.float64), np.asarray(cam.principal, np.float64)
    bg = np.broadcast_to(np.asarray(bg, np.float64), (3,))
    items = []
    for mu, cov, o, c in zip(means, covs, opac, cols, strict=True):
        x, y, z = rot @ (mu - ctr)
        if z <= near:
            continue
        jac = np.array([[fx / z, 0, -fx * x / z**2], [0, fy / z, -fy * y / z**2]])
        s2 = jac @ rot @ cov @ rot.T @ jac.T + 0.3 * np.eye(2)
        items.append((z, np.array([fx * x / z + cx, fy * y / z + cy]), np.linalg.inv(s2), o, c))
    items.sort(key=lambda t: t[0])
    out = np.zeros((*hw, 3))
    for i in range(hw[0]):
        for j in range(hw[1]):
            p = np.array([j + 0.5, i + 0.5])
            t, acc = 1.0, np.zeros(3)
            for _, m, inv, o, c in items:
                d = p - m
                a = min(0.99, o * np.exp(-0.5 * d @ inv @ d))
                acc += t * a * c
                t *= 1 - a
            out[i, j] = acc + t * bg
    return out


def grey_loss(params, x, x_raw):
    """A toy differentiable 'editor' attack, features tanh(x W) toward those of grey, under
    the monotone map exp(c L) (``params = (W, c)``): c changes no gradient's sign."""
    del x_raw
    w, c = params
    feat = jnp.tanh(x @ w) - jnp.tanh(0.5 * jnp.sum(w, axis=0))[None, None, :]
    return jnp.exp(c * jnp.mean(feat**2))
