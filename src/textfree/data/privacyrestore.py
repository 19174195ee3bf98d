"""Pri-DDXPlus, Pri-NLICE and Pri-SLJA (PrivacyRestore, Zeng et al. ACL 2025) as :class:`MCQARecord` lists.

Files (``privacyrestore/Pri-{DDXPlus,NLICE,SLJA}_dataset/{dev,test}.json``) are JSON Lines despite the ``.json``
suffix; the ``train_finetune.json`` split is not available (see :mod:`textfree.data.splits`). Pri-NLICE rows have
the Pri-DDXPlus shape without ``antecedents``: the medical family's optional fields (``antecedents``, ``age``,
``sex``) are read when a row has them and left out of ``attributes`` when it does not.

Mapping of a row to :class:`MCQARecord`:

* ``question_init`` (the full, unmasked prompt) is cut before its last sentence: that final question
  (``"What is the likely diagnosis?"`` / ``"What crime is being committed in this case?"``) becomes
  ``question``; everything before it (patient history and symptoms / case facts) becomes the private
  ``context``. A prompt without a trailing ``?`` sentence keeps all text as context and gets the dataset's
  usual question.
* ``options``: DDX has a list of 4; SLJA has a dict ``{"A": ..., "D": ...}``, read in label order (labels kept
  in ``attributes["option_labels"]``).
* ``answer_index`` (:func:`find_answer_index`): the gold string (``correct_answer`` for DDX, ``answer`` for
  SLJA) must match exactly one option, tried in order (1) exact text, (2) an option label such as ``"B"``,
  (3) equality after :func:`~textfree.data.normalize.normalize_answer`. No match or several -> ``DataError``.
  On the real files every gold string matches exactly one option at step 1.
* ``id``: DDX ``pri-ddx-<map2raw_index>`` (the row's index in raw DDXPlus, unique); SLJA rows have no id,
  so ``pri-slja-<first 16 hex of sha256(canonical JSON of the row)>``. Ids do not contain the split: the
  dev files are copies of test rows and get the same ids (see :mod:`textfree.data.splits`).
* ``attributes``: ``dataset`` (``pri-ddx``, ``pri-nlice`` or ``pri-slja``), ``private_atoms`` (the spans
  PrivacyRestore treats as private: ``restore_symptoms`` for DDX, ``restore_evidences`` for SLJA),
  ``question_mask`` (the prompt with private atoms removed), plus DDX / NLICE ``age``, ``sex``, ``symptoms``,
  ``antecedents`` (each of age, sex, antecedents only when the row has it), the ``*_mask``/``*_remain`` lists,
  ``map2raw_index``, ``recall_value``; SLJA ``non_private_atoms`` (``keep_evidences``) and ``atoms``
  (``minor_premise_atoms``: object/objective/subject/subjective, each split into private/non-private).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from typing import Any, Literal

from ._io import field, iter_jsonl
from ._loading import build, iter_rows, load_rows
from .errors import DataError
from .normalize import normalize_answer
from .records import MCQARecord

__all__ = [
    "load_privacyrestore",
    "find_answer_index",
    "split_question",
    "privacyrestore_dir",
    "PRIVACYRESTORE_DIRS",
    "DDX_QUESTION",
    "SLJA_QUESTION",
]

#: Default locations under the shared data directory.
PRIVACYRESTORE_DIRS = {
    "ddx": "privacyrestore/Pri-DDXPlus_dataset",
    "nlice": "privacyrestore/Pri-NLICE_dataset",
    "slja": "privacyrestore/Pri-SLJA_dataset",
}
_ALIASES = {
    "ddx": "ddx",
    "pri-ddx": "ddx",
    "ddxplus": "ddx",
    "pri-ddxplus": "ddx",
    "nlice": "nlice",
    "pri-nlice": "nlice",
    "slja": "slja",
    "pri-slja": "slja",
}
#: The medical family's fields a row may lack (Pri-NLICE has no antecedents).
OPTIONAL_MEDICAL = ("antecedents", "age", "sex")
_SPLIT_FILES = {"dev": "dev.json", "test": "test.json"}
DDX_QUESTION = "What is the likely diagnosis?"
SLJA_QUESTION = "What crime is being committed in this case?"
_LAST_QUESTION = re.compile(r"^(?P<context>.*?)(?P<question>[^.?!]*\?)\s*$", re.DOTALL)
_SLJA_CATEGORIES = ("object", "objective", "subject", "subjective")


def privacyrestore_dir(dataset: str) -> str | None:
    """The default relative directory for a short name (``ddx``, ``pri-slja``, ...), or None."""
    kind = _ALIASES.get(dataset.lower()) if isinstance(dataset, str) else None
    return PRIVACYRESTORE_DIRS[kind] if kind else None


def split_question(prompt: str, default_question: str) -> tuple[str, str]:
    """Split a prompt into ``(context, question)`` at its last sentence ending in ``?``."""
    match = _LAST_QUESTION.match(prompt.strip())
    if match is None or not match.group("question").strip().rstrip("?").strip():
        return prompt.strip(), default_question
    return match.group("context").strip(), match.group("question").strip()


def find_answer_index(options: Sequence[str], answer: str, labels: Sequence[str] | None = None) -> int:
    """Index of ``answer`` among ``options``: exact text, then option label, then normalised text.

    Raises:
        ValueError: no option matches, or more than one does at the first step that matches at all.
    """

    def unique(hits: list[int], how: str) -> int | None:
        if len(hits) > 1:
            raise ValueError(f"answer {answer!r} matches options {hits} ({how}); ambiguous")
        return hits[0] if hits else None

    steps: list[tuple[list[int], str]] = [([i for i, o in enumerate(options) if o == answer], "exact text")]
    if labels is not None:
        key = answer.strip().casefold()
        steps.append(([i for i, lab in enumerate(labels) if lab.strip().casefold() == key], "option label"))
    norm = normalize_answer(answer)
    steps.append(([i for i, o in enumerate(options) if norm and normalize_answer(o) == norm], "normalised text"))
    for hits, how in steps:
        index = unique(hits, how)
        if index is not None:
            return index
    raise ValueError(f"answer {answer!r} not found among options {list(options)}")


def _detect_kind(row: dict[str, Any], where: str, line: int) -> Literal["ddx", "slja"]:
    if "correct_answer" in row or "symptoms" in row:
        return "ddx"
    if "minor_premise_atoms" in row or "restore_evidences" in row or "answer" in row:
        return "slja"
    raise DataError(
        "unrecognised Pri-* row: expected DDXPlus fields (correct_answer, symptoms, ...) "
        "or SLJA fields (answer, minor_premise_atoms, ...)",
        where,
        line,
    )


def _str_list(row: dict[str, Any], key: str, where: str, line: int) -> list[str]:
    value = field(row, key, where, line, list)
    if not all(isinstance(item, str) for item in value):
        raise DataError(f"field {key!r} should be a list of strings", where, line)
    return list(value)


def _prompt(row: dict[str, Any], where: str, line: int) -> str:
    prompt = field(row, "question_init", where, line)
    if not prompt.strip():
        raise DataError("field 'question_init' (the prompt) is empty", where, line)
    return prompt


def _slja_atoms(row: dict[str, Any], where: str, line: int) -> tuple[dict[str, Any], list[str], list[str]]:
    """``minor_premise_atoms`` (a mapping of ``<category>_atoms`` to ``{private_<category>_atoms: [...],
    non_private_<category>_atoms: [...]}``), and its private and non-private atoms flattened in category order."""
    atoms = row.get("minor_premise_atoms") or {}
    if not isinstance(atoms, dict):
        raise DataError(f"field 'minor_premise_atoms' should be an object, got {type(atoms).__name__}", where, line)
    flat: dict[str, list[str]] = {"private": [], "non_private": []}
    for c in _SLJA_CATEGORIES:
        group = atoms.get(f"{c}_atoms", {})
        if not isinstance(group, dict):
            raise DataError(f"field 'minor_premise_atoms.{c}_atoms' should be an object", where, line)
        for kind in flat:
            flat[kind] += _str_list(group, f"{kind}_{c}_atoms", where, line) if f"{kind}_{c}_atoms" in group else []
    return atoms, flat["private"], flat["non_private"]


def _content_id(prefix: str, row: dict[str, Any]) -> str:
    canonical = json.dumps(row, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return f"{prefix}-{hashlib.sha256(canonical.encode('utf-8')).hexdigest()[:16]}"


def _medical_name(where: str) -> str:
    """``pri-nlice`` for a file of the Pri-NLICE folder (or a hub name mentioning NLICE), else ``pri-ddx``."""
    return "pri-nlice" if "nlice" in where.lower() else "pri-ddx"


def _convert_ddx(where: str, line: int, row: dict[str, Any]) -> MCQARecord:
    prompt = _prompt(row, where, line)
    name = _medical_name(where)
    options = _str_list(row, "options", where, line)
    gold = field(row, "correct_answer", where, line)
    try:
        answer_index = find_answer_index(options, gold)
    except ValueError as exc:
        raise DataError(str(exc), where, line) from exc
    context, question = split_question(prompt, DDX_QUESTION)
    symptoms = _str_list(row, "symptoms", where, line)
    antecedents = _str_list(row, "antecedents", where, line) if "antecedents" in row else []
    attributes: dict[str, Any] = {"dataset": name}
    if "age" in row:
        attributes["age"] = field(row, "age", where, line, int)
    if "sex" in row:
        attributes["sex"] = field(row, "sex", where, line)
    attributes["symptoms"] = symptoms
    if "antecedents" in row:
        attributes["antecedents"] = antecedents
    attributes |= {
        "private_atoms": _str_list(row, "restore_symptoms", where, line)
        if "restore_symptoms" in row
        else symptoms + antecedents,
        "question_mask": row.get("question_mask"),
    }
    for key in (
        "symptoms_mask",
        "symptoms_remain",
        "antecedents_mask",
        "antecedents_remain",
        "restore_symptoms",
        "map2raw_index",
        "recall_value",
    ):
        if key in row:
            attributes[key] = row[key]
    raw_index = row.get("map2raw_index")
    record_id = (
        f"{name}-{raw_index}"
        if isinstance(raw_index, int) and not isinstance(raw_index, bool)
        else _content_id(name, row)
    )
    return build(MCQARecord, where, line, record_id, context, question, options, answer_index, attributes)


def _convert_slja(where: str, line: int, row: dict[str, Any]) -> MCQARecord:
    prompt = _prompt(row, where, line)
    raw_options = field(row, "options", where, line, (dict, list))
    if isinstance(raw_options, dict):
        labels = sorted(raw_options)
        options = [raw_options[label] for label in labels]
    else:
        labels = [chr(ord("A") + i) for i in range(len(raw_options))]
        options = list(raw_options)
    if not all(isinstance(o, str) for o in options):
        raise DataError("field 'options' should map labels to strings", where, line)
    gold = field(row, "answer", where, line)
    try:
        answer_index = find_answer_index(options, gold, labels)
    except ValueError as exc:
        raise DataError(str(exc), where, line) from exc
    context, question = split_question(prompt, SLJA_QUESTION)
    atoms, flat_private, flat_public = _slja_atoms(row, where, line)
    attributes: dict[str, Any] = {
        "dataset": "pri-slja",
        "option_labels": labels,
        "private_atoms": _str_list(row, "restore_evidences", where, line)
        if "restore_evidences" in row
        else flat_private,
        "non_private_atoms": _str_list(row, "keep_evidences", where, line) if "keep_evidences" in row else flat_public,
        "atoms": atoms,
        "question_mask": row.get("question_mask"),
    }
    for key in ("restore_evidences", "keep_evidences"):
        if key in row:
            attributes[key] = row[key]
    return build(
        MCQARecord, where, line, _content_id("pri-slja", row), context, question, options, answer_index, attributes
    )


def _convert(where: str, line: int, row: dict[str, Any]) -> MCQARecord:
    if _detect_kind(row, where, line) == "ddx":
        return _convert_ddx(where, line, row)
    return _convert_slja(where, line, row)


def load_privacyrestore(
    dataset: str | os.PathLike[str] = "ddx", split: str = "test", limit: int | None = None
) -> list[MCQARecord]:
    """Load Pri-DDXPlus or Pri-SLJA as :class:`MCQARecord` objects (see the module docstring for the mapping).

    Args:
        dataset: ``"ddx"``/``"pri-ddx"``, ``"nlice"``/``"pri-nlice"`` or ``"slja"``/``"pri-slja"`` (read from the
            shared data directory),
            a dataset directory or ``.json`` file (the kind is detected per row), or a hub name.
        split: ``"dev"`` or ``"test"`` (ignored when ``dataset`` is a file).
        limit: keep only the first ``limit`` records.

    Raises:
        DataError: malformed rows (with file and line); DataNotFoundError for missing files.
    """
    default_rel = privacyrestore_dir(dataset) if isinstance(dataset, str) else None
    path_or_name = None if default_rel is not None else dataset
    rows = iter_rows(
        path_or_name,
        split=split,
        what="Pri-* (PrivacyRestore)",
        default_rel=default_rel,
        files=_SPLIT_FILES,
        read=iter_jsonl,
    )
    return load_rows(rows, _convert, limit)
