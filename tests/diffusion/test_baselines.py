"""Baselines (SIR, best-of-N, SMC), affinity-only objective, toy world, CSV loader."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import diffusion
from tests.diffusion import _toys

V = 3


def test_sir_resample_frequencies():
    tokens = jnp.array([[0, 0], [1, 1]], jnp.int32)
    alpha = 0.2
    reward = jnp.array([0.0, alpha * math.log(3.0)], jnp.float32)  # weights 1 : 3
    out = np.asarray(
        diffusion.sir_resample(tokens, reward, key=jax.random.key(0), alpha=alpha, num_out=4000)
    )
    frac = (out[:, 0] == 1).mean()
    assert abs(frac - 0.75) <= 4 * math.sqrt(0.75 * 0.25 / 4000)
    with pytest.raises(ValueError, match="reward"):
        diffusion.sir_resample(
            tokens, reward.at[0].set(jnp.nan), key=jax.random.key(0), alpha=alpha, num_out=2
        )


class _Counting:
    def __init__(self):
        self.calls = 0

    def __call__(self, tokens):
        t = np.asarray(tokens)
        self.calls += len(t)
        return {
            "affinity": (t == 2).mean(1).astype(np.float32),
            "p_agonist": np.where(t[:, 0] == 1, 0.9, 0.2).astype(np.float32),
        }


@pytest.mark.slow  # host loops over the oracle; the example runs them too
def test_inference_baselines_count_oracle_calls():
    f, params = _toys.exact_denoiser(V, 3, 0), None  # every sequence has mass
    oracle = _Counting()
    g = diffusion.best_of_n(
        f,
        params,
        oracle,
        key=jax.random.key(0),
        n=32,
        num_out=8,
        length=3,
        direction=1,
        mask_id=V,
        num_steps=4,
    )
    assert g.oracle_calls == oracle.calls == 32 and g.tokens.shape == (8, 3)

    # guidance raises the gated reward over unguided samples of the same model
    def gated(t):
        o = oracle(t)
        return np.asarray(
            diffusion.gated_reward(
                jnp.asarray(o["affinity"]), jnp.asarray(o["p_agonist"]), direction=1
            )
        )

    base = diffusion.sample(
        f, params, jnp.full((16, 3), V, jnp.int32), key=jax.random.key(2), mask_id=V, num_steps=4
    ).tokens
    oracle.calls = 0
    s2 = diffusion.smc_sample(
        f,
        params,
        oracle,
        key=jax.random.key(3),
        num_particles=16,
        length=3,
        direction=1,
        mask_id=V,
        num_steps=4,
        alpha=0.05,
    )
    assert s2.oracle_calls == oracle.calls == 64 and (s2.tokens < V).all()
    assert gated(s2.tokens).mean() > gated(base).mean() + 0.05
    assert gated(g.tokens).mean() > gated(base).mean() + 0.05


def test_affinity_only_objective_ignores_direction():
    oracle = _Counting()
    toks = np.array([[2, 2, 0], [1, 0, 0]], np.int32)
    b = diffusion.make_buffer(
        toks,
        np.zeros_like(toks),
        np.zeros(2),
        oracle,
        direction=-1,
        alpha=0.5,
        kappa_min=0.1,
        objective="affinity",
    )
    g = oracle(toks)["affinity"]
    np.testing.assert_allclose(b.reward, g)
    np.testing.assert_allclose(b.log_w, g / 0.5, rtol=1e-6)
    t = diffusion.make_buffer(
        toks, np.zeros_like(toks), np.zeros(2), oracle, direction=-1, alpha=0.5, kappa_min=0.1
    )
    assert not np.allclose(t.reward, g)


def test_toy_world():
    aa = {c: i for i, c in enumerate(diffusion.AMINO_ACIDS)}
    seq = [aa[c] for c in "KRDGAILMFGGG"]  # charge K,R,D,G -> +1; hydrophobic at 3..8: A I L M F
    o = diffusion.toy_oracle(np.array([seq]))
    np.testing.assert_allclose(o["affinity"], 1 / (1 + math.exp(-(5 - 3))), rtol=1e-6)
    np.testing.assert_allclose(o["p_agonist"], 1 / (1 + math.exp(-2.0)), rtol=1e-6)
    x = diffusion.toy_nature_sample(64, seed=0)
    assert x.shape == (64, 12) and x.min() >= 0 and x.max() < 20
    np.testing.assert_array_equal(x, diffusion.toy_nature_sample(64, seed=0))


def test_binder_csv_loader(tmp_path):
    with pytest.raises(FileNotFoundError, match="never downloads"):
        diffusion.load_binder_csv(tmp_path / "absent.csv")
    p = tmp_path / "b.csv"
    p.write_text("Target_Sequence,Ligand_Sequence,label\nMKT,CCO,1\nMKV,CCN,0\n")
    d = diffusion.load_binder_csv(p)
    assert d["label"] == [1, 0] and d["Ligand_Sequence"] == ["CCO", "CCN"]
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="Target_Sequence"):
        diffusion.load_binder_csv(tmp_path / "bad.csv")


def test_audit_reverse_step_outside_the_schedule_raises():
    # wave-24 audit: a step outside [0, num_steps) was a silent wrong unmasking (the check
    # is an error_if: concrete here, before anything compiles; traced under jit)
    from tests.diffusion.cases import _P32, APPLY, MASK

    z = jnp.full((2, 4), MASK, jnp.int32)
    for step in (3, -1):
        with pytest.raises(ValueError, match="step"):
            diffusion.reverse_step(
                APPLY, _P32, z, step, key=jax.random.key(0), mask_id=MASK, num_steps=3
            )


def test_reverse_step_token_outside_the_alphabet_raises():
    # a token id outside [0, V) was fed to the denoiser (its embedding gather clamps):
    # a concrete ValueError naming `z`; under jit the traced guard (a runtime error)
    from tests.diffusion.cases import _P32, APPLY, MASK

    z = jnp.full((2, 4), MASK, jnp.int32)
    for bad in (2**20, -1):
        with pytest.raises(ValueError, match="`z`"):
            diffusion.reverse_step(
                APPLY, _P32, z.at[0, 0].set(bad), 0, key=jax.random.key(0), mask_id=MASK,
                num_steps=3,
            )  # fmt: skip
    step = jax.jit(
        lambda z: diffusion.reverse_step(
            APPLY, _P32, z, 0, key=jax.random.key(0), mask_id=MASK, num_steps=3
        )
    )
    with pytest.raises(RuntimeError, match="`z`"):
        step(z.at[0, 0].set(2**20))
