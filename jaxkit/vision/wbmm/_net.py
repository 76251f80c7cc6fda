"""The WBMM network: stem, stages of WBMM blocks with downsamples, and a head."""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jaxkit import _validate
from jaxkit.kernels import IMPLEMENTATIONS
from jaxkit.vision.wbmm._blocks import (
    Token,
    WBMMBlock,
    check_block_scalars,
    check_window,
)
from jaxkit.vision.wbmm._parts import (
    State,
    check_call,
    conv2d,
    conv_nhwc,
    layer_norm,
    linear,
    per_position,
)

VARIANTS: dict[str, dict] = {
    "p": dict(depths=(2, 2, 6, 2), dims=(64, 128, 256, 512), patterns=("DD", "WD", "WD" * 3, "MM")),
    "n": dict(depths=(2, 2, 8, 2), dims=(80, 160, 320, 640), patterns=("DD", "WD", "WD" * 4, "MM")),
    "t": dict(
        depths=(3, 3, 18, 3), dims=(80, 160, 320, 640), patterns=("DDD", "WDW", "WD" * 9, "WWW")
    ),
    "s": dict(
        depths=(3, 3, 27, 3), dims=(96, 192, 384, 768), patterns=("DDD", "WDW", "WDD" * 9, "WWW")
    ),
}
"""The paper's classification variants (mixer pattern per stage; "M" = multi-kernel S4).
The authors' S4 multi-kernel mixer for P/N is our "M"; the dense-prediction backbones
change stage 1 to "WDW"."""


