"""Load and save extractions in the authors' cached JSON format (host side, not jitted).

Layout of the released caches (olivia3395/TESS ``data_cache/gate``):
``<root>/<dataset>/<primitive>/<split>.json``, each a list of records with the fields
``sample_id, pred_label, gt_label, gate_target, label_id, gt_label_id, margin,
self_consistency, parse_rate, valid_count, num_samples, sample_probs`` (plus provenance
fields, kept out of the arrays). Released caches load directly.
"""

import json
import os
from typing import NamedTuple

import numpy as np

from jaxkit import _validate
from jaxkit.timeseries._schema import LEGACY_V1, Schema, check_schema


class CachedExtractions(NamedTuple):
    """Extractions of N windows for the K primitives of a schema (NumPy).

    Attributes:
      sample_id: ``int64[N]``, sorted.
      label_ids: ``int32[N, K]`` predicted labels.
      gt_label_ids: ``int32[N, K]`` oracle labels.
      gate_target: ``int32[N, K]`` ``1[pred == gt]``.
      margin, self_consistency, parse_rate: ``float64[N, K]``.
      valid_count, num_samples: ``int32[N, K]``.
      probs: K arrays ``float64[N, |C_k|]`` in label-id order.
    """

    sample_id: np.ndarray
    label_ids: np.ndarray
    gt_label_ids: np.ndarray
    gate_target: np.ndarray
    margin: np.ndarray
    self_consistency: np.ndarray
    parse_rate: np.ndarray
    valid_count: np.ndarray
    num_samples: np.ndarray
    probs: tuple[np.ndarray, ...]


_FLOATS = ("margin", "self_consistency", "parse_rate")
_INTS = ("valid_count", "num_samples", "gate_target")


def _path(root, dataset, primitive, split):
    return os.path.join(str(root), dataset, primitive, f"{split}.json")


def load_cache(
    root: str, *, dataset: str, split: str, schema: Schema = LEGACY_V1
) -> CachedExtractions:
    """Read ``<root>/<dataset>/<primitive>/<split>.json`` for every primitive of ``schema``.

    Host-side; not jitted; never downloads.

    Raises:
      FileNotFoundError: a primitive's file is absent (the message gives the layout).
      ValueError: an unknown label name, a ``label_id`` that disagrees with its label,
        different sample ids across primitives, an empty file.
    """
    schema = check_schema(schema)
    per = []
    for p in schema.primitives:
        path = _path(root, dataset, p.name, split)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"TESS cache not found: expected {path} (layout <root>/<dataset>/<primitive>/"
                f"<split>.json for primitives {', '.join(schema.names)}, as in the authors' "
                "data_cache/gate folder). jaxkit never downloads; use RuleExtractor or "
                "LLMExtractor and save_cache to make one."
            )
        with open(path) as f:
            recs = json.load(f)
        if not isinstance(recs, list) or not recs:
            raise ValueError(f"{path}: expected a non-empty JSON list of records.")
        recs = sorted(recs, key=lambda r: int(r["sample_id"]))
        for r in recs:
            lid = p.label_id(r["pred_label"])
            p.label_id(r["gt_label"])
            if "label_id" in r and int(r["label_id"]) != lid:
                raise ValueError(
                    f"{path}: sample {r['sample_id']} has label_id {r['label_id']} but "
                    f"pred_label {r['pred_label']!r} (id {lid}) in primitive `{p.name}`."
                )
            for lab in r.get("sample_probs", {}):
                p.label_id(lab)
        per.append(recs)
    ids = [np.asarray([int(r["sample_id"]) for r in recs]) for recs in per]
    for p, i in zip(schema.primitives[1:], ids[1:], strict=True):
        if not np.array_equal(i, ids[0]):
            raise ValueError(
                f"primitive `{p.name}` has different sample ids from `{schema.primitives[0].name}`."
            )

    def col(fn, dtype):
        return np.asarray(
            [[fn(r, p) for r in recs] for p, recs in zip(schema.primitives, per, strict=True)],
            dtype,
        ).T

    out = {
        "label_ids": col(lambda r, p: p.label_id(r["pred_label"]), np.int32),
        "gt_label_ids": col(lambda r, p: p.label_id(r["gt_label"]), np.int32),
    }
    for name in _FLOATS:
        out[name] = col(lambda r, p, n=name: float(r[n]), np.float64)
    for name in _INTS:
        out[name] = col(lambda r, p, n=name: int(r[n]), np.int32)
    probs = tuple(
        np.asarray([[float(r["sample_probs"].get(lab, 0.0)) for lab in p.labels] for r in recs])
        for p, recs in zip(schema.primitives, per, strict=True)
    )
    return CachedExtractions(sample_id=ids[0], probs=probs, **out)


