"""Point-supervised infrared small-target detection by heat diffusion (Diffuse-to-Detect)."""

from jaxkit.vision.irdet._diffusion import diffusivity as diffusivity
from jaxkit.vision.irdet._diffusion import fokker_planck as fokker_planck
from jaxkit.vision.irdet._diffusion import particle_diffuse as particle_diffuse
from jaxkit.vision.irdet._diffusion import point_sources as point_sources
from jaxkit.vision.irdet._diffusion import stable_substeps as stable_substeps
from jaxkit.vision.irdet._metrics import PdFa as PdFa
from jaxkit.vision.irdet._metrics import iou as iou
from jaxkit.vision.irdet._metrics import niou as niou
from jaxkit.vision.irdet._metrics import pd_fa as pd_fa
from jaxkit.vision.irdet._metrics import points_from_masks as points_from_masks
from jaxkit.vision.irdet._pseudolabel import PointPrior as PointPrior
from jaxkit.vision.irdet._pseudolabel import PseudoMask as PseudoMask
from jaxkit.vision.irdet._pseudolabel import disk_mask as disk_mask
from jaxkit.vision.irdet._pseudolabel import otsu_threshold as otsu_threshold
from jaxkit.vision.irdet._pseudolabel import point_priors as point_priors
from jaxkit.vision.irdet._pseudolabel import pseudo_mask as pseudo_mask
from jaxkit.vision.irdet._synthetic import EXTENDED as EXTENDED
from jaxkit.vision.irdet._synthetic import POINT as POINT
from jaxkit.vision.irdet._synthetic import SPOT as SPOT
from jaxkit.vision.irdet._synthetic import Scene as Scene
from jaxkit.vision.irdet._synthetic import make_dataset as make_dataset
from jaxkit.vision.irdet._synthetic import make_scene as make_scene
