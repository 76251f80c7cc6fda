"""WBMM layers: the windowed-matmul mixer, the WBMM block and a small WBMM network.

Equinox modules over channels-last batches ``(B, H, W, C)``: BatchNorm makes the
block batch-level, so modules take the batch axis (no ``vmap`` needed) and thread an
``eqx.nn.State`` for the running statistics (build with ``eqx.nn.make_with_state``).
Cross-window communication follows the authors' design: no shifted windows;
information crosses window borders through interleaved 3x3 depthwise ("D") blocks and
the stride-2 downsamples, which re-grid the windows at every stage.

The exact inference re-parameterisation (:func:`reparameterize`) folds each
mixer's BatchNorm (and the S4 multi-kernel branches) into the WBMM table and bias,
and the GRN bias, the FFN BatchNorm and the layer scale into the second linear.
Reconstructed from the authors' code (wansong-s/WBMM): BN uses biased batch variance
for its running estimate; the multi-kernel fold is exact only when the map equals one
window (checked).
"""

from jaxkit.vision.wbmm._blocks import WBMM as WBMM
from jaxkit.vision.wbmm._blocks import MultiKernelWBMM as MultiKernelWBMM
from jaxkit.vision.wbmm._blocks import WBMMBlock as WBMMBlock
from jaxkit.vision.wbmm._net import VARIANTS as VARIANTS
from jaxkit.vision.wbmm._net import WBMMNet as WBMMNet
from jaxkit.vision.wbmm._parts import BatchNorm as BatchNorm
from jaxkit.vision.wbmm._reparameterize import FoldedTable as FoldedTable
from jaxkit.vision.wbmm._reparameterize import fold_bn_into_table as fold_bn_into_table
from jaxkit.vision.wbmm._reparameterize import reparameterize as reparameterize
