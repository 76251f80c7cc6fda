"""Fixed-rank (LoRA) geometry: tangent lifts, intrinsic norms, noise, retraction.

A LoRA update ``Z = a @ b.T`` (``a: [m, r]``, ``b: [n, r]``) is a point of the
manifold of rank-``r`` ``m x n`` matrices. Everything here works from the
factors and from factor gradients ``g_a = G b``, ``g_b = G.T a`` (what autodiff
returns), never from an ``m x n`` matrix: cost ``O((m + n) r^2 + r^3)``.

The frame (:class:`GramCache`) holds gauge-invariant orthonormal bases ``u, v``
of ``col(a)``, ``col(b)`` (the singular vectors of ``Z`` with a canonical sign),
so tangent coordinates, intrinsic norms and sampled noise do not depend on the
gauge ``(a G, b G^{-T})``. All functions act on one (unbatched) pair of factors;
use ``jax.vmap`` for per-example gradients or stacked layers. Each function is jitted
once at module level like jax.numpy's (static: ``rcond``, ``align``, ``dtype``; step sizes
and noise scales traced), so eager calls hit the compile cache. The code lives in two
private modules, re-exported here: ``_lowrank_tangent`` (the frame, tangent coordinates,
lifts, norms, noise) and ``_lowrank_retract`` (retraction, balancing, initialisation).

References:
  S. Wang, X. Zhang, "PRISM: Gauge-Invariant Tangent-Space Differentially
  Private LoRA", ICML 2026, arXiv:2606.00944 (algorithm from the authors' code,
  osu-srml/PRISM-DP-LoRA, re-derived).
"""

from jaxkit.privacy._lowrank_retract import SpectralInit as SpectralInit
from jaxkit.privacy._lowrank_retract import balance as balance
from jaxkit.privacy._lowrank_retract import balanced_random_init as balanced_random_init
from jaxkit.privacy._lowrank_retract import retract as retract
from jaxkit.privacy._lowrank_retract import spectral_init as spectral_init
from jaxkit.privacy._lowrank_tangent import GramCache as GramCache
from jaxkit.privacy._lowrank_tangent import LoraFactors as LoraFactors
from jaxkit.privacy._lowrank_tangent import TangentCoords as TangentCoords
from jaxkit.privacy._lowrank_tangent import check_factors as check_factors
from jaxkit.privacy._lowrank_tangent import coords_norm_sq as coords_norm_sq
from jaxkit.privacy._lowrank_tangent import from_coords as from_coords
from jaxkit.privacy._lowrank_tangent import gram_cache as gram_cache
from jaxkit.privacy._lowrank_tangent import horizontal_lift as horizontal_lift
from jaxkit.privacy._lowrank_tangent import naive_noise_energy as naive_noise_energy
from jaxkit.privacy._lowrank_tangent import prism_noise_energy as prism_noise_energy
from jaxkit.privacy._lowrank_tangent import project_tangent_dense as project_tangent_dense
from jaxkit.privacy._lowrank_tangent import sample_tangent_coords as sample_tangent_coords
from jaxkit.privacy._lowrank_tangent import sample_tangent_noise as sample_tangent_noise
from jaxkit.privacy._lowrank_tangent import tangent_coords as tangent_coords
from jaxkit.privacy._lowrank_tangent import tangent_dense as tangent_dense
from jaxkit.privacy._lowrank_tangent import tangent_lift as tangent_lift
from jaxkit.privacy._lowrank_tangent import tangent_norm_sq as tangent_norm_sq
from jaxkit.privacy._lowrank_tangent import to_dense as to_dense
