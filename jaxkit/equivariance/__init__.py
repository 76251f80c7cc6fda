"""RECM: relaxed equivariant layers whose per-layer relaxation level follows a recurrence.

Groups and projections (C_n / SO(2) on R^2 vectors, the regular C_4 representation,
O(3) irreps through e3nn-jax), relaxed equinox layers, the RECM modulation as an optax
transform, symmetry-gap estimators and the CR / residual-pathway baselines.
The RECM update rule and layer form are reconstructions (see each docstring).
"""

from jaxkit.equivariance._c4 import c4_conv_reynolds as c4_conv_reynolds
from jaxkit.equivariance._c4 import c4_image_act as c4_image_act
from jaxkit.equivariance._c4 import c4_image_actions as c4_image_actions
from jaxkit.equivariance._c4 import c4_kernel_transform as c4_kernel_transform
from jaxkit.equivariance._data import MD17 as MD17
from jaxkit.equivariance._data import load_geom as load_geom
from jaxkit.equivariance._data import load_md17 as load_md17
from jaxkit.equivariance._data import read_geom_pickle as read_geom_pickle
from jaxkit.equivariance._gap import LinearGap as LinearGap
from jaxkit.equivariance._gap import MMDGap as MMDGap
from jaxkit.equivariance._gap import linear_gap as linear_gap
from jaxkit.equivariance._gap import mmd_gap as mmd_gap
from jaxkit.equivariance._groups import Group as Group
from jaxkit.equivariance._groups import GroupSample as GroupSample
from jaxkit.equivariance._groups import c4_regular as c4_regular
from jaxkit.equivariance._groups import cyclic_rot2d as cyclic_rot2d
from jaxkit.equivariance._groups import finite_group as finite_group
from jaxkit.equivariance._groups import haar_sample as haar_sample
from jaxkit.equivariance._groups import o3_irreps as o3_irreps
from jaxkit.equivariance._groups import so2_rot2d as so2_rot2d
from jaxkit.equivariance._layers import RECMe3nnLinear as RECMe3nnLinear
from jaxkit.equivariance._layers import RECMGroupConvC4 as RECMGroupConvC4
from jaxkit.equivariance._layers import RECMLinear as RECMLinear
from jaxkit.equivariance._layers import normalized_complement as normalized_complement
from jaxkit.equivariance._project import complement as complement
from jaxkit.equivariance._project import equivariance_error as equivariance_error
from jaxkit.equivariance._project import equivariant_basis as equivariant_basis
from jaxkit.equivariance._project import reynolds as reynolds
from jaxkit.equivariance._project import reynolds_mc as reynolds_mc
from jaxkit.equivariance._transform import RECMState as RECMState
from jaxkit.equivariance._transform import cr_triangle_schedule as cr_triangle_schedule
from jaxkit.equivariance._transform import (
    lie_derivative_penalty as lie_derivative_penalty,
)
from jaxkit.equivariance._transform import recm_modulation as recm_modulation
from jaxkit.equivariance._transform import recm_optimizer as recm_optimizer
from jaxkit.equivariance._transform import recm_update_rule as recm_update_rule
from jaxkit.equivariance._transform import relaxation_levels as relaxation_levels
from jaxkit.equivariance._transform import rpp_penalty as rpp_penalty
from jaxkit.equivariance._transform import set_theta as set_theta
from jaxkit.equivariance._transform import theta_labels as theta_labels
