"""Token priors for BeamClean: p(w | prefix) over the target vocabulary (the attacked model's token ids).

Interface (:class:`TokenPrior`): ``log_probs(prefixes: list[list[int]]) -> Tensor [len(prefixes), V]`` of
normalised log-probabilities (float64; each row log-sums to 0) and ``training_text``, the provenance of what the
prior learned from (``None``, ``"public"`` or ``"in_domain"``, as in :class:`~textfree.attacks.threat.ThreatModel`),
so an attack can require the grant its prior assumes.

* :class:`UniformPrior`: log(1/V) everywhere (BeamClean without a language model).
* :class:`BigramPrior`: add-k smoothed bigram counts over token-id sequences, with a start state for the first
  token; sparse (CSR) counts, so MiniLM's 30,522-token vocabulary costs only the observed pairs.
* :class:`CausalLMPrior`: any Hugging Face causal LM (``from_pretrained`` by name or path). Same-tokenizer mode
  feeds the prefix ids to the LM. Cross-tokenizer mode (BeamClean Fig. 5) maps each target token to the LM's
  vocabulary by its surface string: by its first LM sub-token (``mapping="first_subtoken"``), or by the paper's
  restricted one-to-one mapping (``mapping="one_to_one"``, :mod:`textfree.attacks.token_mapping`); see the class
  docstring for exactly what each does.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Iterable, Sequence

import torch

from .threat import TRAINING_TEXT_LEVELS

__all__ = [
    "TokenPrior",
    "UniformPrior",
    "BigramPrior",
    "CausalLMPrior",
    "surface_strings",
    "CROSS_MAPPINGS",
]

#: How a cross-tokenizer :class:`CausalLMPrior` maps target tokens to the LM's: by the first LM sub-token of the
#: surface string, or by BeamClean's restricted one-to-one mapping (:mod:`textfree.attacks.token_mapping`).
CROSS_MAPPINGS = ("first_subtoken", "one_to_one")


def _check_vocab_size(owner: str, vocab_size: Any) -> int:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"{owner}: vocab_size must be an int >= 1, got {vocab_size!r}")
    return vocab_size


def _check_training_text(owner: str, value: Any) -> None:
    if value not in TRAINING_TEXT_LEVELS:
        raise ValueError(f"{owner}: training_text must be one of {list(TRAINING_TEXT_LEVELS)}, got {value!r}")


class TokenPrior(ABC):
    """p(next token | prefix) over a vocabulary of ``vocab_size`` target token ids."""

    vocab_size: int
    training_text: str | None = None

    @abstractmethod
    def log_probs(self, prefixes: list[list[int]]) -> torch.Tensor:
        """[len(prefixes), vocab_size] float64 log-probabilities of the next token after each prefix."""

    def _check_prefixes(self, prefixes: Sequence[Sequence[int]]) -> None:
        flat = [int(t) for p in prefixes for t in p]
        if flat and (min(flat) < 0 or max(flat) >= self.vocab_size):
            bad = min(flat) if min(flat) < 0 else max(flat)
            raise ValueError(f"{type(self).__name__}: token id {bad} is outside [0, {self.vocab_size})")


class UniformPrior(TokenPrior):
    """Every token equally likely: BeamClean then decodes by the noise likelihood alone."""

    training_text = None

    def __init__(self, vocab_size: int):
        self.vocab_size = _check_vocab_size("UniformPrior", vocab_size)

    def log_probs(self, prefixes: list[list[int]]) -> torch.Tensor:
        return torch.full((len(prefixes), self.vocab_size), -math.log(self.vocab_size), dtype=torch.float64)


class BigramPrior(TokenPrior):
    """Add-k smoothed bigram model: p(w | a) = (c(a, w) + k) / (c(a) + k V); the first token uses a start state.

    Counts are kept sparse (CSR over V + 1 rows, row V being the start state); ``log_probs`` fills each row with
    the smoothed zero-count value and scatters the observed pairs in, vectorised over the prefixes.
    """

    def __init__(
        self,
        rows: torch.Tensor,
        cols: torch.Tensor,
        counts: torch.Tensor,
        vocab_size: int,
        *,
        k: float = 0.1,
        training_text: str | None = "public",
    ):
        """Bigram counts as triplets: ``counts[i]`` times token ``cols[i]`` after state ``rows[i]`` (a token id, or
        ``vocab_size`` for the start of a sequence). Repeated pairs are summed."""
        v = _check_vocab_size("BigramPrior", vocab_size)
        if not (isinstance(k, (int, float)) and not isinstance(k, bool) and k > 0 and math.isfinite(k)):
            raise ValueError(f"BigramPrior: k must be a finite number > 0, got {k!r}")
        _check_training_text("BigramPrior", training_text)
        rows, cols = (
            torch.as_tensor(rows, dtype=torch.int64).flatten(),
            torch.as_tensor(cols, dtype=torch.int64).flatten(),
        )
        counts = torch.as_tensor(counts, dtype=torch.float64).flatten()
        if not (len(rows) == len(cols) == len(counts)):
            raise ValueError(
                f"BigramPrior: rows, cols and counts differ in length: {len(rows)}, {len(cols)}, {len(counts)}"
            )
        if len(rows) and (rows.min() < 0 or rows.max() > v or cols.min() < 0 or cols.max() >= v):
            raise ValueError(f"BigramPrior: rows must lie in [0, {v}] and cols in [0, {v})")
        if (counts < 0).any() or not torch.isfinite(counts).all():
            raise ValueError("BigramPrior: counts must be finite and >= 0")
        self.vocab_size = v
        self.k = float(k)
        self.training_text = training_text
        key, inverse = torch.unique(rows * v + cols, return_inverse=True)  # sorted: CSR order
        self._val = torch.zeros(len(key), dtype=torch.float64).index_add_(0, inverse, counts)
        self._col = key % v
        per_row = torch.bincount(key // v, minlength=v + 1)
        self._crow = torch.cat([torch.zeros(1, dtype=torch.int64), per_row.cumsum(0)])
        self._row_total = torch.zeros(v + 1, dtype=torch.float64).index_add_(0, key // v, self._val)

    @classmethod
    def from_sequences(
        cls,
        sequences: Iterable[Sequence[int]],
        vocab_size: int,
        *,
        k: float = 0.1,
        training_text: str | None = "public",
    ) -> "BigramPrior":
        """Count bigrams (and starts) in token-id sequences."""
        v = _check_vocab_size("BigramPrior", vocab_size)
        prev, nxt = [], []
        for seq in sequences:
            ids = [int(t) for t in seq]
            if not ids:
                continue
            if min(ids) < 0 or max(ids) >= v:
                raise ValueError(f"BigramPrior: a sequence has a token id outside [0, {v}): {ids}")
            prev.extend([v] + ids[:-1])
            nxt.extend(ids)
        if not prev:
            raise ValueError("BigramPrior: no tokens to count")
        return cls(torch.tensor(prev), torch.tensor(nxt), torch.ones(len(prev)), v, k=k, training_text=training_text)

    @classmethod
    def from_texts(
        cls,
        texts: Iterable[str],
        tokenizer,
        vocab_size: int | None = None,
        *,
        k: float = 0.1,
        add_special_tokens: bool = True,
        training_text: str | None = "public",
    ) -> "BigramPrior":
        """Tokenize ``texts`` with the attacked model's tokenizer and count bigrams.

        ``add_special_tokens=True`` (default) matches :meth:`EmbeddingTableEncoder.encode`, whose payloads carry the
        tokenizer's special tokens ([CLS] ... [SEP] for MiniLM). ``vocab_size`` defaults to ``len(tokenizer)``.
        """
        texts = list(texts)
        if any(not isinstance(t, str) for t in texts):
            raise TypeError("BigramPrior.from_texts: texts must be strings")
        v = len(tokenizer) if vocab_size is None else vocab_size
        seqs = tokenizer(texts, add_special_tokens=add_special_tokens)["input_ids"] if texts else []
        return cls.from_sequences(seqs, v, k=k, training_text=training_text)

    def log_probs(self, prefixes: list[list[int]]) -> torch.Tensor:
        self._check_prefixes(prefixes)
        v = self.vocab_size
        state = torch.tensor([int(p[-1]) if len(p) else v for p in prefixes], dtype=torch.int64)
        denom = self._row_total[state] + self.k * v  # [n]
        out = (math.log(self.k) - denom.log())[:, None].expand(len(prefixes), v).clone()
        starts, stops = self._crow[state], self._crow[state + 1]
        lengths = stops - starts
        if int(lengths.sum()):
            rows = torch.repeat_interleave(torch.arange(len(prefixes)), lengths)
            offsets = torch.arange(int(lengths.sum())) - torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)
            pos = torch.repeat_interleave(starts, lengths) + offsets
            out[rows, self._col[pos]] = (self._val[pos] + self.k).log() - denom[rows].log()
        return out


_SPACE_MARKERS = ("\u2581", "\u0120")  # SentencePiece's and byte-level BPE's word-initial markers


def surface_strings(tokenizer) -> list[str]:
    """Each token id's surface string, with a leading space when the token starts a word.

    WordPiece vocabularies (some token starts with ``##``): ``##x`` -> ``"x"``, any other token -> ``" x"``.
    Otherwise (SentencePiece ``\u2581x``, byte-level BPE ``\u0120x``): a marked token -> ``" x"``, an unmarked one
    -> ``"x"`` (a word continuation). Special tokens map to ``""`` (no surface form).
    """
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    tokens = [t or "" for t in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))]
    wordpiece = any(t.startswith("##") for t in tokens)
    out = []
    for i, tok in enumerate(tokens):
        if i in special:
            out.append("")
        elif wordpiece:
            out.append(tok[2:] if tok.startswith("##") else " " + tok)
        else:
            out.append(" " + tok[1:] if tok.startswith(_SPACE_MARKERS) else tok)
    return out


def _first_subtokens(strings: list[str], lm_tokenizer) -> torch.Tensor:
    """The LM id of each string's first sub-token, skipping bare space markers ("\u2581" alone); -1 for none."""
    encoded = lm_tokenizer(strings, add_special_tokens=False)["input_ids"] if strings else []
    bare = {
        i
        for i, t in enumerate(lm_tokenizer.convert_ids_to_tokens(list(range(len(lm_tokenizer)))))
        if (t or "").strip("".join(_SPACE_MARKERS) + " ") == ""
    }
    first = []
    for s, ids in zip(strings, encoded):
        ids = [i for i in ids if i not in bare] if s else []
        first.append(ids[0] if ids else -1)
    return torch.tensor(first, dtype=torch.int64)


class CausalLMPrior(TokenPrior):
    """A Hugging Face causal LM as the prior.

    **Same tokenizer** (``target_tokenizer=None``): the LM shares the attacked model's token ids; the prefix ids
    (after ``start_ids``, by default the LM's BOS token when it has one) go to the LM and the next-token logits
    over the first ``vocab_size`` ids are log-softmaxed. A prefix that is empty with no start ids gets a uniform row.

    **Cross tokenizer** (``target_tokenizer`` given; BeamClean Fig. 5), deliberately simple:

    1. each target token w has a surface string s(w) (:func:`surface_strings`: a leading space when w starts a
       word), and a first LM sub-token f(w) = the first id of ``lm_tokenizer(s(w), add_special_tokens=False)``
       that is not a bare space marker;
    2. a prefix (target ids) is decoded to text with ``target_tokenizer.decode(prefix, skip_special_tokens=True)``
       and re-tokenized with the LM's tokenizer (after ``start_ids``);
    3. the score of w is the LM's next-token log-probability of f(w); targets with no surface string (special
       tokens) or an empty encoding get log(1/V);
    4. the scores are renormalised over the target vocabulary (log-softmax).

    Target tokens that share a first sub-token share a score: the mapping is an approximation of p(w | prefix),
    good enough to rank candidates that the noise model has already narrowed to a short list.

    **Restricted one-to-one** (``mapping="one_to_one"``, with ``target_tokenizer``; BeamClean §5, Fig. 5): the map of
    :func:`~textfree.attacks.token_mapping.one_to_one_mapping` pairs each *mapped* target token with its own LM token
    (its surface string, or a version of it, is a single LM token). A prefix is translated token by token
    (:meth:`TokenMapping.context_ids`: a mapped token is its LM token, special tokens are dropped, an unmapped token
    is the LM's tokenization of its surface) after ``start_ids``; the LM's next-token distribution is restricted to
    the mapped LM tokens and renormalised. ``unmapped_mass`` (alpha, in [0, 1)) is what the unmapped target tokens
    (special tokens included) get: a mapped token has (1 - alpha) x its restricted probability, an unmapped one
    alpha / (number of unmapped tokens). alpha = 0 is the paper's restricted vocabulary: unmapped tokens get
    probability 0 (log -inf) and are listed in ``excluded_ids`` so that BeamClean never proposes them.

    The whole prefix is re-run at every call (no KV cache): O(T^2) LM work per sequence.
    """

    def __init__(
        self,
        model,
        lm_tokenizer,
        *,
        vocab_size: int | None = None,
        target_tokenizer=None,
        start_ids: Sequence[int] | None = None,
        training_text: str | None = "public",
        batch_size: int = 64,
        device: str | torch.device = "cpu",
        mapping: str = "first_subtoken",
        unmapped_mass: float = 0.0,
    ):
        _check_training_text("CausalLMPrior", training_text)
        if mapping not in CROSS_MAPPINGS:
            raise ValueError(f"CausalLMPrior: mapping must be one of {list(CROSS_MAPPINGS)}, got {mapping!r}")
        ok = isinstance(unmapped_mass, (int, float)) and not isinstance(unmapped_mass, bool)
        if not ok or not 0 <= unmapped_mass < 1:
            raise ValueError(f"CausalLMPrior: unmapped_mass must be a number in [0, 1), got {unmapped_mass!r}")
        if mapping != "one_to_one" and unmapped_mass:
            raise ValueError(f"CausalLMPrior: unmapped_mass applies to mapping='one_to_one' only, not {mapping!r}")
        self.mapping = mapping
        self.unmapped_mass = float(unmapped_mass)
        self.token_mapping = None
        self.model = model.eval().to(device)
        self.lm_tokenizer = lm_tokenizer
        self.target_tokenizer = target_tokenizer
        self.training_text = training_text
        self.batch_size = batch_size
        self.device = torch.device(device)
        lm_vocab = int(model.get_output_embeddings().weight.shape[0])
        if start_ids is None:
            bos = getattr(model.config, "bos_token_id", None)
            start_ids = [] if bos is None else [int(bos)]
        self.start_ids = [int(t) for t in start_ids]
        if target_tokenizer is None:
            self.vocab_size = _check_vocab_size("CausalLMPrior", lm_vocab if vocab_size is None else vocab_size)
            if self.vocab_size > lm_vocab:
                raise ValueError(f"CausalLMPrior: vocab_size {self.vocab_size} exceeds the LM's {lm_vocab} outputs")
            self._first_sub = None
            if mapping != "first_subtoken":
                raise ValueError(f"CausalLMPrior: mapping={mapping!r} needs a target_tokenizer (another tokenizer)")
        else:
            self.vocab_size = _check_vocab_size(
                "CausalLMPrior", len(target_tokenizer) if vocab_size is None else vocab_size
            )
            if mapping == "one_to_one":
                from .token_mapping import one_to_one_mapping

                self.token_mapping = one_to_one_mapping(
                    target_tokenizer, lm_tokenizer, target_vocab_size=self.vocab_size, lm_vocab_size=lm_vocab
                )
                self._first_sub = None
                return
            strings = surface_strings(target_tokenizer)[: self.vocab_size]
            strings += [""] * (self.vocab_size - len(strings))
            first = _first_subtokens(strings, lm_tokenizer)
            if (first >= lm_vocab).any():
                raise ValueError("CausalLMPrior: the LM tokenizer produced ids beyond the LM's output size")
            self._first_sub = first

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, target_tokenizer=None, **kwargs: Any) -> "CausalLMPrior":
        """Load the LM and its tokenizer with ``from_pretrained`` (a hub name, or a local directory)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForCausalLM.from_pretrained(name_or_path)
        return cls(model, tokenizer, target_tokenizer=target_tokenizer, **kwargs)

    @property
    def excluded_ids(self) -> tuple[int, ...]:
        """Target ids this prior gives probability 0 (one-to-one mapping with ``unmapped_mass`` 0), else ()."""
        if self.token_mapping is None or self.unmapped_mass > 0:
            return ()
        return tuple(int(i) for i in self.token_mapping.unmapped_ids)

    def _lm_inputs(self, prefixes: list[list[int]]) -> list[list[int]]:
        if self.token_mapping is not None:
            return [self.start_ids + self.token_mapping.context_ids(p) for p in prefixes]
        if self.target_tokenizer is None:
            return [self.start_ids + [int(t) for t in p] for p in prefixes]
        texts = [
            self.target_tokenizer.decode([int(t) for t in p], skip_special_tokens=True) if p else "" for p in prefixes
        ]
        ids = self.lm_tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        return [self.start_ids + list(x) for x in ids]

    @torch.no_grad()
    def _next_logprobs(self, inputs: list[list[int]]) -> torch.Tensor:
        """LM next-token log-probs [n, lm_vocab] (float64) after each input; None rows for empty inputs -> NaN."""
        lm_vocab = int(self.model.get_output_embeddings().weight.shape[0])
        out = torch.full((len(inputs), lm_vocab), math.nan, dtype=torch.float64)
        by_len: dict[int, list[int]] = {}
        for i, seq in enumerate(inputs):
            if seq:
                by_len.setdefault(len(seq), []).append(i)
        for length, rows in by_len.items():  # equal lengths: no padding, no position bookkeeping
            for s in range(0, len(rows), self.batch_size):
                chunk = rows[s : s + self.batch_size]
                ids = torch.tensor([inputs[i] for i in chunk], dtype=torch.int64, device=self.device)
                logits = self.model(input_ids=ids).logits[:, -1, :]
                out[chunk] = torch.log_softmax(logits.to(torch.float64), dim=-1).cpu()
        return out

    def log_probs(self, prefixes: list[list[int]]) -> torch.Tensor:
        self._check_prefixes(prefixes)
        v = self.vocab_size
        lp = self._next_logprobs(self._lm_inputs(prefixes))
        empty = torch.isnan(lp[:, 0])
        if self.token_mapping is not None:
            return self._mapped_log_probs(lp, empty)
        if self._first_sub is None:
            scores = lp[:, :v]
        else:
            known = self._first_sub >= 0
            scores = torch.full((len(prefixes), v), -math.log(v), dtype=torch.float64)
            scores[:, known] = lp[:, self._first_sub[known]]
        scores = torch.log_softmax(scores, dim=-1)
        scores[empty] = -math.log(v)
        return scores

    def _mapped_log_probs(self, lp: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
        """One-to-one mode: the restricted, renormalised LM distribution on the mapped tokens, weighted 1 - alpha;
        alpha spread evenly over the unmapped ones (-inf when alpha is 0); an empty input is uniform on the mapped."""
        tm, alpha = self.token_mapping, self.unmapped_mass
        restricted = tm.restricted_log_probs(lp.nan_to_num(0.0))
        restricted[empty] = -math.log(max(tm.size, 1))
        n_unmapped = self.vocab_size - tm.size
        fill = math.log(alpha / n_unmapped) if alpha > 0 and n_unmapped else -math.inf
        out = torch.full((len(lp), self.vocab_size), fill, dtype=torch.float64)
        out[:, tm.target_ids] = restricted + (math.log1p(-alpha) if n_unmapped else 0.0)
        return out
