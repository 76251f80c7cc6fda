"""WeDLM: streaming parallel decoding of a causal LM, its training losses, AR baseline."""

from jaxkit.decoding._ar import ar_generate as ar_generate
from jaxkit.decoding._common import DecodeStats as DecodeStats
from jaxkit.decoding._common import Generation as Generation
from jaxkit.decoding._losses import DualStreamBatch as DualStreamBatch
from jaxkit.decoding._losses import dual_stream_batch as dual_stream_batch
from jaxkit.decoding._losses import dual_stream_mask as dual_stream_mask
from jaxkit.decoding._losses import reorder_mlm_loss as reorder_mlm_loss
from jaxkit.decoding._losses import wedlm_loss as wedlm_loss
from jaxkit.decoding._reorder import Reordered as Reordered
from jaxkit.decoding._reorder import WindowOrder as WindowOrder
from jaxkit.decoding._reorder import commit_count as commit_count
from jaxkit.decoding._reorder import topological_reorder as topological_reorder
from jaxkit.decoding._reorder import window_order as window_order
from jaxkit.decoding._select import select_by_entropy as select_by_entropy
from jaxkit.decoding._select import token_entropy as token_entropy
from jaxkit.decoding._wedlm import WeDLMState as WeDLMState
from jaxkit.decoding._wedlm import wedlm_generate as wedlm_generate