def _check_cache(data, schema: Schema) -> None:
    """``data`` a :class:`CachedExtractions` of ``schema`` (host-side, before any write).

    Dtypes and shapes (a ``TypeError`` naming the field, ``data.label_ids``): ``sample_id``
    integer ``[N]``, the other fields ``[N, K]`` (integer, or real for the floats), ``probs``
    K arrays ``[N, |C_k|]``. Values (a ``ValueError``): label ids in ``[0, |C_k|)`` (a
    negative one would name another label), ``gate_target`` 0 or 1, ``valid_count`` in
    ``[0, num_samples]``.
    """
    if not isinstance(data, CachedExtractions):
        raise TypeError(f"`data` must be a CachedExtractions, got {type(data).__name__}.")
    k = len(schema.primitives)
    _validate.integer(data.sample_id, name="data.sample_id")
    _validate.ndim(data.sample_id, 1, name="data.sample_id")
    n = np.shape(data.sample_id)[0]
    for name in CachedExtractions._fields[1:-1]:
        a = getattr(data, name)
        (_validate.real if name in _FLOATS else _validate.integer)(a, name=f"data.{name}")
        _validate.shape(a, (n, k), name=f"data.{name}")
    if not isinstance(data.probs, tuple | list) or len(data.probs) != k:
        raise TypeError(f"`data.probs` must hold {k} arrays (one per primitive of `schema`).")
    for j, (p, a) in enumerate(zip(schema.primitives, data.probs, strict=True)):
        _validate.real(a, name=f"data.probs[{j}]")
        _validate.shape(a, (n, len(p.labels)), name=f"data.probs[{j}]")
    sizes = np.asarray(schema.sizes)
    for name in ("label_ids", "gt_label_ids"):
        a = np.asarray(getattr(data, name))
        if np.any((a < 0) | (a >= sizes)):
            raise ValueError(
                f"`data.{name}` must lie in [0, |C_k|) in column k (sizes {schema.sizes})."
            )
    if np.any((np.asarray(data.gate_target) != 0) & (np.asarray(data.gate_target) != 1)):
        raise ValueError("`data.gate_target` must be 0 or 1.")
    valid, total = np.asarray(data.valid_count), np.asarray(data.num_samples)
    if np.any((valid < 0) | (valid > total)):
        raise ValueError("`data.valid_count` must lie in [0, `data.num_samples`].")


def save_cache(
    root: str,
    data: CachedExtractions,
    *,
    dataset: str,
    split: str,
    schema: Schema = LEGACY_V1,
    provenance: dict | None = None,
) -> list[str]:
    """Write ``data`` in the authors' format (one file per primitive); returns the paths.

    ``provenance`` (e.g. ``{"model": ..., "backend": ...}``) is copied into every record.
    Host-side; not jitted.

    Raises:
      TypeError: a field of ``data`` of another dtype or shape (``[N]``, ``[N, K]``).
      ValueError: label ids outside their primitive's labels, ``gate_target`` not 0/1,
        ``valid_count`` outside ``[0, num_samples]``.
    """
    schema = check_schema(schema)
    _check_cache(data, schema)
    paths = []
    for j, p in enumerate(schema.primitives):
        recs = []
        for i, sid in enumerate(data.sample_id):
            pred, gt = p.labels[int(data.label_ids[i, j])], p.labels[int(data.gt_label_ids[i, j])]
            recs.append(
                {
                    "dataset": dataset,
                    "split": split,
                    "sample_id": int(sid),
                    "primitive": p.name,
                    "schema": schema.name,
                    "pred_label": pred,
                    "gt_label": gt,
                    "gate_target": int(data.gate_target[i, j]),
                    "label_id": int(data.label_ids[i, j]),
                    "gt_label_id": int(data.gt_label_ids[i, j]),
                    **{n: float(getattr(data, n)[i, j]) for n in _FLOATS},
                    "valid_count": int(data.valid_count[i, j]),
                    "num_samples": int(data.num_samples[i, j]),
                    "sample_probs": {
                        lab: float(data.probs[j][i, c]) for c, lab in enumerate(p.labels)
                    },
                    "margin_type": "sampled_self_consistency_margin",
                    **(provenance or {}),
                }
            )
        path = _path(root, dataset, p.name, split)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(recs, f, indent=2)
        paths.append(path)
    return paths
