"""PST motion-language retrieval and its fast Shapley-Taylor interaction engine.

PST (pyramidal Shapley-Taylor learning, ICML 2026) aligns motion tokens (joints, segments)
with text tokens (words, phrases) using the order-2 Shapley-Taylor interaction index of a
cross-modal game. The paper's code is not public: this area is reconstructed from its
predecessors HBI (Jin et al., CVPR 2023: token interaction games) and TMR (Petrovich et
al., ICCV 2023: InfoNCE with negative filtering, the four retrieval protocols). The
spec's token compressor (:func:`dpc_knn`, :func:`merge_tokens`, :class:`TokenCompressor`)
forms segment and phrase tokens; HBI's Banzhaf interaction (:func:`banzhaf_exact`,
:func:`banzhaf_mc`) is the comparison index.
"""

from jaxkit.retrieval._banzhaf import Banzhaf as Banzhaf
from jaxkit.retrieval._banzhaf import BanzhafEstimate as BanzhafEstimate
from jaxkit.retrieval._banzhaf import banzhaf_exact as banzhaf_exact
from jaxkit.retrieval._banzhaf import banzhaf_mc as banzhaf_mc
from jaxkit.retrieval._compress import Clusters as Clusters
from jaxkit.retrieval._compress import dpc_knn as dpc_knn
from jaxkit.retrieval._compress import merge_tokens as merge_tokens
from jaxkit.retrieval._compressor import Compressed as Compressed
from jaxkit.retrieval._compressor import TokenCompressor as TokenCompressor
from jaxkit.retrieval._game import cross_modal_stii as cross_modal_stii
from jaxkit.retrieval._game import cross_modal_value as cross_modal_value
from jaxkit.retrieval._game import wti_value as wti_value
from jaxkit.retrieval._loader import MotionCaption as MotionCaption
from jaxkit.retrieval._loader import load_motion_text as load_motion_text
from jaxkit.retrieval._losses import info_nce as info_nce
from jaxkit.retrieval._losses import negative_filter as negative_filter
from jaxkit.retrieval._losses import pyramid_consistency as pyramid_consistency
from jaxkit.retrieval._losses import stii_alignment_loss as stii_alignment_loss
from jaxkit.retrieval._losses import token_scores as token_scores
from jaxkit.retrieval._metrics import dissimilar_subset as dissimilar_subset
from jaxkit.retrieval._metrics import protocol_metrics as protocol_metrics
from jaxkit.retrieval._metrics import retrieval_metrics as retrieval_metrics
from jaxkit.retrieval._sampling import STIIEstimate as STIIEstimate
from jaxkit.retrieval._sampling import stii_permutation as stii_permutation
from jaxkit.retrieval._sampling import stii_stratified as stii_stratified
from jaxkit.retrieval._stii import STII as STII
from jaxkit.retrieval._stii import all_masks as all_masks
from jaxkit.retrieval._stii import game_values as game_values
from jaxkit.retrieval._stii import moebius_transform as moebius_transform
from jaxkit.retrieval._stii import stii_exact as stii_exact
from jaxkit.retrieval._synthetic import MotionTextData as MotionTextData
from jaxkit.retrieval._synthetic import synthetic_motion_text as synthetic_motion_text
