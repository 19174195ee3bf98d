"""What one audit runs (:class:`AuditConfig`), checked at the boundary: every problem is an :class:`AuditError` of one
line that names the flag the user typed."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..data.table import AttributeColumn, ColumnMap

__all__ = ["AuditConfig", "AuditError", "MECHANISMS", "RELEASES", "FLAGS"]

#: ``--mechanism``: L2-Laplace noise on vectors (``--release`` slots or tokens), or privatized text (eta = --epsilon).
MECHANISMS = ("l2_laplace", "t2t", "pct2t")
#: ``--release`` of the vector mechanism: PPFT slots (k tokens pooled) or one noisy input embedding per token.
RELEASES = ("slots", "tokens")
ATTACKERS = ("mean", "slots", "mean_count", "slots_count")
TRAINING = ("unaware", "aware")

#: Config field -> the flag a user types.
FLAGS = {
    "data": "DATA",
    "columns": "--text-column",
    "split": "--split",
    "mechanism": "--mechanism",
    "release": "--release",
    "epsilons": "--epsilon",
    "k": "--k",
    "encoder": "--encoder",
    "max_tokens": "--max-tokens",
    "limit": "--limit",
    "train_limit": "--train-limit",
    "test_share": "--test-share",
    "validation": "--validation",
    "epochs": "--epochs",
    "hidden": "--hidden",
    "attackers": "--attackers",
    "training": "--training",
    "curve": "--curve",
    "seeds": "--seed",
    "threads": "--threads",
    "inverter": "--inverter",
    "inverter_epochs": "--inverter-epochs",
    "beside": "--beside",
    "out": "--out",
}


class AuditError(ValueError):
    """A bad audit setting; the message starts with the flag that sets it."""


@dataclass(frozen=True)
class AuditConfig:
    """One audit: the user's data and its columns, the mechanism and its grid, the attackers, where the report goes."""

    data: str = field(metadata={"help": "A CSV/TSV/JSON Lines/JSON/Parquet file, or a Hugging Face dataset name."})
    columns: ColumnMap = field(metadata={"help": "Which column holds the text, the attributes, label and PII."})
    out: Path = field(metadata={"help": "The report folder: report.md, figures, audit.json, results/."})
    split: str | None = field(default=None, metadata={"help": "A hub dataset's split (default train)."})
    mechanism: str = field(default="l2_laplace", metadata={"help": "l2_laplace, t2t or pct2t."})
    release: str = field(default="slots", metadata={"help": "l2_laplace: slots (PPFT payloads) or tokens."})
    epsilons: tuple[float, ...] = field(
        default=(28.0, 75.0), metadata={"help": "The grid: L2-Laplace epsilon per unit distance, or T2T's eta."}
    )
    k: int = field(default=4, metadata={"help": "Tokens pooled per slot (slots; the attacker's own encoding of text)."})
    encoder: str = field(default="default", metadata={"help": "The client's encoder ('default': all-MiniLM-L6-v2)."})
    max_tokens: int = field(default=128, metadata={"help": "tokens: each text cut to this many of its own tokens."})
    limit: int | None = field(default=300, metadata={"help": "Evaluate at most this many texts (null: all)."})
    train_limit: int | None = field(default=600, metadata={"help": "The attacker trains on at most this many texts."})
    test_share: float = field(default=0.3, metadata={"help": "The share of distinct texts evaluated (stable hash)."})
    validation: float = field(default=0.2, metadata={"help": "The attacker's share kept to choose attackers on."})
    epochs: int = field(default=60, metadata={"help": "Training epochs of each attribute attacker."})
    hidden: int = field(default=128, metadata={"help": "Width of the attackers' MLP (0: linear)."})
    attackers: tuple[str, ...] = field(default=("mean", "slots"), metadata={"help": "Attacker architectures."})
    training: tuple[str, ...] = field(default=TRAINING, metadata={"help": "unaware and/or aware."})
    curve: tuple[int, ...] | None = field(
        default=None, metadata={"help": "Validation-curve epochs below --epochs (default: a quarter and a half)."}
    )
    seeds: tuple[int, ...] = field(default=(0,), metadata={"help": "Seeds of the noise and the attackers."})
    threads: int | None = field(default=None, metadata={"help": "Torch threads while the attacks run."})
    inverter: bool = field(default=False, metadata={"help": "slots: also train the slot-token inverter (minutes)."})
    inverter_epochs: int = field(default=4, metadata={"help": "Epochs of the slot-token inverter."})
    beside: Path | None = field(
        default=None, metadata={"help": "An attribute_inference result file shown beside the audit's figures."}
    )

    def __post_init__(self) -> None:
        def fail(name: str, message: str) -> None:
            raise AuditError(f"{FLAGS[name]}: {message}")

        if not isinstance(self.data, str) or not self.data.strip():
            fail("data", "give a data file or a hub dataset name")
        if self.mechanism not in MECHANISMS:
            fail("mechanism", f"must be one of {', '.join(MECHANISMS)}, got {self.mechanism!r}")
        if self.release not in RELEASES:
            fail("release", f"must be one of {', '.join(RELEASES)}, got {self.release!r}")
        if self.mechanism != "l2_laplace" and self.release != "slots":
            fail("release", f"applies to l2_laplace; {self.mechanism} releases text")
        eps = tuple(self.epsilons)
        if not eps or any(isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 < e < math.inf for e in eps):
            fail("epsilons", f"must be numbers > 0 (e.g. 28,75), got {list(self.epsilons)}")
        if len(set(eps)) != len(eps):
            fail("epsilons", f"has repeated values: {list(eps)}")
        object.__setattr__(self, "epsilons", tuple(float(e) for e in eps))
        for name, least in (("k", 1), ("max_tokens", 1), ("epochs", 1), ("hidden", 0), ("inverter_epochs", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < least:
                fail(name, f"must be an integer >= {least}, got {v!r}")
        for name in ("limit", "train_limit", "threads"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                fail(name, f"must be an integer >= 1, got {v!r}")
        for name in ("test_share", "validation"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
                fail(name, f"must be a number in (0, 1), got {v!r}")
        self._check_lists(fail)
        if not self.columns.attributes:
            raise AuditError("--attribute: name at least one attribute, e.g. --attribute gender:categorical")
        if self.inverter and (self.mechanism != "l2_laplace" or self.release != "slots"):
            fail("inverter", "the slot-token inverter reads PPFT slots: --mechanism l2_laplace --release slots")
        if self.beside is not None and not Path(self.beside).is_file():
            fail("beside", f"no such result file {str(self.beside)!r}")

    def _check_lists(self, fail) -> None:
        for name, allowed in (("attackers", ATTACKERS), ("training", TRAINING)):
            v = tuple(getattr(self, name))
            if not v or any(x not in allowed for x in v) or len(set(v)) != len(v):
                fail(name, f"must be distinct values from {', '.join(allowed)}, got {list(v)}")
            object.__setattr__(self, name, v)
        seeds = tuple(self.seeds)
        if not seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
            fail("seeds", f"must be integers, got {list(seeds)}")
        object.__setattr__(self, "seeds", seeds)
        curve = self.curve if self.curve is not None else self.default_curve(self.epochs)
        if any(isinstance(e, bool) or not isinstance(e, int) or not 1 <= e < self.epochs for e in curve):
            fail("curve", f"epoch counts must lie in [1, --epochs={self.epochs}), got {list(curve)}")
        object.__setattr__(self, "curve", tuple(sorted(set(curve))))

    @staticmethod
    def default_curve(epochs: int) -> tuple[int, ...]:
        """A quarter and a half of the epochs (those that are at least 1 and below ``epochs``)."""
        return tuple(sorted({e for e in (epochs // 4, epochs // 2) if 1 <= e < epochs}))

    def command(self) -> str:
        """The ``textfree audit`` command line that runs this config (options at their defaults left out)."""
        import shlex

        c = self.columns
        parts = ["textfree", "audit", self.data, "--text-column", c.text]
        if c.names is not None:
            parts += ["--columns", ",".join(c.names)]
        for a in c.attributes:
            parts += ["--attribute", a.spec()]
        parts += [x for flag, v in (("--label-column", c.label), ("--pii-column", c.pii)) if v for x in (flag, v)]
        default = AuditConfig(self.data, self.columns, self.out)
        for f in fields(self):
            if f.name in ("data", "columns", "out") or getattr(self, f.name) == getattr(default, f.name):
                continue
            v = getattr(self, f.name)
            if isinstance(v, bool):
                parts.append(FLAGS[f.name])
            elif isinstance(v, tuple):
                parts += [FLAGS[f.name], ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v)]
            else:
                parts += [FLAGS[f.name], "0" if v is None else str(v)]
        return shlex.join([*parts, "--out", str(self.out)])

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AuditConfig":
        """The config :meth:`to_dict` wrote (an audit.json's ``config``)."""
        data = dict(data)
        mapping = data.pop("columns")
        columns = ColumnMap.from_dict(mapping["columns"])
        attributes = tuple(AttributeColumn.parse(a) for a in mapping["attributes"])  # specs, in the order given
        columns = dataclasses.replace(columns, attributes=attributes)
        for name in ("out", "beside"):
            data[name] = None if data.get(name) is None else Path(data[name])
        for name in ("epsilons", "attackers", "training", "curve", "seeds"):
            data[name] = None if data.get(name) is None else tuple(data[name])
        return cls(columns=columns, **data)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the result JSON."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "columns":  # the attributes as specs, a list: the order survives key-sorted JSON
                v = v.to_dict() | {"attributes": [a.spec() for a in v.attributes]}
            elif isinstance(v, Path):
                v = str(v)
            elif isinstance(v, tuple):
                v = list(v)
            out[f.name] = v
        return out