class WBMMNet(eqx.Module):
    """A WBMM network: stem, stages of :class:`WBMMBlock` with downsamples, and a head.

    Stem: ``len(stem_strides)`` 3x3 convs (LayerNorm, GELU between); each later stage
    starts with a stride-2 3x3 conv + LayerNorm; head: global mean, LayerNorm, linear.
    ``patterns[i]`` lists the mixer of every block of stage ``i`` (see
    :class:`WBMMBlock`), so the paper's variants are ``WBMMNet(**VARIANTS["t"], ...)``.
    """

    stem: tuple[tuple[eqx.nn.Conv2d, eqx.nn.LayerNorm], ...]
    downsamples: tuple[tuple[eqx.nn.Conv2d, eqx.nn.LayerNorm], ...]
    stages: tuple[tuple[WBMMBlock, ...], ...]
    norm: eqx.nn.LayerNorm
    head: eqx.nn.Linear

    def __init__(
        self,
        *,
        depths: Sequence[int],
        dims: Sequence[int],
        patterns: Sequence[Sequence[Token | str]],
        in_channels: int = 3,
        num_classes: int = 1000,
        window: int | tuple[int, int] = 7,
        stem_strides: Sequence[int] = (2, 2),
        layer_scale_init: float = 1e-6,
        drop_path_rate: float = 0.0,
        bn_momentum: float = 0.1,
        implementation: str = "auto",
        key: PRNGKeyArray,
    ):
        _validate.is_key(key)
        if not (len(depths) == len(dims) == len(patterns)):
            raise ValueError(
                "`depths`, `dims` and `patterns` must have equal lengths, got "
                f"{len(depths)}, {len(dims)}, {len(patterns)}."
            )
        for i, (d, p) in enumerate(zip(depths, patterns, strict=True)):
            if len(p) != d:
                raise ValueError(f"`patterns[{i}]` has {len(p)} mixers for depth {d}.")
        in_channels = _validate.python_int(in_channels, name="in_channels", minimum=1)
        num_classes = _validate.python_int(num_classes, name="num_classes", minimum=1)
        check_window(window)
        _validate.one_of(IMPLEMENTATIONS, implementation=implementation)
        check_block_scalars(
            layer_scale_init=layer_scale_init,
            bn_momentum=bn_momentum,
            drop_path_rate=drop_path_rate,
        )
        keys = iter(jax.random.split(key, 4 + len(stem_strides) + len(dims) + sum(depths)))
        stem, c = [], in_channels
        for j, s in enumerate(stem_strides):
            out = dims[0] if j == len(stem_strides) - 1 else max(1, dims[0] // 2)
            stem.append((conv2d(c, out, stride=s, key=next(keys)), layer_norm(out)))
            c = out
        self.stem = tuple(stem)
        self.downsamples = tuple(
            (conv2d(dims[i], dims[i + 1], key=next(keys)), layer_norm(dims[i + 1]))
            for i in range(len(dims) - 1)
        )
        rates = [drop_path_rate * i / max(1, sum(depths) - 1) for i in range(sum(depths))]
        stages, r = [], iter(rates)
        for i, p in enumerate(patterns):
            stages.append(
                tuple(
                    WBMMBlock(
                        dims[i],
                        tok,
                        window=window,
                        layer_scale_init=layer_scale_init,
                        drop_path=next(r),
                        bn_momentum=bn_momentum,
                        implementation=implementation,
                        key=next(keys),
                    )
                    for tok in p
                )
            )
        self.stages = tuple(stages)
        self.norm = layer_norm(dims[-1])
        self.head = linear(dims[-1], num_classes, key=next(keys))

    def features(
        self,
        x: Float[ArrayLike, "B H W Cin"],
        state: State,
        *,
        inference: bool = False,
        key: PRNGKeyArray | None = None,
    ) -> tuple[list[Array], State]:
        """Per-stage feature maps (for dense prediction).

        Raises:
          TypeError: as :meth:`__call__`.
          ValueError: as :meth:`__call__`.
        """
        x, inference = self._check_call(x, inference, key)
        return self._features(x, state, inference=inference, key=key)

    def _check_call(self, x, inference, key) -> tuple[Array, bool]:
        """Host-side checks of a call's arguments: ``(jnp.asarray(x), inference)``."""
        if key is not None:
            _validate.is_key(key)
        return check_call(x, self.stem[0][0].in_channels, inference)

    def _features(self, x, state, *, inference, key):
        for j, (conv, ln) in enumerate(self.stem):
            x = per_position(ln, conv_nhwc(conv, x))
            if j < len(self.stem) - 1:
                x = jax.nn.gelu(x, approximate=False)
        outs = []
        nblocks = sum(len(s) for s in self.stages)
        keys = [None] * nblocks if key is None else list(jax.random.split(key, nblocks))
        k = iter(keys)
        for i, stage in enumerate(self.stages):
            if i > 0:
                conv, ln = self.downsamples[i - 1]
                x = per_position(ln, conv_nhwc(conv, x))
            for block in stage:
                x, state = block(x, state, inference=inference, key=next(k))
            outs.append(x)
        return outs, state

    def __call__(
        self,
        x: Float[ArrayLike, "B H W Cin"],
        state: State,
        *,
        inference: bool = False,
        key: PRNGKeyArray | None = None,
    ) -> tuple[Float[Array, "B K"], State]:
        """Logits for a batch of NHWC images.

        ``key`` (keyword only) draws the drop-path masks, one per block: required in
        training (``inference=False``) when ``drop_path_rate > 0`` (a block with
        ``drop_path > 0`` raises ``ValueError`` without it), ignored in inference.

        Raises:
          TypeError: ``x`` not a floating array of rank 4 with ``in_channels`` channels (a
            string included), ``inference`` not a bool, ``key`` not a PRNG key.
          ValueError: no ``key`` in training with a block's ``drop_path > 0``; a
            multi-kernel ("M") stage whose map is not one window.
        """
        x, inference = self._check_call(x, inference, key)
        feats, state = self._features(x, state, inference=inference, key=key)
        pooled = jnp.mean(feats[-1], axis=(1, 2))
        return per_position(self.head, per_position(self.norm, pooled)), state
