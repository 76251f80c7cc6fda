"""TESS primitive schemas: the four temporal primitives and their label sets, as data.

Two schemas, with label ids identical to the authors' repository (olivia3395/TESS):
``LEGACY_V1`` (the schema of the released caches) and ``V2`` (the README's schema).
"""

import dataclasses

from jaxkit import _validate

SHIFT_LABELS = ("STRONG-RISE", "MILD-RISE", "STABLE", "MILD-DROP", "STRONG-DROP")


@dataclasses.dataclass(frozen=True)
class Primitive:
    """One temporal primitive: a name, its kind and its ordered labels (id = position).

    Attributes:
      name: Primitive name as in the cache folders (``"distribution_shift"``, ...).
      kind: What it measures: ``"shift"``, ``"volatility"``, ``"shape"`` or ``"lag"``.
      labels: Label names; the label id is the index.
      neutral: Label used when a text says nothing about this primitive.
    """

    name: str
    kind: str
    labels: tuple[str, ...]
    neutral: str

    def __post_init__(self):
        _validate.one_of(("shift", "volatility", "shape", "lag"), kind=self.kind)
        if len(set(self.labels)) != len(self.labels) or len(self.labels) < 2:
            raise ValueError(f"`labels` must be >= 2 distinct names, got {self.labels!r}.")
        _validate.one_of(self.labels, neutral=self.neutral)

    def label_id(self, label: str) -> int:
        """The id of ``label`` (ValueError naming the primitive for an unknown label)."""
        try:
            return self.labels.index(label)
        except ValueError:
            raise ValueError(
                f"unknown label {label!r} for primitive `{self.name}`; expected one of "
                f"{', '.join(self.labels)}."
            ) from None


@dataclasses.dataclass(frozen=True)
class Schema:
    """An ordered set of primitives (K of them); frozen and hashable (a static argument).

    Attributes:
      name: ``"legacy_v1"`` or ``"v2"`` (or a user name).
      primitives: The K primitives, in prefix-token order.
    """

    name: str
    primitives: tuple[Primitive, ...]

    def __post_init__(self):
        kinds = [p.kind for p in self.primitives]
        if sorted(kinds) != ["lag", "shape", "shift", "volatility"]:
            raise ValueError(
                "`primitives` must hold exactly one primitive of each kind shift, volatility, "
                f"shape, lag; got kinds {kinds}."
            )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.primitives)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Number of labels of each primitive."""
        return tuple(len(p.labels) for p in self.primitives)

    def index(self, kind: str) -> int:
        """Position of the primitive of ``kind``."""
        return [p.kind for p in self.primitives].index(kind)

    def primitive(self, name: str) -> Primitive:
        """The primitive called ``name`` (ValueError for an unknown name)."""
        for p in self.primitives:
            if p.name == name:
                return p
        raise ValueError(
            f"unknown primitive {name!r} for schema `{self.name}`; expected one of "
            f"{', '.join(self.names)}."
        )


LEGACY_V1 = Schema(
    "legacy_v1",
    (
        Primitive("distribution_shift", "shift", SHIFT_LABELS, "STABLE"),
        Primitive("volatility", "volatility", ("High", "Medium", "Low"), "Medium"),
        Primitive("shape", "shape", ("Rise", "Fall", "Peak", "Recover", "Oscillate"), "Oscillate"),
        Primitive("temporal_influence", "lag", ("Immediate", "Delayed", "Sustained"), "Sustained"),
    ),
)
"""The authors' first schema: shift, volatility, shape, temporal influence (their label ids)."""

V2 = Schema(
    "v2",
    (
        Primitive("distribution_shift", "shift", SHIFT_LABELS, "STABLE"),
        Primitive("volatility_shift", "volatility", SHIFT_LABELS, "STABLE"),
        Primitive(
            "shape", "shape", ("ASCEND", "DESCEND", "PEAK", "TROUGH", "OSCILLATE"), "OSCILLATE"
        ),
        Primitive(
            "lag_decay",
            "lag",
            ("EARLY-FADE", "EARLY-PERSIST", "MID-FADE", "MID-PERSIST", "LATE", "DIFFUSE"),
            "DIFFUSE",
        ),
    ),
)
"""The authors' second schema: distribution and volatility shifts, shape, lag & decay."""

SCHEMAS = {"legacy_v1": LEGACY_V1, "v2": V2}
"""Schemas by name: ``"legacy_v1"`` and ``"v2"``."""


def check_schema(schema) -> Schema:
    """TypeError unless ``schema`` is a :class:`Schema`."""
    if not isinstance(schema, Schema):
        raise TypeError(f"`schema` must be a timeseries.Schema, got {type(schema).__name__}.")
    return schema
