"""Fused categorical sampler (temperature, top-k, top-p, min-p, Gumbel-max).

Returns the token with its probability and the entropy of the distribution, the
confidence signals that diffusion decoders use for remasking. A jnp reference
(the specification) and a row-resident Pallas kernel sit behind
``implementation=``.
"""

from jaxkit.kernels.sampling._api import SampleOutput as SampleOutput
from jaxkit.kernels.sampling._api import (
    filtered_probabilities as filtered_probabilities,
)
from jaxkit.kernels.sampling._api import sample_tokens as sample_tokens
from jaxkit.kernels.sampling._reference import (
    sample_rows_reference as sample_rows_reference,
)
