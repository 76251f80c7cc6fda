"""jaxkit.soft: differentiable (soft) drop-in replacements for hard JAX operators.

Elementwise steps, comparisons, fuzzy logic, soft selection, autograd-safe math,
axiswise sort/rank/top-k/quantile with PAV, SoftSort, NeuralSort, Sinkhorn OT and
sorting networks, and straight-through variants (``*_st``, :func:`st`,
:func:`grad_replace`). Every soft-index operator (``argmax``, ``argmin``, ``argsort``,
``argtop_k``, ``argquantile``, ``argmedian``, ``argpercentile``) takes
``return_log_probs=`` and ``log_prob_eps=``; ``top_k`` returns ``(values, indices)`` as
``jax.lax.top_k`` for every method. The public functions are jitted like jax.numpy
(module level, static choices static, ``softness``/``q`` traced), so eager calls hit the
compile cache. :mod:`jaxkit.soft.random` holds the soft samplers (Gumbel-max/top-k/sort,
uniform thresholds, Gumbel-Sinkhorn permutations) and temperature schedules.
"""

from jaxkit.soft import _st
from jaxkit.soft._axis_quantile import argmedian as argmedian
from jaxkit.soft._axis_quantile import argpercentile as argpercentile
from jaxkit.soft._axis_quantile import argquantile as argquantile
from jaxkit.soft._axis_quantile import banded_error_bound as banded_error_bound
from jaxkit.soft._axis_quantile import median as median
from jaxkit.soft._axis_quantile import percentile as percentile
from jaxkit.soft._axis_quantile import quantile as quantile
from jaxkit.soft._axis_select import argmax as argmax
from jaxkit.soft._axis_select import argmin as argmin
from jaxkit.soft._axis_select import argtop_k as argtop_k
from jaxkit.soft._axis_select import max as max  # noqa: A004
from jaxkit.soft._axis_select import min as min  # noqa: A004
from jaxkit.soft._axis_select import top_k as top_k
from jaxkit.soft._axis_sort import argsort as argsort
from jaxkit.soft._axis_sort import rank as rank
from jaxkit.soft._axis_sort import sort as sort
from jaxkit.soft._calibrate import calibrate as calibrate
from jaxkit.soft._elementwise import abs as abs  # noqa: A004
from jaxkit.soft._elementwise import clip as clip
from jaxkit.soft._elementwise import equal as equal
from jaxkit.soft._elementwise import greater as greater
from jaxkit.soft._elementwise import greater_equal as greater_equal
from jaxkit.soft._elementwise import heaviside as heaviside
from jaxkit.soft._elementwise import isclose as isclose
from jaxkit.soft._elementwise import less as less
from jaxkit.soft._elementwise import less_equal as less_equal
from jaxkit.soft._elementwise import not_equal as not_equal
from jaxkit.soft._elementwise import relu as relu
from jaxkit.soft._elementwise import round as round  # noqa: A004
from jaxkit.soft._elementwise import sigmoidal as sigmoidal
from jaxkit.soft._elementwise import sign as sign
from jaxkit.soft._elementwise import softrelu as softrelu
from jaxkit.soft._logic import all as all  # noqa: A004
from jaxkit.soft._logic import any as any  # noqa: A004
from jaxkit.soft._logic import logical_and as logical_and
from jaxkit.soft._logic import logical_not as logical_not
from jaxkit.soft._logic import logical_or as logical_or
from jaxkit.soft._logic import logical_xor as logical_xor
from jaxkit.soft._pav import isotonic as isotonic
from jaxkit.soft._pav import project_permutahedron as project_permutahedron
from jaxkit.soft._safe import arccos as arccos
from jaxkit.soft._safe import arcsin as arcsin
from jaxkit.soft._safe import div as div
from jaxkit.soft._safe import log as log
from jaxkit.soft._safe import norm as norm
from jaxkit.soft._safe import sqrt as sqrt
from jaxkit.soft._select import choose as choose
from jaxkit.soft._select import dynamic_index_in_dim as dynamic_index_in_dim
from jaxkit.soft._select import dynamic_slice as dynamic_slice
from jaxkit.soft._select import dynamic_slice_in_dim as dynamic_slice_in_dim
from jaxkit.soft._select import take as take
from jaxkit.soft._select import take_along_axis as take_along_axis
from jaxkit.soft._select import where as where
from jaxkit.soft._st import grad_replace as grad_replace
from jaxkit.soft._st import st as st

abs_st = _st.st(abs)
argmax_st = _st.st(argmax)
argmedian_st = _st.st(argmedian)
argmin_st = _st.st(argmin)
argpercentile_st = _st.st(argpercentile)
argquantile_st = _st.st(argquantile)
argsort_st = _st.st(argsort)
clip_st = _st.st(clip)
equal_st = _st.st(equal)
greater_st = _st.st(greater)
greater_equal_st = _st.st(greater_equal)
heaviside_st = _st.st(heaviside)
isclose_st = _st.st(isclose)
less_st = _st.st(less)
less_equal_st = _st.st(less_equal)
max_st = _st.st(max)
median_st = _st.st(median)
min_st = _st.st(min)
not_equal_st = _st.st(not_equal)
percentile_st = _st.st(percentile)
quantile_st = _st.st(quantile)
rank_st = _st.st(rank)
relu_st = _st.st(relu)
round_st = _st.st(round)
sign_st = _st.st(sign)
sort_st = _st.st(sort)
top_k_st = _st.st(top_k)
argtop_k_st = _st.st(argtop_k)

from jaxkit.soft import random as random  # noqa: E402
