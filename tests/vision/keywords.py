"""Keyword-sweep recipes for vision (see tests/keywords.py)."""

import functools
import os
import tempfile

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxkit import vision
from jaxkit.vision import featjnd as J
from jaxkit.vision import irdet
from tests.conformance import built_once
from tests.vision.cases_featjnd import _modules

_rng = np.random.default_rng(0)
F = _rng.normal(size=(2, 2, 4, 4)).astype(np.float32)  # two [C, H, W] feature maps
S = (np.abs(F) + 0.1).astype(np.float32)  # a tolerance map
OPT = optax.adam(1e-2)

HW = (10, 10)
IMG = (0.4 + 0.2 * _rng.uniform(size=(2, *HW))).astype(np.float32)
PROB = _rng.uniform(size=(2, *HW)).astype(np.float32)
LOGITS = _rng.normal(size=(2, *HW)).astype(np.float32)
PSEUDO = (_rng.uniform(size=(2, *HW)) > 0.7).astype(np.float32)
U0 = np.full((2, *HW), 1.0 / 100, np.float32)
D = (0.2 + 0.5 * _rng.uniform(size=(2, *HW))).astype(np.float32)
PTS = np.array([[[4.0, 4.0], [6.0, 7.0]], [[3.0, 5.0], [8.0, 2.0]]], np.float32)
VALID = np.ones((2, 2), bool)
BIG = (0.4 + 0.1 * _rng.uniform(size=(1, 32, 32))).astype(np.float32)
BIG[0, 15:18, 15:18] = 0.9  # one bright target at the point
BIG_PTS = np.array([[[16.0, 16.0]]], np.float32)
GT = np.zeros((20, 20), bool)
GT[10, 10] = True
PRED = np.zeros((20, 20), bool)
PRED[9:12, 9:12] = True
MASKS = np.zeros((2, 20, 20), bool)
MASKS[:, 4:6, 4:6] = True
VALUES = _rng.uniform(size=(50,)).astype(np.float32)
WEIGHTS = np.ones((50,), np.float32)
X = _rng.normal(size=(4, 3)).astype(np.float32)
W = _rng.normal(size=(3,)).astype(np.float32)


def _logits3(x):
    """A frozen "head" for the strength curve: three logits per sample."""
    return x.reshape(-1)[:3]


def _per_sample_loss(w, x):
    return (x @ w) ** 2


def _features():
    return irdet.weight_features(LOGITS, PSEUDO, jax.nn.sigmoid(LOGITS), PSEUDO.mean(axis=(1, 2)))


def _featjnd_loss(**kw):
    est, head = _modules()
    return J.featjnd_loss(est, head, F, **{"key": jax.random.key(0), **kw})[0]


def _featjnd_step(**kw):
    est, head = _modules()
    return J.featjnd_step(
        est, head, OPT.init(est), F, optimizer=OPT, **{"key": jax.random.key(0), **kw}
    )


def _fit_featjnd(**kw):
    est, head = _modules()
    kw = {"steps": 2, "batch_size": 2, **kw}
    return J.fit_featjnd(est, head, F, optimizer=OPT, **{"key": jax.random.key(0), **kw})


def _weights(**kw):
    return irdet.sample_weights(irdet.make_weighter(key=jax.random.key(7)), _features(), **kw)


def _weighter_loss(**kw):
    w = irdet.make_weighter(key=jax.random.key(7))
    return irdet.weighter_loss(w, _features(), jnp.asarray([0.5, -0.5]), **kw)


def _load(**kw):
    from PIL import Image

    with tempfile.TemporaryDirectory() as root:
        for sub in ("images", "masks"):
            os.makedirs(os.path.join(root, sub))
            arr = np.zeros((4, 5), np.uint8)
            Image.fromarray(arr).save(os.path.join(root, sub, "a1.png"))
        with open(os.path.join(root, "test.txt"), "w") as f:
            f.write("a1\n")
        return irdet.load_irstd_folder(root, "test", **kw).images


def _particles(**kw):
    kw = {"n_particles": 16, "steps": 2, **kw}
    return irdet.particle_diffuse(D, None, PTS, time=0.2, **{"key": jax.random.key(5), **kw})


