"""Word embedding tables for word-level substitution: one vector per whole word.

Two sources:

* :meth:`WordEmbeddingTable.from_hf_model`: a Hugging Face model's *input* embeddings (default: the packaged
  all-MiniLM-L6-v2). A word's vector is the mean of the embeddings of its sub-tokens (no special tokens). The
  candidate vocabulary defaults to the tokenizer's whole-word tokens; such a table can also embed any other
  word through its sub-tokens (:class:`SubwordEmbedder`).
* :meth:`WordEmbeddingTable.from_glove`: a GloVe text file, "word v1 ... vd" per line, every line validated.

:meth:`WordEmbeddingTable.diameter` is the exact largest distance between two table words, the D_max of the
privacy accounting (one word: eta * D_max; a text of n words: n * eta * D_max).
"""

from __future__ import annotations

import itertools
import os
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ..geometry import max_pairwise_distance

__all__ = ["WordEmbeddingTable", "SubwordEmbedder", "default_whole_words", "COMMON_PUNCTUATION"]

#: Punctuation tokens kept in a default Hugging Face vocabulary (each one character, as our text splitter cuts
#: them): all of ASCII ``string.punctuation``.
COMMON_PUNCTUATION = frozenset(string.punctuation)

_ALPHA = re.compile(r"[A-Za-z]+")
_BRACKETED = re.compile(r"\[[^\]]*\]|<[^>]*>")  # [CLS], [unused12], <s>, <unk>, ...
_WORD_START_MARKERS = ("\u0120", "\u2581")  # 'Ġ' (GPT-2 byte-level BPE), '▁' (SentencePiece)


