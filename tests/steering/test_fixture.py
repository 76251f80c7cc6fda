"""The shipped base of examples/svgt_toy_safety.py (jaxkit/_fixtures/svgt_toy_base)."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import io, nn
from tests._subprocess import ROOT, load_example


def _example():
    return load_example("svgt_toy_safety", "svgt_toy_safety_fx")


def test_svgt_fixture_loads_and_keeps_its_claimed_quality():
    ex = _example()
    fx = io.load_fixture("svgt_toy_base")
    assert fx.cfg == ex.CFG and fx.info["script"] == "scripts/train_svgt_fixture.py"
    folder = ROOT / "jaxkit" / "_fixtures" / "svgt_toy_base"
    assert sum(f.stat().st_size for f in folder.iterdir()) <= 1_000_000
    rng = np.random.default_rng(7)  # rows the fixture's own figures did not use
    w = ex.PW + 3 + ex.RW
    tok, plen, _, _ = ex.sample(rng, 128, harmful_frac=0.0, width=w)
    pred = np.asarray(jnp.argmax(nn.apply(fx.params, fx.cfg, jnp.asarray(tok)).logits, -1))
    j = np.arange(w - 1)[None]
    resp = (j >= plen[:, None] - 1) & (j < plen[:, None] - 1 + ex.RW)
    acc = np.mean((pred[:, :-1] == tok[:, 1:])[resp])  # benign responses: reversed prompts
    assert acc >= 0.99 and acc >= fx.info["benign_token_acc"] - 0.01
    # first response token of a harmful prompt: contents with the world's 0.7, and
    # REFUSE after the system prompt
    first = []
    for sys_frac in (0.0, 1.0):
        tok, plen, _, _ = ex.sample(rng, 256, harmful_frac=1.0, sys_frac=sys_frac, width=w)
        p = jax.nn.softmax(nn.apply(fx.params, fx.cfg, jnp.asarray(tok)).logits, -1)
        first.append(np.asarray(p)[np.arange(256), plen - 1])
    harm = first[0][:, ex.HARM0 : ex.HARM0 + 8].sum(-1).mean()
    assert abs(harm - 0.7) < 0.06 and abs(harm - fx.info["harm_mass"]) < 0.04
    assert first[1][:, ex.REFUSE].mean() > 0.97