def _tolerance_map(**kw):
    est, _ = _modules()
    return J.tolerance_map(est, F, **kw)


_TABLE = (0.3 * _rng.normal(size=(2, 15))).astype(np.float32)  # [C, T] of a (2, 3) window
_C = np.ones((2,), np.float32)

# the classes' __call__ (tests/arrays.py): tiny modules, built once on first use
NHWC = _rng.normal(size=(1, 2, 2, 4)).astype(np.float32)  # one 2x2 map = one (2, 2) window
IMG1 = NHWC[..., :1]  # one-channel NHWC image for the net


@built_once
def _wbmm_layers():
    k = jax.random.key(0)
    return {
        "wbmm": vision.WBMM(4, window=2, key=k),
        "bn": eqx.nn.make_with_state(vision.BatchNorm)(4),
        "mk": eqx.nn.make_with_state(vision.MultiKernelWBMM)(4, window=2, key=k),
        "block": eqx.nn.make_with_state(vision.WBMMBlock)(4, "W", window=2, ffn_ratio=1, key=k),
        "net": eqx.nn.make_with_state(vision.WBMMNet)(
            depths=(1,),
            dims=(4,),
            patterns=("W",),
            in_channels=1,
            num_classes=2,
            window=2,
            stem_strides=(1,),
            key=k,
        ),
        "est": J.FeatJNDEstimator(2, hidden=2, key=k),
        "det": irdet.Detector(key=k, channels=(2,)),
    }


def _stateful(name, x, **kw):
    """Call the stateful layer ``name`` on ``x`` with a fresh state; its array output."""
    layer, state = _wbmm_layers()[name]
    state = jax.tree.map(lambda a: a, state)  # a used state is spent (equinox): a copy
    kw = {"inference": False, **kw} if name in ("bn", "mk") else kw
    return layer(x, state, **kw)[0]


def _net_features(**kw):
    """The net's per-stage features on ``IMG1`` (a fresh state, as :func:`_stateful`)."""
    net, state = _wbmm_layers()["net"]
    state = jax.tree.map(lambda a: a, state)
    return net.features(IMG1, state, **{"key": jax.random.key(0), **kw})[0]


