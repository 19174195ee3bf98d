"""RAPT's plain tokens and reconstruction vocabulary (Li et al., section III-B2, section V-C, Fig. 5).

Plain tokens are public words, chosen uniformly at random from the table words of the selected part-of-speech
categories, prepended to every input and privatized with it; the model learns to reconstruct the original plain
tokens from its states at their positions (RAPT's reconstruction head, ``textfree.heads.reconstruction``). They carry
nothing private, so they are saved as JSON beside the model and served to clients.

* ``sequences``: one or more plain-token sequences of ``length`` words (the paper: one sequence of 40; Fig. 5a: a set
  of sequences, one drawn per example);
* ``vocabulary``: the reconstruction vocabulary V_r, the words the head predicts over: every eligible table word, or
  a seeded sample of ``vocab_size`` of them that holds every plain word (the paper: 19,369 for BERT-base).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

__all__ = ["PLAIN_FILE", "PlainTokens"]

PLAIN_FILE = "plain_tokens.json"
_FORMAT = "textfree-rapt-plain-tokens"


@dataclass(frozen=True)
class PlainTokens:
    """Public plain-token sequences and the reconstruction vocabulary they index into."""

    sequences: tuple[tuple[str, ...], ...]
    vocabulary: tuple[str, ...]
    categories: tuple[str, ...] | None = None  # the PCT2T categories they were drawn from (None: the whole table)
    _index: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        seqs = tuple(tuple(s) for s in self.sequences)
        vocab = tuple(self.vocabulary)
        if not seqs or any(not s for s in seqs) or len({len(s) for s in seqs}) != 1:
            raise ValueError(
                f"PlainTokens: sequences must be one or more non-empty sequences of one length, got {seqs!r}"
            )
        if len(vocab) < 2 or len(set(vocab)) != len(vocab):
            raise ValueError(f"PlainTokens: vocabulary must hold at least 2 distinct words, got {len(vocab)}")
        for w in (*vocab, *(w for s in seqs for w in s)):
            if not isinstance(w, str) or not w or any(c.isspace() for c in w):
                raise ValueError(f"PlainTokens: every word must be a non-empty string without whitespace, got {w!r}")
        object.__setattr__(self, "sequences", seqs)
        object.__setattr__(self, "vocabulary", vocab)
        self._index.update({w: i for i, w in enumerate(vocab)})
        missing = sorted({w for s in seqs for w in s} - set(self._index))
        if missing:
            raise ValueError(f"PlainTokens: plain words outside the vocabulary: {missing[:5]}")
        if self.categories is not None:
            object.__setattr__(self, "categories", tuple(self.categories))

    @property
    def length(self) -> int:
        """m: words per plain-token sequence."""
        return len(self.sequences[0])

    def targets(self, sequence: int) -> list[int]:
        """The vocabulary indices of plain-token sequence ``sequence``."""
        return [self._index[w] for w in self.sequences[sequence]]

    # ------------------------------------------------------------------ sampling
    @classmethod
    def sample(
        cls,
        words: Sequence[str],
        tags: Sequence[str] | None,
        *,
        categories: Sequence[str] | None,
        length: int = 40,
        n_sequences: int = 1,
        vocab_size: int | None = None,
        generator: torch.Generator,
    ) -> "PlainTokens":
        """Plain tokens drawn uniformly from the table ``words`` whose ``tags`` (each word's category in isolation)
        are in ``categories`` (None: every word), and the reconstruction vocabulary (see the module docstring)."""
        for name, value in (("length", length), ("n_sequences", n_sequences)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"PlainTokens.sample: {name} must be an integer >= 1, got {value!r}")
        if categories is None:
            eligible = list(words)
        else:
            if tags is None or len(tags) != len(words):
                raise ValueError("PlainTokens.sample: categories need one tag per table word")
            wanted = set(categories)
            eligible = [w for w, t in zip(words, tags) if t in wanted]
        if vocab_size is not None:
            if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
                raise ValueError(f"PlainTokens.sample: vocab_size must be an integer >= 2 or None, got {vocab_size!r}")
            if vocab_size > len(eligible):
                raise ValueError(
                    f"PlainTokens.sample: vocab_size {vocab_size} is over the {len(eligible)} eligible words"
                )
            pick = torch.randperm(len(eligible), generator=generator)[:vocab_size].sort().values
            eligible = [eligible[i] for i in pick.tolist()]
        if len(eligible) < 2:
            raise ValueError(f"PlainTokens.sample: only {len(eligible)} table word(s) in categories {categories}")
        draws = torch.randint(len(eligible), (n_sequences, length), generator=generator)
        sequences = tuple(tuple(eligible[i] for i in row) for row in draws.tolist())
        return cls(sequences, tuple(eligible), None if categories is None else tuple(categories))

    # ------------------------------------------------------------------ files
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": _FORMAT,
            "categories": None if self.categories is None else list(self.categories),
            "sequences": [list(s) for s in self.sequences],
            "vocabulary": list(self.vocabulary),
        }

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "plain tokens") -> "PlainTokens":
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError(f"{where}: not a {_FORMAT} file")
        try:
            return cls(tuple(map(tuple, data["sequences"])), tuple(data["vocabulary"]), data.get("categories"))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{where}: malformed ({exc})") from exc

    def save(self, directory: str | os.PathLike) -> Path:
        from ..atomic import atomic_write_text

        path = Path(directory) / PLAIN_FILE
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "PlainTokens":
        path = Path(directory) / PLAIN_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read plain tokens {str(path)!r}: {exc}") from exc
        return cls.from_dict(data, where=str(path))
