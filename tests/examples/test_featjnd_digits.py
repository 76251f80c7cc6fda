"""Tests of examples/featjnd_digits.py beyond the quick-mode run of test_examples.py."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxkit.nn import SmallCNN
from jaxkit.vision import featjnd as J
from tests._subprocess import load_example


def test_matched_mse_finds_the_uniform_steps_true_mse():
    # the equal-true-MSE table: each variant's nominal budget is bisected until its true
    # MSE equals the uniform steps' one; recomputed here from the returned budget
    ex = load_example("featjnd_digits", "featjnd_digits")
    k = jax.random.split(jax.random.key(0), 4)
    c = 4
    f = jax.nn.relu(jax.random.normal(k[0], (24, c, 8, 8)) - 0.3)  # ReLU zeros, as a backbone's
    y = jax.random.randint(k[1], (24,), 0, 10)
    head = SmallCNN(c, 10, channels=(c,), key=k[2])
    est = J.FeatJNDEstimator(c, hidden=4, key=k[3])  # its last layer starts at zero:
    est = eqx.tree_at(lambda e: e.w3, est, jax.random.normal(k[1], est.w3.shape))  # a varied map
    budgets = (1.0, 3.0)
    out = jax.tree.map(np.asarray, ex._matched_mse(head, est, f, y, jnp.asarray(budgets), k[0]))
    s = J.tolerance_map(est, f)
    rms = jnp.sqrt(jnp.mean(f**2))
    kp = jax.random.fold_in(k[0], 30)
    for i, b in enumerate(budgets):
        uni = J.quantize(f, J.token_steps(s, budget_rms=b * rms, mode="uniform"))
        mse_u = float(jnp.mean((uni - f) ** 2))
        assert abs(float(out["mse"][i]) - mse_u) <= 1e-6 * mse_u
        for name, (mode, axes) in ex._MATCHED.items():
            nominal = float(out[f"nominal_{name}"][i])
            st = J.token_steps(s, budget_rms=nominal * rms, mode=mode, key=kp, token_axes=axes)
            q = J.quantize(f, st)
            mse = float(jnp.mean((q - f) ** 2))
            assert abs(mse - mse_u) <= 0.02 * mse_u, (name, b, mse, mse_u)
            acc = float(jnp.mean(jnp.argmax(jax.vmap(head)(q), -1) == y))
            assert acc == float(out[f"acc_{name}"][i])
        # the per-feature steps' MSE profile differs from uniform's: the bisection moved
        assert abs(float(out["nominal_featjnd_feature"][i]) - b) > 0.05 * b