RECIPES = {
    "jaxkit.vision.fold_bn_into_table": lambda **kw: tuple(
        vision.fold_bn_into_table(
            _TABLE,
            0.1 * _C,
            **{"scale": _C, "shift": 0.5 * _C, "window": (2, 3), "residual": True, **kw},
        )
    ),
    "jaxkit.vision.featjnd.feature_snr_db": functools.partial(J.feature_snr_db, F, 0.1 * S),
    "jaxkit.vision.featjnd.tolerance_map": _tolerance_map,
    "jaxkit.vision.featjnd.kl_discrepancy": functools.partial(J.kl_discrepancy, X, X[::-1]),
    "jaxkit.vision.irdet.residual_scores": functools.partial(
        irdet.residual_scores, PROB, PSEUDO, PROB[::-1], PSEUDO[::-1]
    ),
    "jaxkit.vision.irdet.point_sources": functools.partial(irdet.point_sources, PTS[0], HW),
    "jaxkit.vision.irdet.phi_from_u": lambda **kw: tuple(
        irdet.phi_from_u(np.full((4,), 0.1, np.float32), **kw)
    ),
    "jaxkit.vision.irdet.soft_iou_loss": functools.partial(irdet.soft_iou_loss, LOGITS, PSEUDO),
    "jaxkit.vision.featjnd.jnd_perturbation": lambda **kw: J.jnd_perturbation(
        S, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.vision.featjnd.token_steps": lambda **kw: J.token_steps(
        S, budget_rms=0.1, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.vision.featjnd.matched_gaussian": lambda **kw: J.matched_gaussian(
        F, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.vision.featjnd.matched_strength_curve": lambda **kw: J.matched_strength_curve(
        _logits3, F, np.array([0, 1]), S, np.ones(1, np.float32), **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.vision.featjnd.quantize": functools.partial(J.quantize, F, S),
    "jaxkit.vision.featjnd.featjnd_loss": _featjnd_loss,
    "jaxkit.vision.featjnd.featjnd_step": _featjnd_step,
    "jaxkit.vision.featjnd.fit_featjnd": _fit_featjnd,
    "jaxkit.vision.irdet.grad_dot_scores": functools.partial(
        irdet.grad_dot_scores, _per_sample_loss, W, X, X[:2]
    ),
    "jaxkit.vision.irdet.make_weighter": lambda **kw: irdet.make_weighter(
        **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.vision.irdet.sample_weights": _weights,
    "jaxkit.vision.irdet.weight_features": lambda **kw: irdet.weight_features(
        LOGITS, PSEUDO, jax.nn.sigmoid(LOGITS), PSEUDO.mean(axis=(1, 2)), **kw
    ),
    "jaxkit.vision.irdet.weighter_loss": _weighter_loss,
    "jaxkit.vision.irdet.load_irstd_folder": _load,
    "jaxkit.vision.irdet.diffusivity": functools.partial(irdet.diffusivity, IMG),
    "jaxkit.vision.irdet.fokker_planck": lambda **kw: irdet.fokker_planck(
        U0, D, time=0.1, substeps=2, **kw
    ),
    "jaxkit.vision.irdet.particle_diffuse": _particles,
    "jaxkit.vision.irdet.stable_substeps": functools.partial(irdet.stable_substeps, 0.2, 3.2),
    "jaxkit.vision.irdet.niou": functools.partial(irdet.niou, PRED, GT),
    "jaxkit.vision.irdet.pd_fa": functools.partial(irdet.pd_fa, PRED, GT),
    "jaxkit.vision.irdet.pd_fa_curve": lambda **kw: tuple(
        irdet.pd_fa_curve(PRED.astype(np.float32), GT, thresholds=[0.5], **kw)
    ),
    "jaxkit.vision.irdet.points_from_masks": functools.partial(irdet.points_from_masks, MASKS),
    "jaxkit.vision.irdet.disk_mask": lambda **kw: irdet.disk_mask(PTS, VALID, hw=HW, **kw),
    "jaxkit.vision.irdet.otsu_threshold": functools.partial(irdet.otsu_threshold, VALUES, WEIGHTS),
    "jaxkit.vision.irdet.point_priors": lambda **kw: tuple(irdet.point_priors(BIG, BIG_PTS, **kw)),
    "jaxkit.vision.irdet.pseudo_mask": lambda **kw: (
        irdet.pseudo_mask(BIG, BIG_PTS, np.ones((1, 1), bool), **kw).score
    ),
    "jaxkit.vision.irdet.phi_loss": functools.partial(irdet.phi_loss, np.zeros(4), PROB, PSEUDO),
    "jaxkit.vision.irdet.surrogate_refine": functools.partial(irdet.surrogate_refine, PROB),
    "jaxkit.vision.irdet.make_dataset": lambda **kw: tuple(
        irdet.make_dataset(1, **{"key": jax.random.key(0), "hw": (16, 16), **kw})
    ),
    "jaxkit.vision.irdet.make_scene": lambda **kw: tuple(
        irdet.make_scene(**{"key": jax.random.key(0), "hw": (16, 16), **kw})
    ),
    "jaxkit.vision.irdet.Detector": lambda **kw: irdet.Detector(
        channels=(2, 4), **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.vision.WBMM": lambda **kw: vision.WBMM(4, **{"key": jax.random.key(0), **kw}),
    "jaxkit.vision.BatchNorm": lambda **kw: vision.BatchNorm(4, **kw),
    "jaxkit.vision.MultiKernelWBMM": lambda **kw: vision.MultiKernelWBMM(
        4, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.vision.WBMMBlock": lambda **kw: vision.WBMMBlock(4, **{"key": jax.random.key(0), **kw}),
    "jaxkit.vision.WBMMNet": lambda **kw: vision.WBMMNet(
        depths=(1,),
        dims=(4,),
        patterns=("W",),
        **{"key": jax.random.key(0), "in_channels": 1, "num_classes": 2, **kw},
    ),
    "jaxkit.vision.featjnd.FeatJNDEstimator": lambda **kw: J.FeatJNDEstimator(
        2, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.vision.WBMM.__call__": lambda **kw: _wbmm_layers()["wbmm"](NHWC, **kw),
    "jaxkit.vision.BatchNorm.__call__": lambda **kw: _stateful("bn", NHWC, **kw),
    "jaxkit.vision.MultiKernelWBMM.__call__": lambda **kw: _stateful("mk", NHWC, **kw),
    "jaxkit.vision.WBMMBlock.__call__": lambda **kw: _stateful(
        "block", NHWC, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.vision.WBMMNet.__call__": lambda **kw: _stateful(
        "net", IMG1, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.vision.WBMMNet.features": lambda **kw: _net_features(**kw),
    "jaxkit.vision.featjnd.FeatJNDEstimator.__call__": lambda **kw: _wbmm_layers()["est"](
        F[0], **kw
    ),
    "jaxkit.vision.irdet.Detector.__call__": lambda **kw: _wbmm_layers()["det"](IMG[0], **kw),
}

EXEMPT: dict[str, str] = {}

ANY_RANK = {
    "jaxkit.vision.featjnd.jnd_perturbation:s": "[B, ...] tolerance map of any rank >= 2",
    "jaxkit.vision.featjnd.token_steps:s": (
        "[B, ...] tolerance map of any rank >= 2 that has the `token_axes`"
    ),
    "jaxkit.vision.featjnd.matched_gaussian:delta": "[B, ...] of any rank >= 2, matched per sample",
    "jaxkit.vision.featjnd.fit_featjnd:features": (
        "[N, ...] rows of whatever the user's estimator takes; the estimator checks its own "
        "input (FeatJNDEstimator names its `f`)"
    ),
    "jaxkit.vision.irdet.grad_dot_scores:params": (
        "a pytree passed through to the user's `loss_fn`: its shapes are the user's business "
        "(a non-floating leaf is a TypeError naming `params`)"
    ),
    **{
        f"jaxkit.vision.irdet.grad_dot_scores:{_b}": "a pytree only the user's `loss_fn` "
        "reads: the library checks each leaf's leading batch axis, the rest is the user's"
        for _b in ("train_batch", "val_batch")
    },
    "jaxkit.vision.irdet.diffusivity:image": "[..., H, W]: any leading batch axes (jnp.vectorize)",
    "jaxkit.vision.irdet.surrogate_refine:prob": (
        "[..., H, W]: any leading batch axes (jnp.vectorize)"
    ),
    "jaxkit.vision.irdet.phi_from_u:u": "[..., 4]: leading batch axes (documented)",
    "jaxkit.vision.irdet.points_from_masks:mask": (
        "one [H, W] mask or a batch [N, H, W] (documented); other ranks raise a TypeError"
    ),
}

BROADCAST_OK = {
    # the module partner (wave 47): `f`'s last axis is the width W of a [B, C, H, W] map, and
    # the estimator and head are convolutional, so any W is valid; the estimator's hidden
    # width equals the recipe's W by chance (its channels C are checked: a `TypeError`)
    "jaxkit.vision.featjnd.featjnd_loss:f": "the width of a map read by convolutions: any W",
    "jaxkit.vision.featjnd.featjnd_step:f": "the width of a map read by convolutions: any W",
    "jaxkit.vision.featjnd.quantize:steps": "of the rank of `f`, broadcasting against it "
    "(documented): one row of steps shared by every sample is a use",
}

EMPTY_EXEMPT: dict[str, str] = {
    "jaxkit.vision.irdet.grad_dot_scores:params": (
        "a pytree only the user's `loss_fn` reads: an empty parameter is the user's error"
    ),
    "jaxkit.vision.irdet.grad_dot_scores:train_batch": (
        "only the user's `loss_fn` reads the batch's feature axes (an empty batch gives empty "
        "scores; the library reads only the leading axis)"
    ),
    "jaxkit.vision.irdet.grad_dot_scores:val_batch": (
        "only the user's `loss_fn` reads the batch's feature axes (an empty leading axis is "
        "a TypeError naming `val_batch`: L_val is a mean over its samples)"
    ),
}
