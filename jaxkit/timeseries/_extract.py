"""Primitive extraction from text (host side, not jitted): prompts, confidence, extractors.

An extractor maps ``(text, history, schema, key)`` to an :class:`Extraction`: one label per
primitive with its smoothed sample probabilities, the sampled self-consistency margin
``log p1 - log p2``, the self-consistency and the parse rate [C, repo caches]. Two are
provided: :class:`LLMExtractor` around a user-supplied ``generate_fn(prompt, seed) -> str``
(transformers, vLLM, an HTTP client; jaxkit never downloads a model), and the deterministic
:class:`RuleExtractor` (phrase lexicon -> label votes). Extractors never see the future
window: :func:`build_prompt` takes the history and the text only.
"""

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, Protocol

import jax
import numpy as np

from jaxkit import _validate
from jaxkit.timeseries._schema import Primitive, Schema, check_schema

EPS = 1e-3


class Extraction(NamedTuple):
    """Extracted primitives of one window (NumPy, host side).

    Attributes:
      label_ids: ``int32[K]`` predicted label per primitive (argmax of ``probs``).
      probs: K arrays, ``probs[k]`` of shape ``[|C_k|]`` (smoothed sample frequencies).
      margin: ``[K]`` ``log p1 - log p2``.
      self_consistency: ``[K]`` ``count_top / n_valid`` (0 when nothing parsed).
      parse_rate: ``[K]`` ``n_valid / n_samples``.
    """

    label_ids: np.ndarray
    probs: tuple[np.ndarray, ...]
    margin: np.ndarray
    self_consistency: np.ndarray
    parse_rate: np.ndarray


class Confidence(NamedTuple):
    """Confidence of one primitive from its sampled answers (see :func:`sampled_confidence`)."""

    label_id: int
    probs: np.ndarray
    margin: float
    self_consistency: float
    parse_rate: float
    valid_count: int
    num_samples: int


def sampled_confidence(
    answers: Sequence[str | None], primitive: Primitive, *, eps: float = EPS
) -> Confidence:
    """Smoothed probabilities and margin of sampled answers (``None`` = unparsed) [C].

    ``p(c) = (count_c + eps) / (n_valid + |C| eps)``, label = argmax (first on ties),
    ``margin = log p1 - log p2`` (4/4 agreement: 8.294299608857235; 3/1:
    1.0979460661251466; 2/2: 0), ``self_consistency = count_top / n_valid``,
    ``parse_rate = n_valid / n_samples``. Python floats: the values equal the cached ones
    exactly. Host-side; not jitted.

    Raises:
      ValueError: an answer that is not a label of ``primitive``; ``eps`` <= 0.
    """
    _validate.positive(eps=eps)
    counts = [0] * len(primitive.labels)
    for a in answers:
        if a is not None:
            counts[primitive.label_id(a)] += 1
    n_valid, c = sum(counts), len(counts)
    probs = [(k + eps) / (n_valid + c * eps) for k in counts]
    order = sorted(range(c), key=lambda i: (-probs[i], i))
    margin = math.log(probs[order[0]]) - math.log(probs[order[1]])
    n = len(answers)
    return Confidence(
        label_id=order[0],
        probs=np.asarray(probs),
        margin=margin,
        self_consistency=counts[order[0]] / n_valid if n_valid else 0.0,
        parse_rate=n_valid / n if n else 0.0,
        valid_count=n_valid,
        num_samples=n,
    )


def _pack(confs: Sequence[Confidence]) -> Extraction:
    return Extraction(
        label_ids=np.asarray([c.label_id for c in confs], np.int32),
        probs=tuple(c.probs for c in confs),
        margin=np.asarray([c.margin for c in confs], np.float32),
        self_consistency=np.asarray([c.self_consistency for c in confs], np.float32),
        parse_rate=np.asarray([c.parse_rate for c in confs], np.float32),
    )