@dataclass(frozen=True, eq=False)
class SubwordEmbedder:
    """Embeds any word as the mean of its sub-token embeddings (a Hugging Face tokenizer + its input table)."""

    tokenizer: Any
    token_vectors: torch.Tensor
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.token_vectors, torch.Tensor) or self.token_vectors.dim() != 2:
            raise ValueError(f"SubwordEmbedder: token_vectors must be [vocab, d], got {type(self.token_vectors)}")
        object.__setattr__(self, "token_vectors", self.token_vectors.detach().to(torch.float32).contiguous())

    def embed(self, words: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """(vectors [n, d] float32, ok [n] bool): ``ok`` is False where a word has no sub-token at all."""
        words = list(words)
        d = self.token_vectors.shape[1]
        if not words:
            return torch.empty(0, d), torch.empty(0, dtype=torch.bool)
        ids = self.tokenizer(words, add_special_tokens=False)["input_ids"]  # one batched call (Rust for fast ones)
        lengths = torch.tensor(list(map(len, ids)), dtype=torch.int64)
        flat = torch.tensor(list(itertools.chain.from_iterable(ids)), dtype=torch.int64)
        offsets = torch.cumsum(lengths, 0) - lengths
        vectors = torch.nn.functional.embedding_bag(flat, self.token_vectors, offsets, mode="mean")
        return vectors, lengths > 0

    def diameter(self) -> float:
        """Exact diameter of all token vectors: it bounds the distance between any two sub-token means."""
        if "diameter" not in self._cache:
            self._cache["diameter"] = max_pairwise_distance(self.token_vectors)
        return self._cache["diameter"]


def default_whole_words(tokenizer: Any) -> list[str]:
    """The tokenizer's whole-word tokens: alphabetic (ASCII letters) or one punctuation character.

    WordPiece (BERT family): tokens without the '##' continuation prefix. Byte-level BPE and SentencePiece:
    tokens that start a word ('Ġ' / '▁'), marker removed. Special tokens ([CLS], [SEP], [PAD], [UNK], [MASK]),
    [unusedN] and other bracketed tokens never qualify. Order: by token id.
    """
    vocab: dict[str, int] = tokenizer.get_vocab()
    special = set(getattr(tokenizer, "all_special_tokens", []))
    tokens = sorted(vocab, key=vocab.__getitem__)
    wordpiece = any(t.startswith("##") for t in tokens)
    marked = not wordpiece and any(t[:1] in _WORD_START_MARKERS for t in tokens)
    if not wordpiece and not marked:
        raise ValueError(
            f"cannot tell whole words from sub-words in the vocabulary of {type(tokenizer).__name__}; "
            "pass vocabulary=[...] explicitly"
        )
    out: list[str] = []
    seen: set[str] = set()
    for tok in tokens:
        if tok in special or _BRACKETED.fullmatch(tok):
            continue
        if wordpiece:
            if tok.startswith("##"):
                continue
            word = tok
        else:
            if tok[:1] not in _WORD_START_MARKERS:
                continue
            word = tok[1:]
        if (_ALPHA.fullmatch(word) or word in COMMON_PUNCTUATION) and word not in seen:
            seen.add(word)
            out.append(word)
    return out


@dataclass(frozen=True, eq=False)
class WordEmbeddingTable:
    """``words`` (unique, no whitespace) and their ``vectors`` [V, d] (float32, finite).

    ``name`` says where the table came from. ``subword`` (Hugging Face tables only) embeds words that are not
    in the table through their sub-tokens.
    """

    words: Sequence[str]
    vectors: torch.Tensor
    name: str = "custom"
    subword: SubwordEmbedder | None = None
    _index: dict = field(default_factory=dict, init=False, repr=False)
    _sorted: tuple = field(default=(), init=False, repr=False)
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        words = self.words
        if isinstance(words, str) or not isinstance(words, Sequence):
            raise ValueError(f"WordEmbeddingTable: words must be a list of strings, got {type(words).__name__}")
        words = tuple(words)
        if not words:
            raise ValueError("WordEmbeddingTable: words is empty")
        index: dict[str, int] = {}
        for i, w in enumerate(words):
            if not isinstance(w, str) or not w or any(c.isspace() for c in w):
                raise ValueError(
                    f"WordEmbeddingTable: word {i} must be a non-empty string without whitespace, got {w!r}"
                )
            if w in index:
                raise ValueError(f"WordEmbeddingTable: duplicate word {w!r} at positions {index[w]} and {i}")
            index[w] = i
        v = self.vectors
        if not isinstance(v, torch.Tensor) or v.dim() != 2 or not v.is_floating_point():
            desc = f"{tuple(v.shape)} {v.dtype}" if isinstance(v, torch.Tensor) else type(v).__name__
            raise ValueError(f"WordEmbeddingTable: vectors must be a floating [V, d] tensor, got {desc}")
        if v.shape[0] != len(words) or v.shape[1] < 1:
            raise ValueError(f"WordEmbeddingTable: vectors has shape {tuple(v.shape)} for {len(words)} words")
        v = v.detach().to(device="cpu", dtype=torch.float32).contiguous()
        bad = (~torch.isfinite(v)).any(dim=1)
        if bad.any():
            row = int(torch.nonzero(bad)[0])
            raise ValueError(f"WordEmbeddingTable: the vector of word {words[row]!r} (row {row}) is not finite")
        if self.subword is not None and self.subword.token_vectors.shape[1] != v.shape[1]:
            raise ValueError("WordEmbeddingTable: subword embedder and table have different dimensions")
        object.__setattr__(self, "words", words)
        object.__setattr__(self, "vectors", v)
        object.__setattr__(self, "_index", index)
        as_array = np.array(words, dtype=str)
        order = np.argsort(as_array, kind="stable")
        object.__setattr__(self, "_sorted", (as_array[order], torch.from_numpy(order.astype(np.int64))))

    # ------------------------------------------------------------------ basics

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self._index

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def index_of(self, word: str) -> int:
        """The row of ``word``; KeyError if it is not in the table (no case folding)."""
        try:
            return self._index[word]
        except KeyError:
            raise KeyError(f"word {word!r} is not in the table {self.name!r} ({len(self)} words)") from None

    def lookup(self, words: Sequence[str], *, fold_case: bool = True) -> torch.Tensor:
        """Rows of ``words`` as int64 [n], -1 where absent; vectorised (numpy binary search, no Python loop).

        With ``fold_case``, a word not found as written is looked up again in lower case.
        """
        n = len(words)
        if n == 0:
            return torch.empty(0, dtype=torch.int64)
        query = np.array(list(words), dtype=str)
        rows = self._search(query)
        if fold_case:
            missing = rows < 0
            if bool(missing.any()):
                lower = np.char.lower(query[missing.numpy()])
                rows[missing] = self._search(lower)
        return rows

    def _search(self, query: np.ndarray) -> torch.Tensor:
        sorted_words, order = self._sorted
        pos = np.searchsorted(sorted_words, query)
        pos_clipped = np.minimum(pos, len(sorted_words) - 1)
        found = torch.from_numpy(sorted_words[pos_clipped] == query)
        rows = order[torch.from_numpy(pos_clipped.astype(np.int64))]
        return torch.where(found, rows, torch.full_like(rows, -1))

    def diameter(self) -> float:
        """The exact largest L2 distance between two table words (computed once, chunked, then cached)."""
        if "diameter" not in self._cache:
            self._cache["diameter"] = max_pairwise_distance(self.vectors)
        return self._cache["diameter"]

    def embed_oov(self, words: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Sub-token embeddings of words outside the table: (vectors [n, d], ok [n]). Needs ``subword``."""
        if self.subword is None:
            raise ValueError(f"table {self.name!r} has no sub-word embedder; only Hugging Face tables do")
        return self.subword.embed(words)

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_hf_model(
        cls, name_or_path: str | os.PathLike | None = None, *, vocabulary: Sequence[str] | None = None
    ) -> "WordEmbeddingTable":
        """The input embeddings of a Hugging Face model (None: the packaged all-MiniLM-L6-v2).

        A word's vector is the mean of its sub-token embeddings, special tokens excluded. ``vocabulary``
        (default :func:`default_whole_words`) is the candidate word list; a given word that the tokenizer maps
        to no token at all is an error.
        """
        from ..encoders.loading import load_hf_encoder

        tokenizer, model, name, _ = load_hf_encoder(name_or_path)
        token_vectors = model.get_input_embeddings().weight.detach().to(torch.float32).clone()
        del model
        subword = SubwordEmbedder(tokenizer, token_vectors)
        if vocabulary is None:
            words = default_whole_words(tokenizer)
        else:
            if isinstance(vocabulary, str) or not all(isinstance(w, str) for w in vocabulary):
                raise ValueError("from_hf_model: vocabulary must be a list of strings")
            words = list(vocabulary)
            if not words:
                raise ValueError("from_hf_model: vocabulary is empty")
        vectors, ok = subword.embed(words)
        if not bool(ok.all()):
            bad = words[int(torch.nonzero(~ok)[0])]
            raise ValueError(f"from_hf_model: the tokenizer maps the vocabulary word {bad!r} to no token")
        return cls(words, vectors, name=name, subword=subword)

    @classmethod
    def from_glove(cls, path: str | os.PathLike, *, limit: int | None = None) -> "WordEmbeddingTable":
        """Read a GloVe text file: one "word v1 ... vd" per line, d the same on every line.

        Every line is checked; a bad one raises ValueError naming the file and the line number. ``limit``
        keeps the first ``limit`` words (GloVe files are sorted by frequency).
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"from_glove: limit must be an int >= 1 or None, got {limit!r}")
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"GloVe file not found: {path}")
        words: list[str] = []
        rows: list[np.ndarray] = []
        first_line: dict[str, int] = {}
        dim = None
        with open(path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                if limit is not None and len(words) >= limit:
                    break
                where = f"{path}:{lineno}"
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise ValueError(f"{where}: not valid UTF-8 ({exc.reason})") from None
                parts = line.split()
                if not parts:
                    raise ValueError(f"{where}: empty line")
                if len(parts) < 2:
                    raise ValueError(f"{where}: expected a word followed by numbers, got {line.strip()!r}")
                word, numbers = parts[0], parts[1:]
                if dim is None:
                    dim = len(numbers)
                elif len(numbers) != dim:
                    raise ValueError(
                        f"{where}: word {word!r} has {len(numbers)} numbers, expected {dim} (as on line 1)"
                    )
                try:
                    vec = np.array(numbers, dtype=np.float64)
                except ValueError:
                    bad = next(x for x in numbers if not _is_float(x))
                    raise ValueError(f"{where}: {bad!r} (for word {word!r}) is not a number") from None
                if not np.isfinite(vec).all():
                    raise ValueError(f"{where}: word {word!r} has a non-finite value")
                if word in first_line:
                    raise ValueError(f"{where}: duplicate word {word!r} (first on line {first_line[word]})")
                first_line[word] = lineno
                words.append(word)
                rows.append(vec)
        if not words:
            raise ValueError(f"{path}: no vectors in the file")
        vectors = torch.from_numpy(np.stack(rows)).to(torch.float32)
        return cls(words, vectors, name=f"glove:{path.name}")


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
