"""Pod-scale training: data parallel on ``data``, weights on ``model``, orbax resume.

Trains a tiny ``jaxkit.nn`` transformer on a synthetic next-token task (a noisy
fixed permutation: token t+1 = perm[token t], replaced by a random token with
probability 0.1). The same script runs on one device, on a multi-device host and
on several processes (hosts):

* the global batch is split over mesh axis ``data`` and every process builds only
  its own shards (``jax.make_array_from_callback``) of a batch that depends only on
  ``(seed, step)``, so the result does not depend on the device or process count;
* transformer weights are sharded Megatron-style on mesh axis ``model``
  (q/k/v/gate/up column-sharded, o/down row-sharded, embedding and LM head on the
  vocabulary axis) by ``jaxkit.nn.param_specs``;
* an orbax ``CheckpointManager`` saves params and optimizer state every
  ``ckpt_every`` steps, and a restarted run resumes from the latest checkpoint
  (bit-identical to an uninterrupted run: the data are a function of the step).

Several processes: start one per host (or several on one machine for a test)::

    XLA_FLAGS=--xla_force_host_platform_device_count=4 \\
    python examples/train_pod.py --steps 20 --ckpt-dir /tmp/ck --model-parallel 2 \\
        --num-processes 2 --process-id 0 --coordinator 127.0.0.1:12345   # and id 1

On CPU the collectives go through gloo (``jax_cpu_collectives_implementation``);
``--auto-distributed`` calls ``jax.distributed.initialize()`` without arguments
for clusters that jax detects itself (Cloud TPU, SLURM, ...).
"""

import argparse
import functools
import json
import os
import shutil
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, ROOT)

from jaxkit import nn, sharding  # noqa: E402

# The default model: small enough for 2 CPU cores; sharded axes divide by 2 and 4.
CONFIG = nn.TransformerConfig(
    vocab_size=64,
    d_model=32,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    head_dim=8,
    mlp_dim=64,
)
BATCH = 16
SEQ = 16
NOISE = 0.1


def param_specs(cfg: nn.TransformerConfig, *, model_size: int):
    """PartitionSpec per transformer leaf: ``jaxkit.nn.param_specs`` (Megatron-style:
    q/k/v/gate/up split on their output axis, o/down on their input axis, embedding
    and LM head on the vocabulary axis), with any split axis that ``model_size``
    does not divide left replicated, so every config runs on every mesh."""
    abstract = jax.eval_shape(lambda k: nn.init_params(cfg, key=k), jax.random.key(0))

    def fit(spec, leaf):
        parts = list(spec) + [None] * (len(leaf.shape) - len(spec))
        return jax.P(
            *(
                None if ax is not None and (model_size == 1 or n % model_size) else ax
                for ax, n in zip(parts, leaf.shape, strict=True)
            )
        )

    return jax.tree.map(fit, nn.param_specs(cfg), abstract, is_leaf=lambda x: isinstance(x, jax.P))


def synthetic_tokens(
    step: int,
    *,
    seed: int,
    batch: int = BATCH,
    seq: int = SEQ,
    vocab: int = CONFIG.vocab_size,
) -> np.ndarray:
    """The global batch of step ``step``: ``int32[batch, seq + 1]``, a function of
    ``(seed, step)`` only (so any process can build any shard of it)."""
    perm = np.random.default_rng([seed, 2**31 - 1]).permutation(vocab)
    rng = np.random.default_rng([seed, step])
    x = np.empty((batch, seq + 1), np.int64)
    x[:, 0] = rng.integers(vocab, size=batch)
    noise = rng.random((batch, seq)) < NOISE
    rand = rng.integers(vocab, size=(batch, seq))
    for t in range(seq):
        x[:, t + 1] = np.where(noise[:, t], rand[:, t], perm[x[:, t]])
    return x.astype(np.int32)