N_CONF_FEATURES = 4


def confidence_features(extractions: Sequence[Extraction]) -> tuple[np.ndarray, np.ndarray]:
    """Stack extractions into the model's inputs (host-side).

    Returns ``label_ids int32[N, K]`` and confidence features ``float32[N, K, 4]`` =
    (margin, self-consistency, parse rate, entropy of ``probs``), the gate's inputs [R].

    Raises:
      TypeError: an item not an :class:`Extraction`, or a field of the wrong rank, length
        or dtype (``label_ids`` integer ``[K]``, K ``probs`` ``[|C_k|]`` with the label
        counts of ``extractions[0]``, ``[K]`` scores), naming it (``extractions[1].margin``).
      ValueError: ``label_ids[k]`` outside ``[0, |C_k|)``; no extraction.
    """
    if len(extractions) == 0:
        raise ValueError("`extractions` must hold >= 1 Extraction.")
    sizes = None
    for i, e in enumerate(extractions):
        sizes = _check_extraction(e, sizes, name=f"extractions[{i}]")
    ids = np.stack([e.label_ids for e in extractions]).astype(np.int32)
    ent = np.asarray(
        [[-float(np.sum(p * np.log(p))) for p in e.probs] for e in extractions], np.float32
    )
    feats = np.stack(
        [
            np.stack([e.margin for e in extractions]),
            np.stack([e.self_consistency for e in extractions]),
            np.stack([e.parse_rate for e in extractions]),
            ent,
        ],
        -1,
    ).astype(np.float32)
    return ids, feats


def _check_extraction(e, sizes: tuple[int, ...] | None, *, name: str) -> tuple[int, ...]:
    """Host-side checks of one :class:`Extraction` named ``name``; returns its ``|C_k|``.

    ``sizes``: the label counts the extraction's ``probs`` must have (``None``: any).
    """
    if not isinstance(e, Extraction):
        raise TypeError(f"`{name}` must be an Extraction, got {type(e).__name__}.")
    _validate.integer(e.label_ids, name=f"{name}.label_ids")
    _validate.ndim(e.label_ids, 1, name=f"{name}.label_ids")
    k = np.shape(e.label_ids)[0]
    if not isinstance(e.probs, tuple | list) or len(e.probs) != k:
        raise TypeError(f"`{name}.probs` must hold K = {k} arrays (one per `label_ids` entry).")
    for j, p in enumerate(e.probs):
        _validate.ndim(p, 1, name=f"{name}.probs[{j}]")
    got = tuple(int(np.shape(p)[0]) for p in e.probs)
    if sizes is not None and got != sizes:
        raise TypeError(
            f"`{name}.probs` must have the label counts {sizes} of `extractions[0].probs`, "
            f"got {got}."
        )
    for field in ("margin", "self_consistency", "parse_rate"):
        _validate.shape(getattr(e, field), (k,), name=f"{name}.{field}")
    ids = np.asarray(e.label_ids)
    bad = (ids < 0) | (ids >= np.asarray(got, np.int64))
    if bad.any():
        j = int(np.argmax(bad))
        raise ValueError(
            f"`{name}.label_ids` must lie in [0, |C_k|); entry {j} is {ids[j]} with "
            f"{got[j]} labels."
        )
    return got


def answer_key(primitive: Primitive) -> str:
    """The final-line key of a primitive's answer, e.g. ``"Distribution Shift"``."""
    return primitive.name.replace("_", " ").title()


_DEFINITIONS = {
    "shift": "the change of the future mean level relative to the past window",
    "volatility": "the change of future variability relative to the past window",
    "shape": "the overall trajectory shape of the future window",
    "lag": "when the text's impact arrives and whether it fades or persists",
}


