"""The quickstart's embedded corpus: short public help-desk answers and, for each, user questions that ask for it in
other words (``faq.json``, shipped as package data, written for this project).

The answers are public (a service publishes its FAQ), so the client embeds them in clear; the questions stand for
what a user would not want the server to read, so only their privatized token embeddings are sent.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

__all__ = ["Answer", "Question", "Faq", "CorpusError", "load_faq", "FAQ_FORMAT"]

FAQ_FORMAT = "textfree.quickstart.faq"
FAQ_VERSION = 1


class CorpusError(ValueError):
    """A corpus file that is unreadable or not well-formed."""


@dataclass(frozen=True)
class Answer:
    id: str
    text: str


@dataclass(frozen=True)
class Question:
    text: str
    answer: str  # the id of the answer it asks for


@dataclass(frozen=True)
class Faq:
    answers: tuple[Answer, ...]
    questions: tuple[Question, ...]

    def answer_index(self, answer_id: str) -> int:
        """The position of ``answer_id`` in :attr:`answers`."""
        for i, a in enumerate(self.answers):
            if a.id == answer_id:
                return i
        raise KeyError(answer_id)

    @property
    def labels(self) -> list[int]:
        """For each question, the position of its answer."""
        index = {a.id: i for i, a in enumerate(self.answers)}
        return [index[q.answer] for q in self.questions]


def _text(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise CorpusError(f"{where} must be a non-empty string, got {value!r}")
    return value.strip()


def parse_faq(data: object, source: str = "faq") -> Faq:
    """A :class:`Faq` from the decoded JSON ``data``; :class:`CorpusError` unless every answer has a unique id and a
    text, every question a text and the id of an existing answer, and every answer at least one question."""
    if not isinstance(data, dict) or data.get("format") != FAQ_FORMAT or data.get("format_version") != FAQ_VERSION:
        raise CorpusError(f"{source} is not a {FAQ_FORMAT} v{FAQ_VERSION} file")
    raw_answers, raw_questions = data.get("answers"), data.get("questions")
    if not isinstance(raw_answers, list) or not isinstance(raw_questions, list) or not raw_answers:
        raise CorpusError(f"{source}: 'answers' and 'questions' must be lists, with at least one answer")
    answers = []
    for i, a in enumerate(raw_answers):
        if not isinstance(a, dict):
            raise CorpusError(f"{source}: answers[{i}] must be an object")
        answers.append(Answer(_text(a.get("id"), f"{source}: answers[{i}].id"), _text(a.get("text"), f"answers[{i}]")))
    ids = [a.id for a in answers]
    if len(set(ids)) != len(ids):
        raise CorpusError(
            f"{source}: answer ids must be unique; repeated: {sorted({i for i in ids if ids.count(i) > 1})}"
        )
    questions = []
    for i, q in enumerate(raw_questions):
        if not isinstance(q, dict):
            raise CorpusError(f"{source}: questions[{i}] must be an object")
        question = Question(_text(q.get("text"), f"{source}: questions[{i}].text"), str(q.get("answer")))
        if question.answer not in ids:
            raise CorpusError(f"{source}: questions[{i}] points at {q.get('answer')!r}, which is no answer's id")
        questions.append(question)
    unasked = [a for a in ids if a not in {q.answer for q in questions}]
    if unasked:
        raise CorpusError(f"{source}: answers without a question: {unasked}")
    return Faq(tuple(answers), tuple(questions))


def load_faq(path: str | os.PathLike | None = None) -> Faq:
    """The corpus at ``path``, else the packaged ``faq.json``."""
    try:
        if path is None:
            raw = resources.files("textfree.quickstart").joinpath("faq.json").read_text(encoding="utf-8")
            source = "the packaged faq.json"
        else:
            raw, source = Path(path).read_text(encoding="utf-8"), str(path)
        data = json.loads(raw)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorpusError(f"cannot read the quickstart corpus: {exc}") from None
    return parse_faq(data, source)
