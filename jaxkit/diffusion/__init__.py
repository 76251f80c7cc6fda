"""Masked discrete diffusion (MDLM) and TD3B fine-tuning.

Any denoiser with the project's sequence-model protocol
``apply_fn(params, tokens, positions, attn_mask) -> logits`` works (MDLM needs no
time input); :func:`transformer_denoiser` wraps a bidirectional ``jaxkit.nn``
transformer.
"""

from jaxkit.diffusion._baselines import Guided as Guided
from jaxkit.diffusion._baselines import best_of_n as best_of_n
from jaxkit.diffusion._baselines import reverse_step as reverse_step
from jaxkit.diffusion._baselines import sir_resample as sir_resample
from jaxkit.diffusion._baselines import smc_sample as smc_sample
from jaxkit.diffusion._collect import ESSWarning as ESSWarning
from jaxkit.diffusion._collect import RewardFn as RewardFn
from jaxkit.diffusion._collect import collect_onpolicy as collect_onpolicy
from jaxkit.diffusion._collect import fine_tune as fine_tune
from jaxkit.diffusion._collect import make_buffer as make_buffer
from jaxkit.diffusion._collect import merge_best as merge_best
from jaxkit.diffusion._collect import rescore_buffer as rescore_buffer
from jaxkit.diffusion._collect import score as score
from jaxkit.diffusion._collect import temper_alpha as temper_alpha
from jaxkit.diffusion._common import subs_log_probs as subs_log_probs
from jaxkit.diffusion._common import transformer_denoiser as transformer_denoiser
from jaxkit.diffusion._common import transformer_embedder as transformer_embedder
from jaxkit.diffusion._loss import log_likelihood_bound as log_likelihood_bound
from jaxkit.diffusion._loss import mdlm_loss as mdlm_loss
from jaxkit.diffusion._rescore import trajectory_log_prob as trajectory_log_prob
from jaxkit.diffusion._sample import Trajectory as Trajectory
from jaxkit.diffusion._sample import sample as sample
from jaxkit.diffusion._schedule import MaskingSchedule as MaskingSchedule
from jaxkit.diffusion._step import Buffer as Buffer
from jaxkit.diffusion._step import td3b_loss as td3b_loss
from jaxkit.diffusion._step import td3b_train_step as td3b_train_step
from jaxkit.diffusion._td3b import contrastive_margin as contrastive_margin
from jaxkit.diffusion._td3b import effective_sample_size as effective_sample_size
from jaxkit.diffusion._td3b import gated_reward as gated_reward
from jaxkit.diffusion._td3b import kl_to_reference as kl_to_reference
from jaxkit.diffusion._td3b import log_importance_weight as log_importance_weight
from jaxkit.diffusion._td3b import wdce_loss as wdce_loss
from jaxkit.diffusion._toy import AMINO_ACIDS as AMINO_ACIDS
from jaxkit.diffusion._toy import load_binder_csv as load_binder_csv
from jaxkit.diffusion._toy import toy_nature as toy_nature
from jaxkit.diffusion._toy import toy_nature_sample as toy_nature_sample
from jaxkit.diffusion._toy import toy_oracle as toy_oracle
