"""TESS: text-informed forecasting through a temporal-primitive bottleneck, over PatchTST.

TESS (Temporal Evolution Semantic Space, ICML 2026; code: olivia3395/TESS) has an LLM read
event text and emit four numerically grounded primitives (distribution shift, volatility,
shape, lag/decay) with confidences; a confidence-aware gate weights them and the gated
primitive embeddings are prepended as prefix tokens to a PatchTST forecaster. This area
holds the schema and train-only oracle labels, the extractors (an LLM callable, a
deterministic rule lexicon, the authors' cached JSON), a JAX PatchTST with RevIN, the TESS
forecaster and its loss, and a semi-synthetic event injector with rendered text.
"""

from jaxkit.timeseries._bow import BoWForecaster as BoWForecaster
from jaxkit.timeseries._bow import bag_of_words as bag_of_words
from jaxkit.timeseries._bow import bow_forecast as bow_forecast
from jaxkit.timeseries._cache import CachedExtractions as CachedExtractions
from jaxkit.timeseries._cache import load_cache as load_cache
from jaxkit.timeseries._cache import save_cache as save_cache
from jaxkit.timeseries._extract import Confidence as Confidence
from jaxkit.timeseries._extract import Extraction as Extraction
from jaxkit.timeseries._extract import Extractor as Extractor
from jaxkit.timeseries._extract import LLMExtractor as LLMExtractor
from jaxkit.timeseries._extract import RuleExtractor as RuleExtractor
from jaxkit.timeseries._extract import answer_key as answer_key
from jaxkit.timeseries._extract import build_prompt as build_prompt
from jaxkit.timeseries._extract import confidence_features as confidence_features
from jaxkit.timeseries._extract import parse_answer as parse_answer
from jaxkit.timeseries._extract import sampled_confidence as sampled_confidence
from jaxkit.timeseries._gate import ConfidenceGate as ConfidenceGate
from jaxkit.timeseries._gate import gate_targets as gate_targets
from jaxkit.timeseries._model import EncoderLayer as EncoderLayer
from jaxkit.timeseries._model import PatchTST as PatchTST
from jaxkit.timeseries._model import RevIN as RevIN
from jaxkit.timeseries._model import RevINStats as RevINStats
from jaxkit.timeseries._oracle import Scores as Scores
from jaxkit.timeseries._oracle import Thresholds as Thresholds
from jaxkit.timeseries._oracle import fit_thresholds as fit_thresholds
from jaxkit.timeseries._oracle import oracle_labels as oracle_labels
from jaxkit.timeseries._oracle import primitive_scores as primitive_scores
from jaxkit.timeseries._schema import LEGACY_V1 as LEGACY_V1
from jaxkit.timeseries._schema import SCHEMAS as SCHEMAS
from jaxkit.timeseries._schema import V2 as V2
from jaxkit.timeseries._schema import Primitive as Primitive
from jaxkit.timeseries._schema import Schema as Schema
from jaxkit.timeseries._semisynth import DISTRACTORS as DISTRACTORS
from jaxkit.timeseries._semisynth import LEXICON_V2 as LEXICON_V2
from jaxkit.timeseries._semisynth import PHRASES_V2 as PHRASES_V2
from jaxkit.timeseries._semisynth import SemiSynthetic as SemiSynthetic
from jaxkit.timeseries._semisynth import inject_event as inject_event
from jaxkit.timeseries._semisynth import load_statsmodels as load_statsmodels
from jaxkit.timeseries._semisynth import make_semisynthetic as make_semisynthetic
from jaxkit.timeseries._semisynth import render_text as render_text
from jaxkit.timeseries._semisynth import sliding_windows as sliding_windows
from jaxkit.timeseries._tess import TESSBatch as TESSBatch
from jaxkit.timeseries._tess import TESSForecaster as TESSForecaster
from jaxkit.timeseries._tess import TESSOutput as TESSOutput
from jaxkit.timeseries._tess import fit_forecaster as fit_forecaster
from jaxkit.timeseries._tess import patchtst_forecast as patchtst_forecast
from jaxkit.timeseries._tess import tess_forecast as tess_forecast
from jaxkit.timeseries._tess import tess_loss as tess_loss
from jaxkit.timeseries._tess import tess_train_step as tess_train_step
