"""Text-to-text privatization (T2T) and its part-of-speech constrained variant (PCT2T).

The mechanism of Feyisetan et al. (2020), used by RAPT (arXiv 2305.06212) to privatize text on the user's
device: for every word w of a text, take its embedding x = phi(w), add isotropic L2-Laplace noise
z with density ∝ exp(-eta ||z||), and release the table word nearest to x + z. The output is text again:
words are swapped one for one and the whitespace between them is kept (:mod:`.text`; where two replacements
would fuse into one word, a space is put between them).

Privacy (metric / d_chi privacy): releasing one word is eta * d(w, w')-private for any two table words w, w'
(d the L2 distance of their embeddings); the nearest-neighbour step is post-processing. The worst case over
the table is eta * D_max (:meth:`TextToText.privacy_loss_per_word`); a text of n substituted words composes
to n * eta * D_max (:meth:`TextToText.privacy_loss`).

``search="approximate"`` (opt-in; default ``"exact"``) finds the released word with an int8 pass over the table
and a float64 re-rank of its short list (:mod:`.nn`) instead of the certified exact search. The guarantee and its
accounting do not change: the released word is still a fixed function of the noisy vector x + z and of the public
table only (never of the input word), and any such function is post-processing. What changes is utility: which
word comes out when the exact nearest word misses the short list (measured agreement: docs/substitution.md).

What the guarantee does not cover, by construction:

* the number of words, their positions and the whitespace between them (the layout is kept);
* words outside the table under ``oov="keep"`` (the default): they are released verbatim and counted in
  :attr:`T2TResult.n_kept`. ``oov="error"`` refuses such texts instead; ``oov="subtokens"`` (Hugging Face
  tables) embeds them as the mean of their sub-tokens and substitutes them like any other word, and then
  D_max is the diameter of all token embeddings, which bounds every sub-token mean;
* with ``preserve_case=True``, the capitalisation pattern of each substituted word, copied onto lower-case
  outputs (off by default: outputs are table words as spelled in the table);
* PCT2T only: the part-of-speech category of each word (see below).

PCT2T (RAPT section III-A2): ``pos_categories`` (default for :func:`pct2t`: ``DEFAULT_POS_CATEGORIES`` = NOUN, VERB,
PRON, ADP; ``ALL_POS_CATEGORIES`` for clinical or legal text, where the paper privatizes every category). The input
text is tagged in context. Only a word whose tag is a selected category is privatized, and it is replaced only by
table words of that category (the table is tagged once, each word in isolation). Every other word is released
unchanged: it goes through no mechanism, is not counted in the text's privacy loss and is sent in clear (counted in
:attr:`T2TResult.n_outside_pos`; :attr:`T2TResult.privatized` marks which words were eligible). For two words of the
same category the guarantee above holds unchanged (the candidate set is the same public set); the category itself is
revealed, since outputs stay in it. Limitation of tagging the table in isolation: a word used in a category other than
its context-free one ("run" as a noun) is not among its own candidates, so it is replaced even for very large eta.
"""

from __future__ import annotations

import copy
import itertools
import math
import numbers
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from ..mechanisms import L2Laplace, PrivacyLoss
from ..mechanisms.base import check_positive
from ..rng import resolve_generator
from .embeddings import WordEmbeddingTable
from .nn import BACKENDS, DEFAULT_SHORTLIST, SEARCH_MODES, NearestNeighbors
from .pos import UNIVERSAL_TAGS, Tagger, TextBlobTagger, category_masks
from .text import rejoin, split_text

__all__ = ["TextToText", "T2TResult", "DEFAULT_POS_CATEGORIES", "ALL_POS_CATEGORIES", "OOV_POLICIES", "pct2t"]