def build_prompt(
    primitive: Primitive,
    history: np.ndarray,
    text: str,
    *,
    role: str = "time-series analyst",
    template: str | None = None,
) -> str:
    """The structured extraction prompt of one primitive [C for the protocol].

    Role, the past values as context only, the text, an explicit prohibition on using
    future values, one qualitative analysis line per future step, then a final line
    ``<Key>: <label>``. The future window is not an argument: a prompt cannot leak it.
    ``template`` (optional) is formatted with ``role, history, text, key, labels,
    definition``. Host-side.
    """
    hist = np.asarray(history, np.float64).reshape(-1)
    if not np.all(np.isfinite(hist)):
        raise ValueError("`history` must be finite (no NaN or inf).")
    fields = {
        "role": role,
        "history": ", ".join(f"{v:.4g}" for v in hist),
        "text": text,
        "key": answer_key(primitive),
        "labels": ", ".join(primitive.labels),
        "definition": _DEFINITIONS[primitive.kind],
    }
    if template is not None:
        return template.format(**fields)
    return (
        "You are a {role}.\n"
        "Past values (context only): {history}\n"
        "Text: {text}\n"
        "Do not use or guess any future ground-truth values; reason from the text only.\n"
        "Write one short qualitative analysis line per future step (Step1: Analysis: ..., "
        "Step2: ..., no numbers), then a final line '{key}: <label>', where the label is one "
        "of {labels} and describes {definition}."
    ).format(**fields)


def parse_answer(output: str, primitive: Primitive) -> str | None:
    """The label of the last ``<Key>: <label>`` line after the first ``Step1``.

    Case-insensitive; ``None`` if there is none or it is not a known label.
    """
    start = output.find("Step1")
    body = output[start:] if start >= 0 else output
    found = re.findall(rf"{re.escape(answer_key(primitive))}\s*:\s*([A-Za-z][A-Za-z-]*)", body)
    if not found:
        return None
    lower = {lab.lower(): lab for lab in primitive.labels}
    return lower.get(found[-1].lower())


def _check_call(text, history) -> np.ndarray | None:
    """An extractor's ``text`` (a string) and ``history`` (``None`` or one window ``[L]``).

    ``history`` comes back as a float64 NumPy array (a list of numbers is taken, as NumPy
    takes it). TypeError naming the argument otherwise.
    """
    if not isinstance(text, str):
        raise TypeError(f"`text` must be a string, got {type(text).__name__} {text!r:.80}.")
    if history is None:
        return None
    h = _validate.host_real(history, name="history", what="a real array [L]")
    if h.ndim != 1:
        raise TypeError(
            f"`history` must have rank 1 [L] (one history window), got shape {h.shape}."
        )
    return h


class Extractor(Protocol):
    """``extractor(text, history, schema, *, key) -> Extraction``."""

    def __call__(
        self, text: str, history: np.ndarray, schema: Schema, *, key: jax.Array
    ) -> Extraction: ...


