"""Vision methods: WBMM layers and network, FeatJND (``jaxkit.vision.featjnd``), IR detection."""

from jaxkit.vision import featjnd as featjnd  # FeatJND tolerance maps (subpackage)
from jaxkit.vision import irdet as irdet  # point-supervised IR small-target detection
from jaxkit.vision.wbmm import VARIANTS as VARIANTS
from jaxkit.vision.wbmm import WBMM as WBMM
from jaxkit.vision.wbmm import BatchNorm as BatchNorm
from jaxkit.vision.wbmm import FoldedTable as FoldedTable
from jaxkit.vision.wbmm import MultiKernelWBMM as MultiKernelWBMM
from jaxkit.vision.wbmm import WBMMBlock as WBMMBlock
from jaxkit.vision.wbmm import WBMMNet as WBMMNet
from jaxkit.vision.wbmm import fold_bn_into_table as fold_bn_into_table
from jaxkit.vision.wbmm import reparameterize as reparameterize
