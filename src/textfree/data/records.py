"""Frozen record types returned by every loader.

* :class:`MCQARecord` - multiple-choice QA with a private ``context`` (Pri-DDXPlus, Pri-SLJA, CommonsenseQA, ARC);
* :class:`TextRecord` - single text with a label (SST-2, CoLA, Trustpilot);
* :class:`PairRecord` - text pair with a label (RTE, MRPC, QQP);
* :class:`InstructRecord` - instruction / input / output (Alpaca, LIMA, GSM8K);
* :class:`PIIRecord` - text with its PII strings and character spans (PUPA, Presidio).

Records are frozen (fields cannot be reassigned) and validated in ``__post_init__``; a bad value raises
``ValueError``. Loaders re-raise it as :class:`~textfree.data.errors.DataError` with file and line.
The list/dict fields are still mutable containers and records are therefore not hashable; use ``record.id``
as a key. Every record has an ``attributes`` dict for dataset-specific extras (age, sex, labels, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["MCQARecord", "TextRecord", "PairRecord", "InstructRecord", "PIIRecord", "Label"]

Label = int | str | None


def _require_str(owner: str, name: str, value: Any, *, allow_empty: bool = False) -> None:
    if not isinstance(value, str):
        raise ValueError(f"{owner}.{name} must be a str, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise ValueError(f"{owner}.{name} must be a non-empty string")


def _require_dict(owner: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"{owner}.attributes must be a dict, got {type(value).__name__}")


def _require_label(owner: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | str)):
        raise ValueError(f"{owner}.label must be int, str or None, got {type(value).__name__}")


@dataclass(frozen=True)
class MCQARecord:
    """A multiple-choice question whose ``context`` is the private part of the prompt.

    Attributes:
        id: stable, unique identifier (used by the deterministic split).
        context: private description (patient history, case facts); may be empty for public QA sets.
        question: the question asked, e.g. ``"What is the likely diagnosis?"``.
        options: at least two non-empty option texts (duplicates allowed: CommonsenseQA has some).
        answer_index: index of the gold option in ``options``.
        attributes: dataset-specific extras (age, sex, symptoms, private atoms, option labels, ...).
    """

    id: str
    context: str
    question: str
    options: list[str]
    answer_index: int
    attributes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require_str("MCQARecord", "id", self.id)
        _require_str("MCQARecord", "context", self.context, allow_empty=True)
        _require_str("MCQARecord", "question", self.question)
        if not isinstance(self.options, list | tuple):
            raise ValueError(f"MCQARecord.options must be a list, got {type(self.options).__name__}")
        object.__setattr__(self, "options", list(self.options))
        if len(self.options) < 2:
            raise ValueError(f"MCQARecord needs at least 2 options, got {len(self.options)}")
        for i, option in enumerate(self.options):
            _require_str("MCQARecord", f"options[{i}]", option)
        if isinstance(self.answer_index, bool) or not isinstance(self.answer_index, int):
            raise ValueError("MCQARecord.answer_index must be an int")
        if not 0 <= self.answer_index < len(self.options):
            raise ValueError(
                f"MCQARecord.answer_index {self.answer_index} out of range for {len(self.options)} options"
            )
        _require_dict("MCQARecord", self.attributes)

    @property
    def answer(self) -> str:
        """The gold option text."""
        return self.options[self.answer_index]


@dataclass(frozen=True)
class TextRecord:
    """A single text with an optional label (``text`` may be empty: a few Trustpilot reviews are)."""

    id: str
    text: str
    label: Label = None
    attributes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require_str("TextRecord", "id", self.id)
        _require_str("TextRecord", "text", self.text, allow_empty=True)
        _require_label("TextRecord", self.label)
        _require_dict("TextRecord", self.attributes)


@dataclass(frozen=True)
class PairRecord:
    """A text pair with an optional label (entailment, paraphrase, duplicate question)."""

    id: str
    text_a: str
    text_b: str
    label: Label = None
    attributes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require_str("PairRecord", "id", self.id)
        _require_str("PairRecord", "text_a", self.text_a, allow_empty=True)
        _require_str("PairRecord", "text_b", self.text_b, allow_empty=True)
        _require_label("PairRecord", self.label)
        _require_dict("PairRecord", self.attributes)


@dataclass(frozen=True)
class InstructRecord:
    """An instruction-following example (alpaca-style keys); ``input`` is often empty."""

    id: str
    instruction: str
    input: str
    output: str
    attributes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require_str("InstructRecord", "id", self.id)
        _require_str("InstructRecord", "instruction", self.instruction)
        _require_str("InstructRecord", "input", self.input, allow_empty=True)
        _require_str("InstructRecord", "output", self.output, allow_empty=True)
        _require_dict("InstructRecord", self.attributes)


@dataclass(frozen=True)
class PIIRecord:
    """A text with its PII strings and ``(start, end, entity_type)`` character spans (end exclusive).

    Spans are sorted by ``(start, end)``; they may overlap when one PII string contains another.
    """

    id: str
    text: str
    pii: list[str]
    spans: list[tuple[int, int, str]]
    attributes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require_str("PIIRecord", "id", self.id)
        _require_str("PIIRecord", "text", self.text, allow_empty=True)
        if not isinstance(self.pii, list | tuple):
            raise ValueError("PIIRecord.pii must be a list of strings")
        object.__setattr__(self, "pii", list(self.pii))
        for i, item in enumerate(self.pii):
            _require_str("PIIRecord", f"pii[{i}]", item)
        if not isinstance(self.spans, list | tuple):
            raise ValueError("PIIRecord.spans must be a list of (start, end, label) tuples")
        spans: list[tuple[int, int, str]] = []
        for i, span in enumerate(self.spans):
            if len(span) != 3:
                raise ValueError(f"PIIRecord.spans[{i}] must be (start, end, label)")
            start, end, label = span
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
                raise ValueError(f"PIIRecord.spans[{i}] offsets must be ints")
            if not 0 <= start <= end <= len(self.text):
                raise ValueError(f"PIIRecord.spans[{i}] = ({start}, {end}) outside text of length {len(self.text)}")
            _require_str("PIIRecord", f"spans[{i}].label", label)
            spans.append((start, end, label))
        object.__setattr__(self, "spans", sorted(spans))
        _require_dict("PIIRecord", self.attributes)

    def span_texts(self) -> list[str]:
        """The substrings of ``text`` covered by ``spans``, in span order."""
        return [self.text[start:end] for start, end, _ in self.spans]
