"""A restricted one-to-one token mapping between an attacked model's vocabulary and a prior LM's (BeamClean §5, Fig. 5).

BeamClean's cross-model experiment attacks GPT-2 embeddings with a Llama prior: "a direct 1:1 mapping for each GPT-2
token to a unique LLaMA version of that token by choosing a restricted vocabulary". :func:`one_to_one_mapping` builds
that mapping for any pair of Hugging Face tokenizers (here: MiniLM's WordPiece and the local decoder's byte-level BPE):

1. each target token w has a surface string s(w) (:func:`~textfree.attacks.priors.surface_strings`: a leading space
   when w starts a word; special tokens have none);
2. its *versions* are tried in order of preference (:func:`surface_versions`): s(w) itself, then the same string
   with its first letter upper-cased (an uncased target such as MiniLM has only ``" monday"``; a cased LM may have only
   ``" Monday"``), then without / with the leading space. A WordPiece token that starts with punctuation is a word of
   its own only to WordPiece (``"isn't"`` -> ``isn`` ``'`` ``t``; ``","`` follows a word without a space), so for
   it the version without the space comes first;
3. a version *qualifies* when the LM tokenizer encodes it (``add_special_tokens=False``) as exactly one token that is
   not one of the LM's special tokens;
4. pairs are assigned greedily by (rank of the version, target id): a target token takes its best qualifying
   version whose LM token no other target token has taken. The result is one-to-one: every mapped target token has
   its own LM token. Target tokens without a qualifying free version stay **unmapped**.

The prior's distribution is then *restricted* to the mapped set: ``restricted_log_probs`` log-softmaxes the LM's
logits over the mapped LM tokens only, so it sums to 1 over the mapped target tokens (the paper's restricted
vocabulary). What an unmapped target token gets is the prior's choice (see
:class:`~textfree.attacks.priors.CausalLMPrior`, ``unmapped_mass``).

``context_ids`` translates a decoded prefix (target ids) into LM input ids: a mapped token is its LM token, a special
token is dropped, an unmapped token is the LM's tokenization of its preferred version (several LM tokens).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any, Sequence

import torch

__all__ = ["TokenMapping", "one_to_one_mapping", "surface_versions"]


def _starts_with_punctuation(text: str) -> bool:
    return bool(text) and unicodedata.category(text[0]).startswith(("P", "S"))


def surface_versions(surface: str, *, implicit_spaces: bool = False) -> list[str]:
    """The strings a target token's surface may take in the LM's vocabulary, most preferred first (no repeats).

    ``surface`` is the :func:`~textfree.attacks.priors.surface_strings` form (``" x"`` starts a word, ``"x"``
    continues one; ``""`` has no versions). ``implicit_spaces`` (WordPiece targets): a word-initial token that starts
    with punctuation prefers the version without the space."""
    if not isinstance(surface, str):
        raise TypeError(f"surface_versions: surface must be a string, got {surface!r}")
    if not surface.strip():
        return []
    spaced = surface.startswith(" ")
    core = surface[1:] if spaced else surface
    upper = core[:1].upper() + core[1:]
    if spaced and implicit_spaces and _starts_with_punctuation(core):
        order = [core, surface, upper, " " + upper]
    elif spaced:
        order = [surface, " " + upper, core, upper]
    else:
        order = [surface, upper]
    return list(dict.fromkeys(order))


@dataclass(frozen=True)
class TokenMapping:
    """A one-to-one map between part of a target vocabulary and an LM's vocabulary.

    ``target_ids`` (sorted) and ``lm_ids`` are aligned: target token ``target_ids[i]`` is LM token ``lm_ids[i]``;
    no id repeats on either side. ``lm_of`` [target_vocab_size] holds each target token's LM token, -1 when unmapped.
    ``context`` holds, per target token, the LM ids it contributes to a prefix (empty for special tokens).
    """

    target_vocab_size: int
    lm_vocab_size: int
    target_ids: torch.Tensor
    lm_ids: torch.Tensor
    lm_of: torch.Tensor
    context: tuple[tuple[int, ...], ...]
    versions_used: tuple[int, ...]  # per mapped token (aligned with target_ids): the rank of the version it took

    def __post_init__(self) -> None:
        if len(self.target_ids) != len(self.lm_ids):
            raise ValueError(
                f"TokenMapping: {len(self.target_ids)} target ids but {len(self.lm_ids)} LM ids; they must align"
            )
        for name, ids, size in (
            ("target", self.target_ids, self.target_vocab_size),
            ("LM", self.lm_ids, self.lm_vocab_size),
        ):
            if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= size):
                bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
                raise ValueError(f"TokenMapping: {name} id {bad} is outside [0, {size})")
            if len(torch.unique(ids)) != len(ids):
                raise ValueError(f"TokenMapping: an {name} id is mapped twice; the mapping must be one-to-one")

    @property
    def size(self) -> int:
        """How many target tokens are mapped."""
        return len(self.target_ids)

    @property
    def unmapped_ids(self) -> torch.Tensor:
        """The target ids that have no LM token (special tokens included), sorted."""
        return torch.nonzero(self.lm_of < 0).flatten()

    def coverage(self, ids: torch.Tensor | Sequence[int]) -> float:
        """The share of ``ids`` (target token occurrences) that are mapped; NaN for none."""
        ids = torch.as_tensor(ids, dtype=torch.int64).flatten()
        self._check_target_ids(ids)
        return float((self.lm_of[ids] >= 0).double().mean()) if len(ids) else float("nan")

    def restricted_log_probs(self, lm_logits: torch.Tensor) -> torch.Tensor:
        """[n, size] float64: the LM's next-token distribution restricted to the mapped LM tokens and renormalised
        (a log-softmax over those logits only; row i, column j is target token ``target_ids[j]``)."""
        if lm_logits.dim() != 2 or lm_logits.shape[1] < self.lm_vocab_size:
            raise ValueError(f"TokenMapping: need LM logits [n, >= {self.lm_vocab_size}], got {tuple(lm_logits.shape)}")
        return torch.log_softmax(lm_logits[:, self.lm_ids].to(torch.float64), dim=-1)

    def context_ids(self, prefix: Sequence[int]) -> list[int]:
        """The LM input ids for a prefix of target ids (see the module docstring)."""
        ids = [int(t) for t in prefix]
        self._check_target_ids(torch.tensor(ids, dtype=torch.int64))
        return [lm for t in ids for lm in self.context[t]]

    def _check_target_ids(self, ids: torch.Tensor) -> None:
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= self.target_vocab_size):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise ValueError(f"TokenMapping: target token id {bad} is outside [0, {self.target_vocab_size})")


def one_to_one_mapping(
    target_tokenizer: Any,
    lm_tokenizer: Any,
    *,
    target_vocab_size: int | None = None,
    lm_vocab_size: int | None = None,
    max_rank: int | None = None,
) -> TokenMapping:
    """Build the restricted one-to-one mapping (module docstring) from ``target_tokenizer`` to ``lm_tokenizer``.

    ``target_vocab_size`` defaults to ``len(target_tokenizer)`` (ids beyond the tokenizer are unmapped);
    ``lm_vocab_size`` (the LM's output size) defaults to ``len(lm_tokenizer)``: an LM token at or beyond it is an
    error. ``max_rank`` keeps only the first ``max_rank`` versions of each surface (1: exact surface strings only).
    """
    from .priors import surface_strings

    v = len(target_tokenizer) if target_vocab_size is None else target_vocab_size
    n_lm = len(lm_tokenizer) if lm_vocab_size is None else lm_vocab_size
    for name, value in (("target_vocab_size", v), ("lm_vocab_size", n_lm)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"one_to_one_mapping: {name} must be an int >= 1, got {value!r}")
    if max_rank is not None and (isinstance(max_rank, bool) or not isinstance(max_rank, int) or max_rank < 1):
        raise ValueError(f"one_to_one_mapping: max_rank must be an int >= 1 or None, got {max_rank!r}")
    surfaces = surface_strings(target_tokenizer)[:v]
    surfaces += [""] * (v - len(surfaces))
    implicit = any(t.startswith("##") for t in target_tokenizer.convert_ids_to_tokens(list(range(len(surfaces)))) if t)
    versions = [surface_versions(s, implicit_spaces=implicit)[:max_rank] for s in surfaces]
    flat = [(w, r, text) for w, vs in enumerate(versions) for r, text in enumerate(vs)]
    encoded = lm_tokenizer([t for _, _, t in flat], add_special_tokens=False)["input_ids"] if flat else []
    lm_special = set(getattr(lm_tokenizer, "all_special_ids", []) or [])
    claims = sorted(
        (r, w, ids[0]) for (w, r, _), ids in zip(flat, encoded) if len(ids) == 1 and ids[0] not in lm_special
    )
    lm_of = torch.full((v,), -1, dtype=torch.int64)
    rank_of: dict[int, int] = {}
    taken: set[int] = set()
    for r, w, lm in claims:
        if lm_of[w] >= 0 or lm in taken:
            continue
        if lm >= n_lm:
            raise ValueError(f"one_to_one_mapping: the LM tokenizer gave id {lm}, beyond the LM's {n_lm} outputs")
        lm_of[w] = lm
        taken.add(lm)
        rank_of[w] = r
    target_ids = torch.nonzero(lm_of >= 0).flatten()
    beyond = [i for (_, r, _), ids in zip(flat, encoded) if r == 0 for i in ids if i >= n_lm]
    if beyond:
        raise ValueError(f"one_to_one_mapping: the LM tokenizer gave id {beyond[0]}, beyond the LM's {n_lm} outputs")
    # context of an unmapped token: the LM's tokenization of its preferred version
    first = {w: i for i, (w, r, _) in reversed(list(enumerate(flat))) if r == 0}
    context = tuple(
        (int(lm_of[w]),) if lm_of[w] >= 0 else tuple(int(i) for i in encoded[first[w]]) if w in first else ()
        for w in range(v)
    )
    return TokenMapping(
        target_vocab_size=v,
        lm_vocab_size=n_lm,
        target_ids=target_ids,
        lm_ids=lm_of[target_ids].clone(),
        lm_of=lm_of,
        context=context,
        versions_used=tuple(rank_of[int(w)] for w in target_ids),
    )
