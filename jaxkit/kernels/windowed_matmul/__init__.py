"""WBMM: windowed batch matrix multiplication from a relative-position table.

jnp reference (``_reference``), Pallas GPU/Triton kernels (``_pallas_gpu``, tested in
interpret mode on CPU) and the public API with dispatch and a custom VJP (``_api``).
"""

from jaxkit.kernels.windowed_matmul._api import (
    table_from_depthwise_kernel as table_from_depthwise_kernel,
)
from jaxkit.kernels.windowed_matmul._api import window_matrix as window_matrix
from jaxkit.kernels.windowed_matmul._api import windowed_matmul as windowed_matmul
from jaxkit.kernels.windowed_matmul._api import (
    windowed_matmul_cached as windowed_matmul_cached,
)
from jaxkit.kernels.windowed_matmul._reference import (
    relative_position_index as relative_position_index,
)
from jaxkit.kernels.windowed_matmul._reference import table_size as table_size
from jaxkit.kernels.windowed_matmul._reference import (
    windowed_matmul_reference as windowed_matmul_reference,
)
