"""FeatJND: per-feature tolerance maps at a split point of a frozen network.

Zhao, Li, Zhu, Zheng, Lin, "FeatJND: just noticeable difference for deep visual
features" (arXiv 2601.21933; spec ``vision.md`` section 3). An estimator ``G`` maps the
feature ``f`` of a split network ``h(g(x))`` to a map ``s >= 0`` of the largest
per-element noise amplitude the frozen head ``h`` tolerates. The final training
objective is **reconstructed [R]** (the authors' code ``ruizhao26/FeatJND`` is
unpublished): see :func:`featjnd_loss`.
"""

from jaxkit.vision.featjnd._apply import StrengthCurve as StrengthCurve
from jaxkit.vision.featjnd._apply import feature_snr_db as feature_snr_db
from jaxkit.vision.featjnd._apply import jnd_perturbation as jnd_perturbation
from jaxkit.vision.featjnd._apply import matched_gaussian as matched_gaussian
from jaxkit.vision.featjnd._apply import matched_strength_curve as matched_strength_curve
from jaxkit.vision.featjnd._apply import quantize as quantize
from jaxkit.vision.featjnd._apply import token_steps as token_steps
from jaxkit.vision.featjnd._estimator import FeatJNDEstimator as FeatJNDEstimator
from jaxkit.vision.featjnd._estimator import tolerance_map as tolerance_map
from jaxkit.vision.featjnd._objective import FeatJNDAux as FeatJNDAux
from jaxkit.vision.featjnd._objective import FeatJNDFit as FeatJNDFit
from jaxkit.vision.featjnd._objective import FeatJNDStep as FeatJNDStep
from jaxkit.vision.featjnd._objective import featjnd_loss as featjnd_loss
from jaxkit.vision.featjnd._objective import featjnd_step as featjnd_step
from jaxkit.vision.featjnd._objective import fit_featjnd as fit_featjnd
from jaxkit.vision.featjnd._objective import kl_discrepancy as kl_discrepancy
