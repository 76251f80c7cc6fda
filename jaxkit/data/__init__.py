"""Training-data construction: HOBIT hardness-optimised batches for InfoNCE (issue 18).

HOBIT (Dutta, Nagalapatti & Prabhu, ICML 2026) permutes the training set every epoch
so that each mini-batch groups examples that are hard negatives for each other while
excluding likely false negatives. **[recon]**: no code or full text of the paper is
public; the objective is our reconstruction (spec ``training.md`` section 3) and is
swappable (``objective=``). ``knn_graph`` builds the sparse hardness graph,
``hobit_objective`` evaluates the set function, ``greedy_select`` is the exact
sequential greedy on one pool, ``hobit_batches`` / ``hobit_permutation`` the jitted
parallel greedy over a whole epoch; ``infonce`` the in-batch loss whose negatives
are the global batch gathered over a mesh axis. MTS: ``normalize_weights`` (global
mean-1 example weights), the ``gsnr`` estimator, ``mts_hypergrad`` (exact hypergradient
by one linearisation; ``unrolled`` / ``finite_diff`` references; ``axis_name=`` for the
multi-device step), ``mts_meta_step`` (hypergradient + optax update of the
meta-network), the features ``el2n``, ``center_cosine``, ``nearest_cosines``,
``knn_label_agreement`` and forgetting counts (``forgetting_init`` /
``forgetting_update``), and the baselines ``l2rw_step`` (learning to reweight) and
``mwn_meta_step`` (Meta-Weight-Net).
"""

from jaxkit.data._baselines import kmeans_batches as kmeans_batches
from jaxkit.data._baselines import nn_batches as nn_batches
from jaxkit.data._baselines import random_batches as random_batches
from jaxkit.data._features import center_cosine as center_cosine
from jaxkit.data._features import el2n as el2n
from jaxkit.data._features import knn_label_agreement as knn_label_agreement
from jaxkit.data._features import nearest_cosines as nearest_cosines
from jaxkit.data._forgetting import ForgettingState as ForgettingState
from jaxkit.data._forgetting import forgetting_init as forgetting_init
from jaxkit.data._forgetting import forgetting_update as forgetting_update
from jaxkit.data._hobit import HobitBatches as HobitBatches
from jaxkit.data._hobit import SparseHardness as SparseHardness
from jaxkit.data._hobit import greedy_select as greedy_select
from jaxkit.data._hobit import hobit_objective as hobit_objective
from jaxkit.data._hobit import knn_graph as knn_graph
from jaxkit.data._infonce import infonce as infonce
from jaxkit.data._mts import GSNR as GSNR
from jaxkit.data._mts import gsnr as gsnr
from jaxkit.data._mts import normalize_weights as normalize_weights
from jaxkit.data._mts_baselines import L2RWStep as L2RWStep
from jaxkit.data._mts_baselines import l2rw_step as l2rw_step
from jaxkit.data._mts_baselines import mwn_meta_step as mwn_meta_step
from jaxkit.data._mts_step import MTSHypergrad as MTSHypergrad
from jaxkit.data._mts_step import MTSMetaStep as MTSMetaStep
from jaxkit.data._mts_step import mts_hypergrad as mts_hypergrad
from jaxkit.data._mts_step import mts_meta_step as mts_meta_step
from jaxkit.data._permute import hobit_batches as hobit_batches
from jaxkit.data._permute import hobit_permutation as hobit_permutation
