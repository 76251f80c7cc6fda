"""An optimizer state that does not fit the step's optimizer and parameters is a TypeError
naming `opt_state`, in every public training step that takes one (before: optax failed deep
inside its update with an error naming nothing, or a same-shaped state of another optimizer
ran)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxkit import data, memory
from jaxkit import timeseries as ts
from jaxkit._optim import check_opt_state
from tests.data import cases as DC
from tests.memory import keywords as MK
from tests.timeseries import keywords as TK

PARAMS = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}


def test_check_opt_state_accepts_its_own_state_and_names_a_foreign_one():
    adam = optax.adam(1e-2)
    check_opt_state(adam, adam.init(PARAMS), PARAMS)
    # a NumPy copy (a restored checkpoint) fits: shapes and tree, not array types
    check_opt_state(adam, jax.tree.map(np.asarray, adam.init(PARAMS)), PARAMS)
    with pytest.raises(TypeError, match="`opt_state` is not a state of this optimizer"):
        check_opt_state(adam, optax.sgd(1e-2, momentum=0.9).init(PARAMS), PARAMS)
    with pytest.raises(TypeError, match="`opt_state` is not a state of this optimizer"):
        check_opt_state(adam, adam.init({"w": PARAMS["w"]}), PARAMS)
    other = {"w": jnp.ones((4, 2)), "b": jnp.zeros(2)}
    with pytest.raises(TypeError, match=r"`opt_state\[0\]\.mu\['w'\]` has shape \(4, 2\)"):
        check_opt_state(adam, adam.init(other), PARAMS)
    # under jit too (a trace-time check: no run-time cost)
    with pytest.raises(TypeError, match=r"`opt_state\[0\]\.mu\['w'\]`"):
        jax.jit(lambda s: check_opt_state(adam, s, PARAMS))(adam.init(other))


def test_public_steps_name_a_foreign_opt_state():
    S = MK._setup()
    tx = memory.dlmr_optimizer(1, lr=1e-2)
    with pytest.raises(TypeError, match="`opt_state`"):
        memory.dlmr_step(1, S.AP, optax.sgd(0.1).init(S.AP), MK.BATCH1, tx=tx, cfg=S.MC)

    params, net, _, feats, batch, meta = DC._meta_args(jax.random.key(0), np.float32)
    foreign = DC._MTS_OPT.init(params)  # the model's optimizer state, not the meta-net's
    with pytest.raises(TypeError, match="`opt_state`"):
        data.mts_meta_step(
            DC._mts_loss, DC._MTS_OPT, params, net, foreign, feats, batch, meta, lr=0.1
        )
    with pytest.raises(TypeError, match="`opt_state`"):
        data.l2rw_step(DC._mts_loss, DC._MTS_OPT, params, DC._MTS_OPT.init(net), batch, meta)

    tess = TK._tess()
    with pytest.raises(TypeError, match="`opt_state`"):
        ts.tess_train_step(tess, optax.adam(1e-2).init(tess), TK._batch(), optimizer=TK.OPT)
