"""PPFT prompt construction and answer scoring for multiple-choice records.

A PPFT prompt has an instruction, a context (the PRIVATE part) and a question. It is returned as
:class:`PromptParts` with the rule that **only** ``private`` is ever privatised (embedded, noised, sent as a
payload); ``public`` is sent as clear text.

MCQA normalisation (:func:`mcqa_prompt`)::

    private = "<context> <question>"        e.g. "A 46-year-old male has a history of ... What is the likely diagnosis?"
    public  = "Choose the correct option and output only its text, not the label.\\n"
              "Options:\\nA. <option 1>\\nB. <option 2>\\n..."

Why this split: the patient description / case facts are what the user must not reveal; the question in
these datasets is a fixed template and rides along with the context so that the private payload is a
self-contained request. The options are generic label sets (diagnoses, crime names) shared by every user, so
they stay public, and asking for the option *text* (not the letter) lets scoring be label-free and robust to
option order: a generation is correct when it contains the gold option text (:func:`is_correct`, the rule of
PPFT Appendix D.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .normalize import contains_normalized, normalize_answer
from .records import MCQARecord

__all__ = [
    "PromptParts",
    "MCQA_INSTRUCTION",
    "OPEN_INSTRUCTION",
    "option_labels",
    "options_block",
    "parse_options_block",
    "private_text",
    "mcqa_prompt",
    "blind_prompt",
    "open_answer_prompt",
    "answer_target",
    "normalize_answer",
    "is_correct",
    "contains_answer",
    "task_labels",
]

MCQA_INSTRUCTION = "Choose the correct option and output only its text, not the label."
OPEN_INSTRUCTION = "Answer the question. Output only the answer."


@dataclass(frozen=True)
class PromptParts:
    """A prompt split into the part that is privatised and the part sent in clear.

    Attributes:
        private: the only text that may be privatised; empty for blind (no-context) prompts.
        public: clear text (instruction, options); never contains private information.
    """

    private: str
    public: str

    def joined(self, sep: str = "\n") -> str:
        """The full clear-text prompt (private then public) for non-private baselines and debugging."""
        return sep.join(part for part in (self.private, self.public) if part)


def option_labels(n: int) -> list[str]:
    """``["A", "B", ...]`` for ``n`` options (at most 26)."""
    if not 0 <= n <= 26:
        raise ValueError(f"can label at most 26 options, got {n}")
    return [chr(ord("A") + i) for i in range(n)]


def options_block(options: list[str]) -> str:
    """``"Options:\\nA. <opt>\\nB. <opt>..."`` (labels are always A, B, C... in record order)."""
    lines = [f"{label}. {text}" for label, text in zip(option_labels(len(options)), options)]
    return "Options:\n" + "\n".join(lines)


def parse_options_block(text: str) -> list[str]:
    """The option texts of the last :func:`options_block` in ``text`` (its inverse: a line ``"Options:"`` followed by
    lines ``"A. <opt>"``, ``"B. <opt>"``... in label order), or ``[]`` when ``text`` has none. Used by a server
    that reads the public part of a prompt; it never sees the private part."""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if line.strip() == "Options:"]
    if not starts:
        return []
    out: list[str] = []
    for label, line in zip(option_labels(26), lines[starts[-1] + 1 :]):
        if not line.startswith(f"{label}. "):
            break
        out.append(line[len(label) + 2 :])
    return out


def private_text(record: MCQARecord) -> str:
    """``context + " " + question`` (just the question when the context is empty)."""
    return " ".join(part.strip() for part in (record.context, record.question) if part.strip())


def mcqa_prompt(record: MCQARecord) -> PromptParts:
    """private = context + question; public = :data:`MCQA_INSTRUCTION` + newline + options block."""
    return PromptParts(private=private_text(record), public=f"{MCQA_INSTRUCTION}\n{options_block(record.options)}")


def blind_prompt(record: MCQARecord, include_instruction: bool = True) -> PromptParts:
    """The "blind" baseline: no private part at all, only the public part of :func:`mcqa_prompt`.

    With ``include_instruction=False`` the public part is the bare options block.
    """
    block = options_block(record.options)
    return PromptParts(private="", public=f"{MCQA_INSTRUCTION}\n{block}" if include_instruction else block)


def open_answer_prompt(record: MCQARecord) -> PromptParts:
    """No options: private = context + question; public = :data:`OPEN_INSTRUCTION`."""
    return PromptParts(private=private_text(record), public=OPEN_INSTRUCTION)


def answer_target(record: MCQARecord) -> str:
    """The training / scoring target: the gold option text (never its label)."""
    return record.answer


def is_correct(generation: str, record: MCQARecord, *, exclusive: bool = False) -> bool:
    """True if the normalised gold option text is contained in the normalised ``generation``.

    With ``exclusive=True`` a generation that also contains another option's text (one that is not itself
    part of the gold text) is wrong, so listing every option does not score.
    """
    if not contains_normalized(generation, record.answer):
        return False
    if not exclusive:
        return True
    gold = normalize_answer(record.answer)
    output = normalize_answer(generation)
    for i, option in enumerate(record.options):
        other = normalize_answer(option)
        if i != record.answer_index and other and other not in gold and other in output:
            return False
    return True


def contains_answer(record: MCQARecord) -> bool:
    """True if the private prompt text (context + question) contains the normalised gold option text.

    Such records leak their answer through the private part; accuracy is also reported on the others.
    """
    return contains_normalized(private_text(record), record.answer)


def task_labels(*record_lists: Sequence[MCQARecord]) -> list[str]:
    """Every distinct option text (first spelling, in order of appearance) over the given records: the label set
    of a task's open answers."""
    seen: dict[str, str] = {}
    for records in record_lists:
        for r in records:
            for option in r.options:
                seen.setdefault(normalize_answer(option), option)
    return list(seen.values())
