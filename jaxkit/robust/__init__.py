"""Credal DRO with bulk-calibrated ambiguity sets (Chen, Berrett, Damoulas, Caprio, ICML 2026).

"Bulk-Calibrated Credal Ambiguity Sets: Fast, Tractable Decision Making under
Out-of-Sample Contamination" (arXiv 2601.21324). Contamination of share ``eps`` may only
live in a bulk set ``B`` that carries ``>= 1 - alpha`` of the reference mass, so the
worst-case risk is ``(1 - eps) E loss + eps sup_B loss`` [P, from the abstract]. The bulk
calibrators, the closed-form sups, the tail term, the newsvendor minimiser and the conic
forms are our reconstruction [R] (the paper's text and code were not accessible); each
is a pluggable function so the paper's exact rules can replace it.

Pieces: bulk sets and support functions (``Interval``, ``Box``, ``Ellipsoid``/``ball``,
``Hull``, ``Union``; ``support``, ``contains``), calibrators (``calibrate_*``),
expectations (``upper_expectation``, ``lower_expectation``, ``huber_upper_expectation``,
``credal_risk``, ``tail_bound``), loss families (``newsvendor``, ``lad``, ``squared``,
``huber``, ``hinge``, ``logistic``, ``piecewise_linear``), the objective
(``credal_objective``, ``make_objective``), solvers (``newsvendor_closed_form``, ``fit``;
host-side ``fit_conic``/``build_conic`` through cvxpy + Clarabel) and references
(``empirical``, ``parametric_draws``, ``posterior_predictive``).
"""

from jaxkit.robust._bulk import Box as Box
from jaxkit.robust._bulk import Ellipsoid as Ellipsoid
from jaxkit.robust._bulk import Hull as Hull
from jaxkit.robust._bulk import Interval as Interval
from jaxkit.robust._bulk import Union as Union
from jaxkit.robust._bulk import ball as ball
from jaxkit.robust._bulk import center as center
from jaxkit.robust._bulk import contains as contains
from jaxkit.robust._bulk import support as support
from jaxkit.robust._calibrate import calibrate_ball as calibrate_ball
from jaxkit.robust._calibrate import calibrate_box as calibrate_box
from jaxkit.robust._calibrate import calibrate_cells as calibrate_cells
from jaxkit.robust._calibrate import calibrate_ellipsoid as calibrate_ellipsoid
from jaxkit.robust._calibrate import calibrate_hull as calibrate_hull
from jaxkit.robust._calibrate import calibrate_interval as calibrate_interval
from jaxkit.robust._conic import ConicProblem as ConicProblem
from jaxkit.robust._conic import ConicResult as ConicResult
from jaxkit.robust._conic import build_conic as build_conic
from jaxkit.robust._conic import fit_conic as fit_conic
from jaxkit.robust._losses import LinearParams as LinearParams
from jaxkit.robust._losses import hinge as hinge
from jaxkit.robust._losses import huber as huber
from jaxkit.robust._losses import lad as lad
from jaxkit.robust._losses import logistic as logistic
from jaxkit.robust._losses import newsvendor as newsvendor
from jaxkit.robust._losses import piecewise_linear as piecewise_linear
from jaxkit.robust._losses import squared as squared
from jaxkit.robust._objective import credal_risk as credal_risk
from jaxkit.robust._objective import huber_upper_expectation as huber_upper_expectation
from jaxkit.robust._objective import lower_expectation as lower_expectation
from jaxkit.robust._objective import tail_bound as tail_bound
from jaxkit.robust._objective import upper_expectation as upper_expectation
from jaxkit.robust._references import Reference as Reference
from jaxkit.robust._references import empirical as empirical
from jaxkit.robust._references import parametric_draws as parametric_draws
from jaxkit.robust._references import posterior_predictive as posterior_predictive
from jaxkit.robust._solve import FitResult as FitResult
from jaxkit.robust._solve import NewsvendorSolution as NewsvendorSolution
from jaxkit.robust._solve import credal_objective as credal_objective
from jaxkit.robust._solve import fit as fit
from jaxkit.robust._solve import make_objective as make_objective
from jaxkit.robust._solve import newsvendor_closed_form as newsvendor_closed_form