#: The default PCT2T categories: nouns, verbs, pronouns, adpositions (RAPT, section V-E: nouns and verbs carry the
#: identifying content; the issue's command line adds pronouns and prepositions).
DEFAULT_POS_CATEGORIES = ("NOUN", "VERB", "PRON", "ADP")
#: Every universal category (``--pos all``): RAPT section III-A2 for clinical or legal text, where sensitive content
#: spans all categories; every word is privatized, within its own category.
ALL_POS_CATEGORIES = UNIVERSAL_TAGS
OOV_POLICIES = ("keep", "subtokens", "error")


@dataclass(frozen=True)
class T2TResult:
    """Privatized texts and what happened to their words (all counts over the whole batch)."""

    texts: list[str]
    output_words: list[list[str]]  # each text's words after substitution, aligned one to one with its input words
    n_words: int  # words found by the splitter
    n_substituted: int  # words that went through the mechanism (in the table, or embedded via sub-tokens)
    n_kept: int  # words released unchanged without the mechanism (n_outside_pos included); not covered
    n_replaced: int  # substituted words whose output differs from the input word
    substituted_per_text: tuple[int, ...]  # n of each text, for privacy_loss(n)
    privatized: list[list[bool]]  # per text and word: did this word go through the mechanism
    n_outside_pos: int = 0  # PCT2T: words whose in-context category is not selected (released unchanged)

    @property
    def replacement_rate(self) -> float:
        return self.n_replaced / self.n_substituted if self.n_substituted else float("nan")


