"""Point-supervised infrared small-target detection by heat diffusion (Diffuse-to-Detect).

From point labels to pseudo-masks (a stable sub-stepped Fokker-Planck solver or the
repo's particle path, fused with local intensity), a differentiable diffusion module
refined by detection feedback, bi-level sample weighting with a meta-classifier, a
small U-Net detector, the IRSTD metrics, a synthetic IR scene generator and loaders
for the public folder layouts (spec: vision.md §4; authors' code
yuanhang-yao/diffuse-to-detect, read to learn only).

Three flaws of the authors' code are not copied:

1. ground-truth leak into the point priors (types and box sizes from GT masks):
   nothing here reads a mask to build labels; :func:`point_priors` and
   :func:`pseudo_mask` use a fixed box and the image only;
2. "validation-guided" updates that use validation *pseudo-masks*: kept as the
   method is, but named ``pseudo_val`` and documented as such, never called GT;
3. an unstable explicit diffusion step (``D dt = 0.64 > 1/4``): :func:`fokker_planck`
   sub-steps and checks the bound ``h (4 D + 4 |v|) <= 0.8``; the surrogate caps D.
"""

from jaxkit.vision.irdet._bilevel import N_FEATURES as N_FEATURES
from jaxkit.vision.irdet._bilevel import grad_dot_scores as grad_dot_scores
from jaxkit.vision.irdet._bilevel import make_weighter as make_weighter
from jaxkit.vision.irdet._bilevel import residual_scores as residual_scores
from jaxkit.vision.irdet._bilevel import sample_weights as sample_weights
from jaxkit.vision.irdet._bilevel import weight_features as weight_features
from jaxkit.vision.irdet._bilevel import weighter_loss as weighter_loss
from jaxkit.vision.irdet._data import IRSTDSplit as IRSTDSplit
from jaxkit.vision.irdet._data import load_irstd_folder as load_irstd_folder
from jaxkit.vision.irdet._diffusion import diffusivity as diffusivity
from jaxkit.vision.irdet._diffusion import fokker_planck as fokker_planck
from jaxkit.vision.irdet._diffusion import particle_diffuse as particle_diffuse
from jaxkit.vision.irdet._diffusion import point_sources as point_sources
from jaxkit.vision.irdet._diffusion import stable_substeps as stable_substeps
from jaxkit.vision.irdet._metrics import PdFa as PdFa
from jaxkit.vision.irdet._metrics import PdFaCurve as PdFaCurve
from jaxkit.vision.irdet._metrics import iou as iou
from jaxkit.vision.irdet._metrics import niou as niou
from jaxkit.vision.irdet._metrics import pd_fa as pd_fa
from jaxkit.vision.irdet._metrics import pd_fa_curve as pd_fa_curve
from jaxkit.vision.irdet._metrics import points_from_masks as points_from_masks
from jaxkit.vision.irdet._pseudolabel import PointPrior as PointPrior
from jaxkit.vision.irdet._pseudolabel import PseudoMask as PseudoMask
from jaxkit.vision.irdet._pseudolabel import disk_mask as disk_mask
from jaxkit.vision.irdet._pseudolabel import otsu_threshold as otsu_threshold
from jaxkit.vision.irdet._pseudolabel import point_priors as point_priors
from jaxkit.vision.irdet._pseudolabel import pseudo_mask as pseudo_mask
from jaxkit.vision.irdet._refine import Detector as Detector
from jaxkit.vision.irdet._refine import Phi as Phi
from jaxkit.vision.irdet._refine import phi_from_u as phi_from_u
from jaxkit.vision.irdet._refine import phi_loss as phi_loss
from jaxkit.vision.irdet._refine import soft_iou_loss as soft_iou_loss
from jaxkit.vision.irdet._refine import surrogate_refine as surrogate_refine
from jaxkit.vision.irdet._synthetic import EXTENDED as EXTENDED
from jaxkit.vision.irdet._synthetic import POINT as POINT
from jaxkit.vision.irdet._synthetic import SPOT as SPOT
from jaxkit.vision.irdet._synthetic import Scene as Scene
from jaxkit.vision.irdet._synthetic import make_dataset as make_dataset
from jaxkit.vision.irdet._synthetic import make_scene as make_scene
