"""HypoSpace: validity / uniqueness / recovery of set-valued hypothesis samplers.

HypoSpace (Chen, Lin, Yuan, Zou, He, Goyal, Ong, Liu; ICML 2026; arXiv 2510.15614) scores a
sampler asked ``N`` times for a hypothesis explaining an observation set whose admissible
set ``H_O`` is exactly enumerable. Semantics follow the authors' code [C] (spec
``eval_robust.md`` §1); the closed-form expectations are ours [R].

Built: the causal-graph domain (``validate`` / ``admissible_mask``, ``enumerate_dags`` and
the packed ``enumerate_dag_ids`` for n <= 6, ``generate_collection`` in upstream order),
the Boolean domain (``enumerate_expressions``, ``validate_boolean``,
``boolean_collection``), the 3D voxel domain (``validate_voxel``, ``enumerate_admissible``,
``voxel_collection``), the metrics with upstream's ``compat`` or a ``strict`` scorer
(``metrics(valid=, counted=)``, ``evaluate(mode=)``), the samplers (``uniform_space``,
``uniform_admissible``, ``enumerative``, ``collapsed``, ``stratified``) with exact
expectations, the harness (``evaluate``, ``by_k``), the reader of the authors' dataset JSON
(``load_upstream_json``), upstream's seeded draw of the scored sets (``sample_sets``) and
the host-side LLM path for all three domains (``openai_client``; ``run_causal``,
``run_boolean``, ``run_voxel`` with their prompts and answer parsers).
"""

from jaxkit.hypospace._boolean import TOP_OPS as TOP_OPS
from jaxkit.hypospace._boolean import BooleanObs as BooleanObs
from jaxkit.hypospace._boolean import BooleanTask as BooleanTask
from jaxkit.hypospace._boolean import ExprTable as ExprTable
from jaxkit.hypospace._boolean import boolean_collection as boolean_collection
from jaxkit.hypospace._boolean import enumerate_expressions as enumerate_expressions
from jaxkit.hypospace._boolean import format_boolean_observation as format_boolean_observation
from jaxkit.hypospace._boolean import validate_boolean as validate_boolean
from jaxkit.hypospace._causal import CausalObs as CausalObs
from jaxkit.hypospace._causal import CausalTask as CausalTask
from jaxkit.hypospace._causal import admissible_mask as admissible_mask
from jaxkit.hypospace._causal import canonical_id as canonical_id
from jaxkit.hypospace._causal import enumerate_dags as enumerate_dags
from jaxkit.hypospace._causal import format_observation as format_observation
from jaxkit.hypospace._causal import from_canonical_id as from_canonical_id
from jaxkit.hypospace._causal import generate_collection as generate_collection
from jaxkit.hypospace._causal import is_dag as is_dag
from jaxkit.hypospace._causal import reachability as reachability
from jaxkit.hypospace._causal import validate as validate
from jaxkit.hypospace._dagenum import enumerate_dag_ids as enumerate_dag_ids
from jaxkit.hypospace._harness import Candidates as Candidates
from jaxkit.hypospace._harness import Report as Report
from jaxkit.hypospace._harness import SamplerSpec as SamplerSpec
from jaxkit.hypospace._harness import boolean_candidates as boolean_candidates
from jaxkit.hypospace._harness import by_k as by_k
from jaxkit.hypospace._harness import causal_candidates as causal_candidates
from jaxkit.hypospace._harness import evaluate as evaluate
from jaxkit.hypospace._harness import task_masks as task_masks
from jaxkit.hypospace._llm import LLMRun as LLMRun
from jaxkit.hypospace._llm import Usage as Usage
from jaxkit.hypospace._llm import causal_prompt as causal_prompt
from jaxkit.hypospace._llm import format_graph as format_graph
from jaxkit.hypospace._llm import openai_client as openai_client
from jaxkit.hypospace._llm import parse_causal as parse_causal
from jaxkit.hypospace._llm import run_causal as run_causal
from jaxkit.hypospace._llm_domains import boolean_prompt as boolean_prompt
from jaxkit.hypospace._llm_domains import format_structure as format_structure
from jaxkit.hypospace._llm_domains import run_boolean as run_boolean
from jaxkit.hypospace._llm_domains import run_voxel as run_voxel
from jaxkit.hypospace._llm_domains import voxel_prompt as voxel_prompt
from jaxkit.hypospace._metrics import Expected as Expected
from jaxkit.hypospace._metrics import Metrics as Metrics
from jaxkit.hypospace._metrics import enumerative as enumerative
from jaxkit.hypospace._metrics import expected_metrics as expected_metrics
from jaxkit.hypospace._metrics import metrics as metrics
from jaxkit.hypospace._metrics import uniform_admissible as uniform_admissible
from jaxkit.hypospace._metrics import uniform_space as uniform_space
from jaxkit.hypospace._parse import boolean_key as boolean_key
from jaxkit.hypospace._parse import extract_boolean as extract_boolean
from jaxkit.hypospace._parse import parse_voxel as parse_voxel
from jaxkit.hypospace._samplers import collapsed as collapsed
from jaxkit.hypospace._samplers import collapsed_probs as collapsed_probs
from jaxkit.hypospace._samplers import expected_metrics_stratified as expected_metrics_stratified
from jaxkit.hypospace._samplers import stratified as stratified
from jaxkit.hypospace._samplers import stratum_quotas as stratum_quotas
from jaxkit.hypospace._upstream import load_upstream_json as load_upstream_json
from jaxkit.hypospace._upstream import sample_sets as sample_sets
from jaxkit.hypospace._voxel import VoxelTask as VoxelTask
from jaxkit.hypospace._voxel import enumerate_admissible as enumerate_admissible
from jaxkit.hypospace._voxel import heights_from_layers as heights_from_layers
from jaxkit.hypospace._voxel import layers_from_heights as layers_from_heights
from jaxkit.hypospace._voxel import validate_voxel as validate_voxel
from jaxkit.hypospace._voxel import voxel_collection as voxel_collection
from jaxkit.hypospace._voxel import voxel_id as voxel_id
