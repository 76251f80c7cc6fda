"""FacRNN: low-rank RNNs as VAEs with group-wise independent latents (ICML 2026).

A rank-``K`` RNN (connectivity ``J = A B``) is read as a VAE whose encoder is the read-in
``B tanh(x_{t-1})`` and whose decoder is the read-out ``A z_t``; a partial-correlation
penalty (the KL between the aggregate posterior and the product of its group marginals)
makes ``G`` groups of latents mutually independent, so the connectivity splits into
per-group sub-circuits ``J_g = A_g B_g``. Objective, estimator, baselines and metrics were
read from the authors' code (JerrySoybean/facrnn) and re-derived; the Poisson observation
path is reconstructed [R].
"""

from jaxkit.neuro._baselines import ica_baseline as ica_baseline
from jaxkit.neuro._baselines import lint_baseline as lint_baseline
from jaxkit.neuro._data import SyntheticRNN as SyntheticRNN
from jaxkit.neuro._data import lorenz_thomas as lorenz_thomas
from jaxkit.neuro._data import synthetic_lowrank as synthetic_lowrank
from jaxkit.neuro._encoder import BiGRUEncoder as BiGRUEncoder
from jaxkit.neuro._encoder import GRUEncoder as GRUEncoder
from jaxkit.neuro._encoder import lagged_windows as lagged_windows
from jaxkit.neuro._init import principal_init as principal_init
from jaxkit.neuro._loss import LossAux as LossAux
from jaxkit.neuro._loss import facrnn_loss as facrnn_loss
from jaxkit.neuro._loss import observation_log_lik as observation_log_lik
from jaxkit.neuro._loss import offblock_penalty as offblock_penalty
from jaxkit.neuro._loss import preset as preset
from jaxkit.neuro._metrics import AlignedR2 as AlignedR2
from jaxkit.neuro._metrics import ConnectivityMetrics as ConnectivityMetrics
from jaxkit.neuro._metrics import component_aligned_r2 as component_aligned_r2
from jaxkit.neuro._metrics import connectivity_metrics as connectivity_metrics
from jaxkit.neuro._metrics import group_aligned_r2 as group_aligned_r2
from jaxkit.neuro._metrics import sub_connectivity_r2 as sub_connectivity_r2
from jaxkit.neuro._model import LowRankRNN as LowRankRNN
from jaxkit.neuro._model import causal_smooth as causal_smooth
from jaxkit.neuro._model import connectivity as connectivity
from jaxkit.neuro._model import posterior_log_std as posterior_log_std
from jaxkit.neuro._model import sub_connectivity as sub_connectivity
from jaxkit.neuro._nwb import NWBData as NWBData
from jaxkit.neuro._nwb import load_nwb as load_nwb
from jaxkit.neuro._pc import gaussian_group_tc as gaussian_group_tc
from jaxkit.neuro._pc import kl_std_normal as kl_std_normal
from jaxkit.neuro._pc import pairwise_log_q as pairwise_log_q
from jaxkit.neuro._pc import partial_correlation as partial_correlation
from jaxkit.neuro._pc import partial_correlation_eval as partial_correlation_eval
from jaxkit.neuro._pc import total_correlation as total_correlation
from jaxkit.neuro._train import FitResult as FitResult
from jaxkit.neuro._train import fit as fit