@dataclass(frozen=True, eq=False)
class TextToText:
    """T2T (``pos_categories=None``) or PCT2T over ``table`` with L2-Laplace parameter ``eta``.

    ``tagger`` (PCT2T only; default :class:`TextBlobTagger`), ``backend`` of the exact nearest-neighbour search
    ("auto", "matmul", "faiss", "bf16"), ``oov`` policy ("keep", "subtokens", "error") and ``preserve_case`` are
    explained in the module docstring. ``search``: "exact" (default) or "approximate" (an int8 pass keeping
    ``1 + shortlist`` words per input word, re-ranked in float64; same privacy guarantee, see the module
    docstring; refuses ``backend="faiss"`` and ``"bf16"``). Construction builds the search index (and, for PCT2T, tags
    the
    table); :meth:`with_eta` makes a copy with another eta that shares them.
    """

    table: WordEmbeddingTable
    eta: float
    pos_categories: Sequence[str] | None = None
    tagger: Tagger | None = None
    backend: str = "auto"
    oov: str = "keep"
    preserve_case: bool = False
    search: str = "exact"
    shortlist: int = DEFAULT_SHORTLIST
    _state: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.table, WordEmbeddingTable):
            raise TypeError(f"TextToText: table must be a WordEmbeddingTable, got {type(self.table).__name__}")
        check_positive("TextToText", "eta", self.eta)
        if self.backend not in BACKENDS:
            raise ValueError(f"TextToText: backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.search not in SEARCH_MODES:
            raise ValueError(f"TextToText: search must be one of {SEARCH_MODES}, got {self.search!r}")
        if self.search == "approximate" and self.backend in ("faiss", "bf16"):
            raise ValueError(
                f"TextToText: search='approximate' runs an int8 torch pass; backend={self.backend!r} applies to the "
                "exact search only"
            )
        if isinstance(self.shortlist, bool) or not isinstance(self.shortlist, int) or self.shortlist < 0:
            raise ValueError(f"TextToText: shortlist must be an int >= 0, got {self.shortlist!r}")
        if self.oov not in OOV_POLICIES:
            raise ValueError(f"TextToText: oov must be one of {OOV_POLICIES}, got {self.oov!r}")
        if self.oov == "subtokens" and self.table.subword is None:
            raise ValueError(f"TextToText: oov='subtokens' needs a Hugging Face table; {self.table.name!r} has none")
        if not isinstance(self.preserve_case, bool):
            raise ValueError(f"TextToText: preserve_case must be a bool, got {self.preserve_case!r}")
        cats = self.pos_categories
        if cats is not None:
            if isinstance(cats, str) or not isinstance(cats, Sequence) or not cats:
                raise ValueError(f"TextToText: pos_categories must be a non-empty list of universal tags, got {cats!r}")
            cats = tuple(cats)
            unknown = [c for c in cats if c not in UNIVERSAL_TAGS]
            if unknown or len(set(cats)) != len(cats):
                raise ValueError(
                    f"TextToText: pos_categories must be distinct universal tags {list(UNIVERSAL_TAGS)}, "
                    f"got {list(cats)}"
                )
            object.__setattr__(self, "pos_categories", cats)
            if self.tagger is None:
                object.__setattr__(self, "tagger", TextBlobTagger())
            if not isinstance(self.tagger, Tagger):
                name = type(self.tagger).__name__
                raise TypeError(f"TextToText: tagger must have tag() and tag_isolated(), got {name}")
        elif self.tagger is not None:
            raise ValueError("TextToText: a tagger was given but pos_categories is None (plain T2T uses no tagger)")
        self._state["nn"] = NearestNeighbors(
            self.table.vectors, self.backend, search=self.search, shortlist=self.shortlist
        )
        if cats is not None:
            vocab_tags = self.tagger.tag_isolated(self.table.words)
            masks = category_masks(vocab_tags, cats)
            empty = [c for c, m in masks.items() if not bool(m.any())]
            if empty:
                raise ValueError(
                    f"TextToText: no table word is tagged {empty} by {self.tagger.name}; drop the category"
                )
            self._state["vocab_tags"] = tuple(vocab_tags)
            self._state["sets"] = torch.stack([masks[c] for c in cats])
        self._state["words"] = np.array(self.table.words, dtype=object)

    # ------------------------------------------------------------------ accounting

    @property
    def is_pct2t(self) -> bool:
        return self.pos_categories is not None

    def input_diameter(self) -> float:
        """D_max: the largest distance between two possible inputs x (see the module docstring)."""
        d = self.table.diameter()
        if self.oov == "subtokens":
            d = max(d, self.table.subword.diameter())
        return d

    def privacy_loss_per_word(self) -> PrivacyLoss:
        """eta * D_max, metric privacy, for one substituted word; under PCT2T only between two words of the same
        part-of-speech category (words of two categories have disjoint outputs: no finite bound between them)."""
        return L2Laplace(self.eta).privacy_loss(self.input_diameter())

    def privacy_loss(self, n_words: int) -> PrivacyLoss:
        """n * eta * D_max for a text with ``n_words`` substituted words (sequential composition)."""
        if isinstance(n_words, bool) or not isinstance(n_words, numbers.Integral) or n_words < 0:
            raise ValueError(f"TextToText.privacy_loss: n_words must be an int >= 0, got {n_words!r}")
        return self.privacy_loss_per_word().scaled(int(n_words))

    def vocabulary_tags(self) -> tuple[str, ...]:
        """PCT2T: the universal tag of every table word (tagged in isolation)."""
        if not self.is_pct2t:
            raise ValueError("vocabulary_tags: this is plain T2T (pos_categories is None)")
        return self._state["vocab_tags"]

    def with_eta(self, eta: float) -> "TextToText":
        """The same mechanism with another eta, sharing this one's index and tags."""
        check_positive("TextToText", "eta", eta)
        other = copy.copy(self)  # shallow: _state (index, masks) is shared
        object.__setattr__(other, "eta", eta)
        return other

    # ------------------------------------------------------------------ release

    def privatize(self, texts: list[str], *, generator: torch.Generator | None = None) -> list[str]:
        """Privatized copies of ``texts``. ``generator``: None draws a fresh OS-seeded one (production)."""
        return self.privatize_detailed(texts, generator=generator).texts

    def privatize_detailed(self, texts: list[str], *, generator: torch.Generator | None = None) -> T2TResult:
        if isinstance(texts, str) or not isinstance(texts, Sequence) or not all(isinstance(t, str) for t in texts):
            raise TypeError("TextToText: texts must be a list of strings")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"TextToText: generator must be a torch.Generator, got {type(generator).__name__}")
        generator = resolve_generator(generator)
        parts = [split_text(t) for t in texts]
        per_text = [p[1::2] for p in parts]
        flat = list(itertools.chain.from_iterable(per_text))
        n = len(flat)
        words_in = np.array(flat, dtype=object)
        rows = self.table.lookup(flat)
        active = rows >= 0
        tags = self._tags(per_text) if self.is_pct2t else None
        selected = None
        if tags is not None:  # RAPT: only words of a selected category are privatized; the rest are sent as they are
            selected = torch.from_numpy(np.isin(tags, np.array(self.pos_categories, dtype=object)))
            active &= selected
        oov_vectors = None
        missing_mask = (rows < 0) if selected is None else (rows < 0) & selected
        if self.oov != "keep" and bool(missing_mask.any()):
            missing = torch.nonzero(missing_mask).flatten()
            if self.oov == "error":
                shown = sorted(set(words_in[missing.numpy()].tolist()))[:5]
                raise ValueError(f"TextToText: {len(missing)} word(s) not in table {self.table.name!r}, e.g. {shown}")
            vecs, ok = self.table.embed_oov(words_in[missing.numpy()].tolist())
            active[missing[ok]] = True
            oov_vectors = (missing[ok], vecs[ok])
        idx = torch.nonzero(active).flatten()
        x = torch.empty(len(idx), self.table.dim, dtype=torch.float64)
        in_table = rows[idx] >= 0
        x[in_table] = self.table.vectors[rows[idx][in_table]].to(torch.float64)
        if oov_vectors is not None:  # idx is sorted and holds every embedded OOV position, in the same order
            x[~in_table] = oov_vectors[1].to(torch.float64)
        q = x + L2Laplace(self.eta).noise(len(idx), self.table.dim, generator=generator)
        del x
        out_rows = self._nearest(q, idx, tags)
        new_words = self._state["words"][out_rows.numpy()]
        if self.preserve_case and len(idx):
            new_words = _copy_case(words_in[idx.numpy()], new_words)
        words_out = words_in.copy()
        words_out[idx.numpy()] = new_words
        out_texts = rejoin(parts, words_out.tolist())
        bounds = np.cumsum([0] + [len(w) for w in per_text])
        output_words = [words_out[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])]
        privatized = [active[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])]
        counts = torch.zeros(len(texts), dtype=torch.int64)
        if len(idx):
            text_of_word = torch.repeat_interleave(torch.arange(len(texts)), torch.tensor([len(w) for w in per_text]))
            counts = torch.bincount(text_of_word[idx], minlength=len(texts))
        return T2TResult(
            texts=out_texts,
            output_words=output_words,
            n_words=n,
            n_substituted=int(len(idx)),
            n_kept=int(n - len(idx)),
            n_replaced=int((out_rows != rows[idx]).sum()),
            substituted_per_text=tuple(int(c) for c in counts),
            privatized=privatized,
            n_outside_pos=0 if selected is None else int((~selected).sum()),
        )

    def _tags(self, per_text: list[list[str]]) -> np.ndarray:
        """PCT2T: the in-context universal tag of every word, texts concatenated (taggers are sequential)."""
        tags = np.array(list(itertools.chain.from_iterable(self.tagger.tag(w) for w in per_text)), dtype=object)
        if len(tags) != sum(map(len, per_text)):
            raise RuntimeError(f"TextToText: tagger {self.tagger.name} returned {len(tags)} tags for the words given")
        return tags

    def _nearest(self, q: torch.Tensor, idx: torch.Tensor, tags: np.ndarray | None) -> torch.Tensor:
        nn: NearestNeighbors = self._state["nn"]
        if len(idx) == 0:
            return torch.empty(0, dtype=torch.int64)
        if tags is None:
            return nn.search(q, 1)[:, 0]
        # Candidate set per privatized word: the table words of its (selected) category.
        sets: torch.Tensor = self._state["sets"]  # [len(categories), V]
        word_tags = tags[idx.numpy()]
        set_index = np.full(len(idx), -1, dtype=np.int64)
        for i, cat in enumerate(self.pos_categories):
            set_index[word_tags == cat] = i
        if (set_index < 0).any():  # pragma: no cover - idx holds selected words only
            raise RuntimeError("TextToText: a privatized word has no selected category")
        return nn.search(q, 1, candidate_mask=sets, set_index=torch.from_numpy(set_index))[:, 0]

    # ------------------------------------------------------------------ evaluation

    def replacement_rate(
        self, texts: list[str], etas: Sequence[float], *, generator: torch.Generator
    ) -> dict[float, float]:
        """{eta: fraction of substituted words replaced by a different word} (the shape of RAPT Table III).

        Every eta reuses the same random numbers (one seed drawn from ``generator``): the noise for eta is
        then exactly z_1 / eta, and since a word's Voronoi cell is convex, the point x + z_1 / eta leaves it
        at most once as eta falls, so the measured rate is monotone in eta (common random numbers).
        """
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"replacement_rate: generator must be a torch.Generator, got {type(generator).__name__}")
        etas = list(etas)
        if not etas:
            raise ValueError("replacement_rate: etas is empty")
        for eta in etas:
            check_positive("replacement_rate", "eta", eta)
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        rates: dict[float, float] = {}
        for eta in etas:
            result = self.with_eta(eta).privatize_detailed(texts, generator=torch.Generator().manual_seed(seed))
            if result.n_substituted == 0:
                raise ValueError("replacement_rate: the texts have no word that the table can substitute")
            rates[eta] = result.replacement_rate
        return rates

    def eta_for_replacement_rate(
        self, texts: list[str], rate: float, *, generator: torch.Generator, low: float = 1.0, high: float = 1e4,
        steps: int = 16,
    ) -> float:  # fmt: skip
        """The eta at which the replacement rate on ``texts`` is ``rate`` (RAPT Table III on another table): bisection
        in log eta with common random numbers (one seed from ``generator``), so the rate is monotone in eta and the
        answer is within a factor (high / low) ** (2 ** -steps) of the crossing."""
        if not isinstance(generator, torch.Generator):
            raise TypeError("eta_for_replacement_rate: pass a torch.Generator")
        if not 0 < rate < 1:
            raise ValueError(f"eta_for_replacement_rate: rate must be in (0, 1), got {rate!r}")
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))

        def measured(eta: float) -> float:
            return self.replacement_rate(texts, [eta], generator=torch.Generator().manual_seed(seed))[eta]

        if not measured(low) >= rate >= measured(high):
            raise ValueError(f"eta_for_replacement_rate: rate {rate} is not reached between eta {low:g} and {high:g}")
        lo, hi = math.log(low), math.log(high)
        for _ in range(steps):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if measured(math.exp(mid)) > rate else (lo, mid)
        return math.exp((lo + hi) / 2)


def pct2t(
    table: WordEmbeddingTable,
    eta: float,
    *,
    categories: Sequence[str] = DEFAULT_POS_CATEGORIES,
    tagger: Tagger | None = None,
    **kwargs,
) -> TextToText:
    """PCT2T with RAPT's default categories (NOUN, VERB, PRON, ADP) unless ``categories`` says otherwise."""
    return TextToText(table, eta, pos_categories=tuple(categories), tagger=tagger, **kwargs)


def _copy_case(originals: np.ndarray, replacements: np.ndarray) -> np.ndarray:
    """Give each lower-case replacement its original's case: ALL CAPS (2+ characters) or Capitalised."""
    orig = originals.astype(str)
    new = replacements.astype(str)
    lower = np.char.islower(new)
    first_upper = np.char.isupper(orig.astype("<U1")) & lower
    all_upper = np.char.isupper(orig) & (np.char.str_len(orig) > 1) & lower
    out = np.where(first_upper, np.char.capitalize(new), new)
    out = np.where(all_upper, np.char.upper(new), out)
    return out.astype(object)