class LLMExtractor:
    """Sampled LLM extraction through a user-supplied ``generate_fn``.

    ``n_samples`` answers per primitive, each retried up to ``max_retries`` times on a
    parse failure; confidence by :func:`sampled_confidence`.

    ``generate_fn(prompt, seed) -> str`` is user supplied (a frozen LLM decoding at the
    temperature/top-p it chooses; the authors used Qwen3-8B, temperature 0.7, top-p 0.8,
    512 new tokens). Host-side; not jitted.
    """

    def __init__(
        self,
        generate_fn: Callable[[str, int], str],
        *,
        n_samples: int = 4,
        max_retries: int = 5,
        eps: float = EPS,
        role: str = "time-series analyst",
        template: str | None = None,
    ):
        if not callable(generate_fn):
            raise TypeError(f"`generate_fn` must be callable, got {type(generate_fn).__name__}.")
        self.generate_fn = generate_fn
        self.n_samples = _validate.python_int(n_samples, name="n_samples", minimum=1)
        self.max_retries = _validate.python_int(max_retries, name="max_retries", minimum=0)
        _validate.positive(eps=eps)
        self.eps, self.role, self.template = float(eps), role, template

    def __call__(
        self, text: str, history: np.ndarray, schema: Schema, *, key: jax.Array
    ) -> Extraction:
        """Extract every primitive of ``schema`` from ``text`` and one ``history [L]``.

        Raises:
          TypeError: ``text`` not a string, ``history`` not a real ``[L]`` array, ``key``
            not a PRNG key, a bad ``schema``.
          ValueError: a NaN or inf in ``history``.
        """
        history = _check_call(text, history)
        if history is None:
            raise TypeError("`history` must be a real array [L], got None.")
        schema = check_schema(schema)
        _validate.is_key(key)
        k, n, r = len(schema.primitives), self.n_samples, self.max_retries + 1
        seeds = np.asarray(jax.random.randint(key, (k, n, r), 0, 2**31 - 1))
        confs = []
        for i, p in enumerate(schema.primitives):
            prompt = build_prompt(p, history, text, role=self.role, template=self.template)
            answers = []
            for j in range(n):
                ans = None
                for t in range(r):
                    ans = parse_answer(self.generate_fn(prompt, int(seeds[i, j, t])), p)
                    if ans is not None:
                        break
                answers.append(ans)
            confs.append(sampled_confidence(answers, p, eps=self.eps))
        return _pack(confs)


class RuleExtractor:
    """Deterministic extraction: phrase lexicon -> label votes per primitive.

    ``lexicon[primitive_name][label]`` is a sequence of lower-case phrases; each
    occurrence in the lower-cased text is one vote, and the votes act as sampled answers
    in :func:`sampled_confidence` (same smoothing and margin). A primitive with no vote
    gets its ``neutral`` label with parse rate 0. Host-side; not jitted.
    """

    def __init__(self, lexicon: Mapping[str, Mapping[str, Sequence[str]]], *, eps: float = EPS):
        if not isinstance(lexicon, Mapping):
            raise TypeError(f"`lexicon` must be a mapping, got {type(lexicon).__name__}.")
        _validate.positive(eps=eps)
        self.lexicon = {p: {lab: tuple(v) for lab, v in d.items()} for p, d in lexicon.items()}
        self.eps = float(eps)

    def __call__(
        self, text: str, history: np.ndarray | None, schema: Schema, *, key: jax.Array | None = None
    ) -> Extraction:
        """Extract every primitive of ``schema`` from ``text`` (``history`` and ``key`` unused).

        ``history`` (``None`` or one window ``[L]``) and ``key`` are taken for the
        :class:`Extractor` interface and checked, not read.

        Raises:
          TypeError: ``text`` not a string, ``history`` neither ``None`` nor a real ``[L]``
            array, ``key`` neither ``None`` nor a PRNG key, a bad ``schema``.
          ValueError: a lexicon entry missing for a primitive or naming an unknown label.
        """
        _check_call(text, history)
        if key is not None:  # taken for the Extractor interface; a seed is still a mistake
            _validate.is_key(key)
        del history, key  # deterministic, text only
        schema = check_schema(schema)
        low = text.lower()
        confs = []
        for p in schema.primitives:
            table = self.lexicon.get(p.name)
            if table is None:
                raise ValueError(f"`lexicon` has no entry for primitive `{p.name}`.")
            votes: list[str | None] = []
            for lab, phrases in table.items():
                p.label_id(lab)  # unknown labels raise, naming the primitive
                votes += [lab] * sum(low.count(ph.lower()) for ph in phrases)
            if not votes:
                c = sampled_confidence([p.neutral], p, eps=self.eps)
                c = c._replace(parse_rate=0.0, self_consistency=0.0, margin=0.0)
                c = c._replace(probs=np.full(len(p.labels), 1.0 / len(p.labels)))
            else:
                c = sampled_confidence(votes, p, eps=self.eps)
            confs.append(c)
        return _pack(confs)