def next_token_loss(params, cfg, tokens):
    """Mean cross-entropy of predicting ``tokens[:, 1:]`` from ``tokens[:, :-1]``."""
    logits = nn.apply(params, cfg, tokens[:, :-1]).logits.astype(jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    return jnp.mean(nll)


def _global_batch(step, *, seed, batch, seq, vocab, sharding_):
    shape = (batch, seq + 1)
    host = synthetic_tokens(step, seed=seed, batch=batch, seq=seq, vocab=vocab)
    return jax.make_array_from_callback(shape, sharding_, lambda idx: host[idx])


def _constrain(params, opt_state, cfg, mesh, opt):
    """Pin params to :func:`param_specs`, optimizer moments alike, scalars replicated.

    Fixing every output sharding makes the compiled step the same whether its
    inputs come from the previous step or from a restored checkpoint, which is
    what makes a resumed run bit-identical to an uninterrupted one.
    """
    specs = param_specs(cfg, model_size=mesh.shape["model"])
    p_sh = jax.tree.map(
        lambda s: jax.NamedSharding(mesh, s),
        specs,
        is_leaf=lambda x: isinstance(x, jax.P),
    )
    repl = jax.NamedSharding(mesh, jax.P())
    params = jax.lax.with_sharding_constraint(params, p_sh)
    if opt_state is not None:
        o_sh = optax.tree_utils.tree_map_params(
            opt, lambda _, sh: sh, opt_state, p_sh, transform_non_params=lambda _: repl
        )
        opt_state = jax.lax.with_sharding_constraint(opt_state, o_sh)
    return params, opt_state


# Module-level jits with hashable static arguments (the frozen config, the learning
# rate, the mesh): a second `train` on the same mesh (a resume) reuses the compiled
# programs instead of compiling again.
@functools.partial(jax.jit, static_argnames=("cfg", "lr", "mesh"))
def _init_state(key, *, cfg, lr, mesh):
    opt = optax.adam(lr)
    params, _ = _constrain(nn.init_params(cfg, key=key), None, cfg, mesh, opt)
    return _constrain(params, opt.init(params), cfg, mesh, opt)


@functools.partial(jax.jit, static_argnames=("cfg", "lr", "mesh"), donate_argnums=(0, 1))
def _train_step(params, opt_state, tokens, *, cfg, lr, mesh):
    opt = optax.adam(lr)
    loss, grads = jax.value_and_grad(next_token_loss)(params, cfg, tokens)
    updates, opt_state = opt.update(grads, opt_state, params)
    params, opt_state = _constrain(optax.apply_updates(params, updates), opt_state, cfg, mesh, opt)
    return (
        params,
        opt_state,
        jax.lax.with_sharding_constraint(loss, jax.NamedSharding(mesh, jax.P())),
    )


def train(
    *,
    steps: int,
    seed: int = 0,
    cfg: nn.TransformerConfig = CONFIG,
    batch: int = BATCH,
    seq: int = SEQ,
    lr: float = 3e-3,
    model_parallel: int = 1,
    devices=None,
    ckpt_dir: str | None = None,
    ckpt_every: int = 0,
    hang_after: int | None = None,
    log=None,
) -> dict:
    """Train ``steps`` steps (resuming from ``ckpt_dir``'s latest checkpoint).

    Args:
      steps: total number of optimizer steps (a resumed run continues up to it).
      seed: seeds the parameters and the synthetic data.
      cfg, batch, seq, lr: model, global batch size, sequence length, Adam rate.
      model_parallel: size of the ``model`` mesh axis; ``data`` gets the rest.
      devices: devices of the mesh (default: all devices of all processes).
      ckpt_dir: orbax checkpoint directory (``None``: no checkpoints).
      ckpt_every: save every this many steps (and the final step).
      hang_after: for the crash test: after saving the checkpoint of this step,
        print ``hang`` and sleep until killed.
      log: ``print``-like callable for progress lines.

    Returns:
      ``{"start_step", "losses" (one per step run here), "params" (numpy copy of
      the final parameters, on every process), "mesh"}``.
    """
    import orbax.checkpoint as ocp

    log = log or (lambda *a: None)
    mesh = sharding.make_mesh(model=model_parallel, devices=devices, explicit=False)
    data_sh = jax.NamedSharding(mesh, jax.P("data", None))
    # Threefry is partitionable (jax's default), so the values do not depend on
    # the mesh: every device count starts from the same parameters.
    params, opt_state = _init_state(jax.random.key(seed), cfg=cfg, lr=lr, mesh=mesh)

    start = 0
    mngr = None
    if ckpt_dir is not None:
        mngr = ocp.CheckpointManager(
            os.path.abspath(ckpt_dir),
            options=ocp.CheckpointManagerOptions(
                max_to_keep=2, create=True, enable_async_checkpointing=False
            ),
        )
        latest = mngr.latest_step()
        if latest is not None:
            target = jax.tree.map(
                lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                {"params": params, "opt_state": opt_state},
            )
            state = mngr.restore(latest, args=ocp.args.StandardRestore(target))
            params, opt_state = state["params"], state["opt_state"]
            start = int(latest)
            log(f"resumed from step {start}")

    losses = []
    for step in range(start, steps):
        tokens = _global_batch(
            step,
            seed=seed,
            batch=batch,
            seq=seq,
            vocab=cfg.vocab_size,
            sharding_=data_sh,
        )
        params, opt_state, loss = _train_step(params, opt_state, tokens, cfg=cfg, lr=lr, mesh=mesh)
        losses.append(float(loss))
        done = step + 1
        if mngr is not None and ckpt_every and (done % ckpt_every == 0 or done == steps):
            mngr.save(
                done,
                args=ocp.args.StandardSave({"params": params, "opt_state": opt_state}),
            )
            mngr.wait_until_finished()
            log(f"ckpt {done} loss {losses[-1]:.6f}")
        if hang_after is not None and done == hang_after:
            log("hang")
            while True:  # the crash test SIGKILLs us here
                time.sleep(1)
    if mngr is not None:
        mngr.close()
    if jax.process_count() > 1:  # shards live on several hosts: gather a full copy
        from jax.experimental import multihost_utils

        params = multihost_utils.process_allgather(params, tiled=True)
    host = jax.tree.map(np.asarray, params)
    return {
        "start_step": start,
        "losses": losses,
        "params": host,
        "mesh": dict(mesh.shape),
    }


def main(
    *,
    quick: bool = False,
    seed: int = 0,
    out_dir: str = "out",
    data_dir: str | None = None,
) -> dict:
    del data_dir  # synthetic data
    n_dev = jax.device_count()
    model_parallel = 2 if n_dev % 2 == 0 and n_dev >= 2 else 1
    steps = 60 if quick else 300
    ckpt_dir = os.path.join(out_dir, "train_pod_ckpt")
    shutil.rmtree(ckpt_dir, ignore_errors=True)  # a fresh run (the CLI resumes instead)
    half = train(
        steps=steps // 2,
        seed=seed,
        model_parallel=model_parallel,
        ckpt_dir=ckpt_dir,
        ckpt_every=10,
    )
    rest = train(
        steps=steps,
        seed=seed,
        model_parallel=model_parallel,
        ckpt_dir=ckpt_dir,
        ckpt_every=10,
    )  # a new run resumes at steps // 2
    losses = half["losses"] + rest["losses"]
    first, last = float(np.mean(losses[:5])), float(np.mean(losses[-5:]))
    floor = _noise_floor(CONFIG.vocab_size)
    log_v = float(np.log(CONFIG.vocab_size))

    os.makedirs(out_dir, exist_ok=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot(np.arange(1, len(losses) + 1), losses, label="train loss")
    ax.axvline(rest["start_step"], color="gray", ls="--", label="resumed from ckpt")
    ax.axhline(floor, color="k", ls=":", label="noise floor")
    ax.set_xlabel("step")
    ax.set_ylabel("next-token cross-entropy")
    ax.set_title(f"mesh data={half['mesh']['data']} x model={half['mesh']['model']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "train_pod.png"), dpi=100)
    plt.close(fig)
    return {
        "method": "pod training (dp x tp, orbax resume)",
        "metric": "final / initial loss",
        "value": last / first,
        "baseline": f"initial loss {first:.3f} (ln V = {log_v:.3f})",
        "ok": bool(rest["start_step"] == steps // 2 and last < 0.6 * first),
        "initial_loss": first,
        "final_loss": last,
        "noise_floor": floor,
        "devices": n_dev,
        "mesh": half["mesh"],
    }


def _noise_floor(vocab: int) -> float:
    """Entropy of the next token given the current one (the best possible loss)."""
    p_hit = 1 - NOISE + NOISE / vocab
    p_miss = NOISE / vocab
    return float(-(p_hit * np.log(p_hit) + (vocab - 1) * p_miss * np.log(p_miss)))


def _cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="out")
    p.add_argument("--data-dir", default=os.environ.get("JAXKIT_DATA_DIR"))
    g = p.add_argument_group("pod run (without --steps the script runs the tour's main)")
    g.add_argument("--steps", type=int, default=None, help="total optimizer steps")
    g.add_argument("--ckpt-dir", default=None, help="orbax directory; resumes from it")
    g.add_argument("--ckpt-every", type=int, default=10)
    g.add_argument("--model-parallel", type=int, default=1, help="size of mesh axis model")
    g.add_argument("--batch", type=int, default=BATCH, help="global batch size")
    g.add_argument("--num-processes", type=int, default=1)
    g.add_argument("--process-id", type=int, default=0)
    g.add_argument("--coordinator", default=None, help="host:port of process 0")
    g.add_argument(
        "--auto-distributed",
        action="store_true",
        help="jax.distributed.initialize() with cluster auto-detection",
    )
    g.add_argument("--params-out", default=None, help="write final params (.npz)")
    g.add_argument("--hang-after", type=int, default=None, help=argparse.SUPPRESS)
    a = p.parse_args()

    if a.num_processes > 1 or a.auto_distributed:
        # CPU collectives across processes need gloo; must precede initialize.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if a.auto_distributed:
            jax.distributed.initialize()
        else:
            if a.coordinator is None:
                p.error("--coordinator is required with --num-processes > 1")
            jax.distributed.initialize(
                coordinator_address=a.coordinator,
                num_processes=a.num_processes,
                process_id=a.process_id,
            )
    if a.steps is None:
        res = main(quick=a.quick, seed=a.seed, out_dir=a.out_dir, data_dir=a.data_dir)
        print(json.dumps(res, default=str))
        return

    pid = jax.process_index()

    def log(msg):
        print(f"[process {pid}] {msg}", flush=True)

    log(json.dumps(sharding.process_info()))
    res = train(
        steps=a.steps,
        seed=a.seed,
        batch=a.batch,
        model_parallel=a.model_parallel,
        ckpt_dir=a.ckpt_dir,
        ckpt_every=a.ckpt_every,
        hang_after=a.hang_after,
        log=log,
    )
    flat = {
        jax.tree_util.keystr(k): v
        for k, v in jax.tree_util.tree_flatten_with_path(res["params"])[0]
    }
    if a.params_out and pid == 0:
        np.savez(a.params_out, **flat)
    checksum = float(sum(np.abs(v).astype(np.float64).sum() for v in flat.values()))
    print(
        json.dumps(
            {
                "process_id": pid,
                "start_step": res["start_step"],
                "losses": res["losses"],
                "param_abs_sum": checksum,
                "mesh": res["mesh"],
                **sharding.process_info(),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    _cli()
