"""Masked discrete diffusion (MDLM) and TD3B fine-tuning.

Any denoiser with the project's sequence-model protocol
``apply_fn(params, tokens, positions, attn_mask) -> logits`` works (MDLM needs no
time input); :func:`transformer_denoiser` wraps a bidirectional ``jaxkit.nn``
transformer.
"""

from jaxkit.diffusion._common import subs_log_probs as subs_log_probs
from jaxkit.diffusion._common import transformer_denoiser as transformer_denoiser
from jaxkit.diffusion._loss import log_likelihood_bound as log_likelihood_bound
from jaxkit.diffusion._loss import mdlm_loss as mdlm_loss
from jaxkit.diffusion._sample import Trajectory as Trajectory
from jaxkit.diffusion._sample import sample as sample
from jaxkit.diffusion._sample import trajectory_log_prob as trajectory_log_prob
from jaxkit.diffusion._schedule import MaskingSchedule as MaskingSchedule
