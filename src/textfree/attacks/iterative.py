"""Iterative inversion of PPFT payloads: search token sequences whose own payload matches (PPFT Appendix K).

PPFT Appendix K attacks pooled payloads the way Zhang et al. (2025) attack single text embeddings: no inverter is
trained; hypotheses are proposed, re-encoded with the client's encoder (query access), and the one whose pooled,
normalised slots are closest to the payload's (cosine, slot by slot: "pooling-aligned") seeds the next iteration.
The paper proposes with a 3B decoder; none runs here, so this attacker proposes from the encoder itself:

1. **start** (:func:`token_vectors`, :func:`initial_ids`): each vocabulary token's own state (the encoder run on
   ``[CLS] t [SEP]``), centred; slot s of the payload pools the tokens at positions ks..ks+k-1, so each position of
   slot s starts with one of that slot's nearest tokens (:func:`slot_scores`). The payload's slot count fixes the
   length to within k.
2. **propose** (:func:`position_candidates`, each round): for each position, the tokens whose vectors best fill what
   the rest of its slot leaves of the payload's slot (:func:`residual_scores`), among the whole vocabulary and among
   the commonest tokens of the attacker's public text (:func:`frequent_tokens`; function words and punctuation,
   whose own vectors say little out of context), and the slot's nearest tokens.
3. **test** (:func:`block_step`): a slot's cosine depends mostly on its own tokens, so one encoder pass tests one
   move in *every* slot at once; each slot keeps its best gaining move, and the kept moves are applied together when
   the summed cosine rises (else the better half of them, and so on). Moves: every candidate at every offset
   (:func:`substitution_moves`), every order of each slot's tokens and a swap across each slot boundary
   (:func:`permutation_moves`: order reaches a mean only through position and context), random double substitutions
   (:func:`pair_moves`, drawn from a seeded generator), and one token more or fewer (:func:`length_step`).
4. rounds of 2-3 until ``rounds`` or a round that changes nothing (:func:`invert_slots`).

On a clean payload the true token sequence scores every slot cosine 1, the global optimum, so what the search misses
there is the search's limit; noise moves the optimum away from the text, and the search then climbs to text that
fits the noise. It needs query access to the client's encoder (:data:`ITERATIVE_REQUIRES`; the server trained that
encoder, so it can run it at will) and, for the frequent tokens, public text (:data:`ITERATIVE_WITH_TEXT_REQUIRES`);
no knowledge of the noise: under isotropic noise the likelihood of a released direction already rises with its
cosine to the clean slot. No model of language beyond those frequencies: the search knows only what the payload and
the encoder say.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from ..mechanisms.transforms import k_pool, l2_normalize
from .threat import ThreatModel, check_grant, register_attack

__all__ = [
    "ITERATIVE_REQUIRES",
    "ITERATIVE_WITH_TEXT_REQUIRES",
    "IterativeConfig",
    "QueryEncoder",
    "slot_cosines",
    "token_vectors",
    "slot_scores",
    "frequent_tokens",
    "initial_ids",
    "residual_scores",
    "position_candidates",
    "block_step",
    "substitution_moves",
    "permutation_moves",
    "pair_moves",
    "length_step",
    "invert_slots",
    "decode",
    "iterative_attack",
]

ITERATIVE_REQUIRES = ThreatModel(encoder_queries=True)
#: With the frequent-token list of the attacker's public text.
ITERATIVE_WITH_TEXT_REQUIRES = ThreatModel(encoder_queries=True, training_text="public")
#: Candidates of the last position tried as one more token (:func:`length_step`).
LENGTH_CANDIDATES = 4


@dataclass(frozen=True)
class IterativeConfig:
    """The search's budget."""

    rounds: int = field(default=6, metadata={"help": "Rounds of propose + test (a round that changes nothing ends)."})
    candidates: int = field(default=16, metadata={"help": "Candidate tokens per position and round."})
    pairs: int = field(default=24, metadata={"help": "Hypotheses of random double substitutions per round."})
    batch_size: int = field(default=64, metadata={"help": "Hypotheses per encoder forward pass."})

    def __post_init__(self) -> None:
        for name in ("rounds", "candidates", "pairs", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"IterativeConfig.{name} must be an integer >= 1, got {v!r}")


@dataclass
class QueryEncoder:
    """The client's encoder as the attacker queries it: input embeddings in, token states out.

    ``table`` [V, e]: the input-embedding table; ``states(embeds [B, T, e], mask [B, T]) -> [B, T, d]``; ``allowed``
    [V] bool: the tokens a hypothesis may hold (no special or unused tokens); ``cls_id`` / ``sep_id``: the first and
    last token of every tokenization (None: the tokenizer adds none); ``k``: the client's pooling."""

    table: torch.Tensor
    states: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    allowed: torch.Tensor
    cls_id: int | None
    sep_id: int | None
    k: int

    @classmethod
    def from_contextual(cls, encoder: Any, k: int) -> "QueryEncoder":
        """From a :class:`~textfree.encoders.ContextualEncoder` (a Hugging Face encoder taking ``inputs_embeds``)."""
        model, tok = encoder.model, encoder.tokenizer
        table = model.get_input_embeddings().weight.detach()
        allowed = torch.ones(table.shape[0], dtype=torch.bool)
        # the unknown token stands for characters the vocabulary lacks: the client encodes it like any other
        allowed[[i for i in tok.all_special_ids if i < len(allowed) and i != tok.unk_token_id]] = False
        vocab = tok.get_vocab()
        unused = [i for t, i in vocab.items() if t.startswith("[unused") and i < len(allowed)]
        allowed[unused] = False
        probe = tok("a")["input_ids"]
        cls_id = probe[0] if probe[0] in tok.all_special_ids else None
        sep_id = probe[-1] if probe[-1] in tok.all_special_ids else None

        def states(embeds: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state

        return cls(table, states, allowed, cls_id, sep_id, k)

    @property
    def fixed(self) -> tuple[int, int]:
        """How many positions the tokenizer fixes at the start and at the end."""
        return int(self.cls_id is not None), int(self.sep_id is not None)

    def frame(self, content: Sequence[int]) -> list[int]:
        """A hypothesis' content tokens with the tokenizer's first and last token around them."""
        head = [self.cls_id] if self.cls_id is not None else []
        tail = [self.sep_id] if self.sep_id is not None else []
        return head + list(content) + tail


def slot_cosines(enc: QueryEncoder, ids: torch.Tensor, target: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
    """Cosine of each hypothesis' slots with the payload's: ids [B, T] (one length), target [S, d] -> [B, S].

    A hypothesis with another slot count than ``S`` is an error: the payload shows the count."""
    if ids.shape[1] and -(-ids.shape[1] // enc.k) != target.shape[0]:
        raise ValueError(
            f"{ids.shape[1]} tokens make {-(-ids.shape[1] // enc.k)} slots of k={enc.k}, not {len(target)}"
        )
    out = []
    with torch.inference_mode():
        for start in range(0, len(ids), batch_size):
            chunk = ids[start : start + batch_size]
            mask = torch.ones_like(chunk)
            pooled, _ = k_pool(enc.states(enc.table[chunk], mask).float(), mask, enc.k)
            out.append((l2_normalize(pooled) * target.unsqueeze(0)).sum(-1))
    return torch.cat(out)


def token_vectors(enc: QueryEncoder, batch_size: int = 512, *, progress: bool = False) -> torch.Tensor:
    """[V, d]: each token's state alone between the tokenizer's first and last token, centred on the mean over the
    allowed tokens and unit-normalised (rows of disallowed tokens are zero)."""
    from tqdm.auto import tqdm

    ids = torch.nonzero(enc.allowed).flatten()
    head, _ = enc.fixed
    rows = []
    with torch.inference_mode():
        for start in tqdm(range(0, len(ids), batch_size), desc="token vectors", disable=not progress):
            chunk = ids[start : start + batch_size]
            seq = torch.tensor([enc.frame([int(t)]) for t in chunk])
            rows.append(enc.states(enc.table[seq], torch.ones_like(seq))[:, head].float())
    vectors = torch.cat(rows)
    vectors = l2_normalize(vectors - vectors.mean(0))
    out = torch.zeros(enc.table.shape[0], vectors.shape[1])
    out[ids] = vectors
    return out


def slot_scores(target: torch.Tensor, vectors: torch.Tensor, enc: QueryEncoder) -> torch.Tensor:
    """[S, V]: each token's cosine with each payload slot, both centred (the slots on their mean, the vectors by
    :func:`token_vectors`): which tokens a slot's mean leans towards, out of context."""
    centre = l2_normalize(target - target.mean(0)) if len(target) > 1 else target
    scores = centre @ vectors.T
    scores[:, ~enc.allowed] = -math.inf
    return scores


def frequent_tokens(enc: QueryEncoder, tokenizer: Any, texts: Sequence[str], count: int) -> torch.Tensor:
    """The ``count`` commonest allowed tokens of ``texts`` (the attacker's public text), commonest first."""
    from collections import Counter

    counts = Counter(i for t in texts for i in tokenizer(t, truncation=False, verbose=False)["input_ids"])
    ranked = [i for i, _ in counts.most_common() if i < len(enc.allowed) and enc.allowed[i]]
    return torch.tensor(ranked[:count], dtype=torch.int64)


def initial_ids(target: torch.Tensor, vectors: torch.Tensor, enc: QueryEncoder) -> list[int]:
    """The starting content tokens for a payload of ``S`` slots: the offsets of slot s get the slot's nearest tokens
    (:func:`slot_scores`), the nearest first; the length fills every slot (``S * k`` tokens with the tokenizer's
    own)."""
    head, tail = enc.fixed
    n = target.shape[0] * enc.k - head - tail
    top = slot_scores(target, vectors, enc).topk(enc.k, dim=-1).indices  # [S, k]
    return [int(top[(i + head) // enc.k, (i + head) % enc.k]) for i in range(n)]


def residual_scores(enc: QueryEncoder, ids: list[int], target: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    """[len(ids), V]: how well each token would fill each content position given the rest of its slot. Position i of
    slot s would need the state ``x = m * |mean| * t_s - (sum of the slot's other states)`` (m: the slot's tokens,
    ``t_s``: the payload's slot) to make the slot point at ``t_s``; a token scores the cosine of its vector
    (:func:`token_vectors`) with ``x`` centred on the hypothesis' mean state. One encoder pass, no gradient."""
    seq = torch.tensor([enc.frame(ids)])
    with torch.inference_mode():
        states = enc.states(enc.table[seq], torch.ones_like(seq))[0].float()
    head, k = enc.fixed[0], enc.k
    n_tok = states.shape[0]
    slot = torch.arange(n_tok) // k
    sums = torch.zeros(target.shape[0], states.shape[1]).index_add_(0, slot, states)
    sizes = torch.bincount(slot, minlength=target.shape[0]).float().unsqueeze(1)
    norms = (sums / sizes).norm(dim=-1, keepdim=True)
    pos = torch.arange(head, head + len(ids))
    want = sizes[slot[pos]] * norms[slot[pos]] * target[slot[pos]] - (sums[slot[pos]] - states[pos])
    scores = l2_normalize(want - states.mean(0)) @ vectors.T
    scores[:, ~enc.allowed] = -math.inf
    return scores


def position_candidates(
    enc: QueryEncoder,
    ids: list[int],
    target: torch.Tensor,
    vectors: torch.Tensor,
    count: int,
    frequent: torch.Tensor | None = None,
) -> torch.Tensor:
    """[len(ids), count] candidate tokens per content position, none the token already there: taken in turn from
    the residual ranking among the ``frequent`` tokens (the attacker's public text's commonest: the function words
    and punctuation whose own vectors say little out of context, found well by the residual within a short list),
    the residual ranking over the vocabulary (:func:`residual_scores`) and the slot's nearest tokens
    (:func:`slot_scores`), skipping repeats (a vocabulary too small to fill a row repeats the current token: a move
    that changes nothing)."""
    resid = residual_scores(enc, ids, target, vectors)
    static = slot_scores(target, vectors, enc)
    head, k = enc.fixed[0], enc.k
    rankings = [resid.topk(count, dim=-1).indices]
    if frequent is not None and len(frequent):
        sub = resid[:, frequent].topk(min(count, len(frequent)), dim=-1).indices
        rankings.insert(0, frequent[sub])
    slots = (torch.arange(len(ids)) + head) // k
    rankings.append(static.topk(count, dim=-1).indices[slots])
    out = torch.empty(len(ids), count, dtype=torch.int64)
    for i, current in enumerate(ids):
        seen, row = {current}, []
        for depth in range(count):
            for ranking in rankings:
                if depth < ranking.shape[1]:
                    t = int(ranking[i, depth])
                    if t not in seen:
                        seen.add(t)
                        row.append(t)
            if len(row) >= count:
                break
        out[i] = torch.tensor((row + [current] * count)[:count])
    return out


def _accept(
    enc: QueryEncoder,
    ids: list[int],
    current: torch.Tensor,
    changes: list[tuple[float, dict[int, int]]],
    target: torch.Tensor,
    batch_size: int,
) -> tuple[list[int], torch.Tensor, int]:
    """Apply the changes (gain, {position: token}) together when the summed cosine rises, else the better half of
    them, and so on; returns (ids, slot cosines, changes kept)."""
    changes = sorted(changes, key=lambda c: -c[0])
    while changes:
        new = list(ids)
        for _, change in changes:
            for pos, tok in change.items():
                new[pos] = tok
        cos = slot_cosines(enc, torch.tensor([enc.frame(new)]), target, batch_size)[0]
        if cos.sum() > current.sum() + 1e-6:
            return new, cos, len(changes)
        changes = changes[: len(changes) // 2]
    return ids, current, 0


def _slot_of(enc: QueryEncoder, pos: int) -> int:
    return (pos + enc.fixed[0]) // enc.k


def _slot_positions(enc: QueryEncoder, n: int) -> list[list[int]]:
    """The content positions of each slot (the first and last slot may hold fewer: the tokenizer's own tokens)."""
    out: list[list[int]] = [[] for _ in range(_slot_of(enc, n - 1) + 1)] if n else []
    for i in range(n):
        out[_slot_of(enc, i)].append(i)
    return out


Move = tuple[tuple[int, ...], dict[int, int]]  # (the slots it touches, {content position: new token})


def block_step(
    enc: QueryEncoder, ids: list[int], hyps: list[list[Move]], target: torch.Tensor, current: torch.Tensor, batch: int
) -> tuple[list[int], torch.Tensor, int]:
    """Test many moves in few encoder passes: hypothesis b applies all its moves (on disjoint slots) at once; a move
    gains the rise of the cosines of the slots it touches in its hypothesis; each slot keeps its best gaining move
    (moves on several slots against the others by gain), and the kept moves are accepted together (:func:`_accept`).
    Returns (ids, slot cosines, moves made)."""
    hyps = [h for h in hyps if h]
    if not hyps:
        return ids, current, 0
    rows = []
    for moves in hyps:
        new = list(ids)
        for _, change in moves:
            for pos, tok in change.items():
                new[pos] = tok
        rows.append(enc.frame(new))
    cos = slot_cosines(enc, torch.tensor(rows), target, batch)
    best: dict[tuple[int, ...], tuple[float, dict[int, int]]] = {}
    for b, moves in enumerate(hyps):
        for slots, change in moves:
            gain = float(sum(cos[b, s] - current[s] for s in slots))
            if gain > best.get(slots, (0.0, {}))[0]:
                best[slots] = (gain, change)
    taken: set[int] = set()
    kept = []
    for slots, (gain, change) in sorted(best.items(), key=lambda item: -item[1][0]):
        if not taken & set(slots):
            kept.append((gain, change))
            taken |= set(slots)
    return _accept(enc, ids, current, kept, target, batch)


def substitution_moves(enc: QueryEncoder, ids: list[int], cands: torch.Tensor) -> list[list[Move]]:
    """One hypothesis per (offset q, candidate rank c): candidate c written at offset q of every slot."""
    head = enc.fixed[0]
    hyps = []
    for q in range(enc.k):
        positions = [i for i in range(len(ids)) if (i + head) % enc.k == q]
        for c in range(cands.shape[1]):
            hyps.append([((_slot_of(enc, i),), {i: int(cands[i, c])}) for i in positions])
    return hyps


def permutation_moves(enc: QueryEncoder, ids: list[int]) -> list[list[Move]]:
    """One hypothesis per order of k tokens: every slot's tokens put in that order (a slot of m < k content tokens
    takes the orders that keep its m offsets among themselves); order reaches a mean through position and context
    only, so the search sets it here. One more hypothesis swaps the two tokens across every slot boundary."""
    from itertools import permutations

    slots = _slot_positions(enc, len(ids))
    hyps = []
    for order in permutations(range(enc.k)):
        moves = []
        for s, pos in enumerate(slots):
            m = len(pos)
            if any(order[j] >= m for j in range(m)):
                continue
            change = {pos[j]: ids[pos[order[j]]] for j in range(m)}
            if any(ids[p] != t for p, t in change.items()):
                moves.append(((s,), change))
        hyps.append(moves)
    boundary = [
        ((s, s + 1), {slots[s][-1]: ids[slots[s + 1][0]], slots[s + 1][0]: ids[slots[s][-1]]})
        for s in range(len(slots) - 1)
        if slots[s] and slots[s + 1] and ids[slots[s][-1]] != ids[slots[s + 1][0]]
    ]
    return hyps + [boundary]


def pair_moves(
    enc: QueryEncoder, ids: list[int], cands: torch.Tensor, count: int, generator: torch.Generator
) -> list[list[Move]]:
    """``count`` hypotheses of random double substitutions: in every slot, two of its positions get candidates drawn
    from the top half of their lists (what one substitution at a time cannot reach: two tokens that only fit
    together)."""
    slots = _slot_positions(enc, len(ids))
    depth = max(1, cands.shape[1] // 2)
    hyps = []
    for _ in range(count):
        moves = []
        for s, pos in enumerate(slots):
            if len(pos) < 2:
                continue
            pick = torch.randperm(len(pos), generator=generator)[:2].tolist()
            ranks = torch.randint(0, depth, (2,), generator=generator).tolist()
            moves.append(((s,), {pos[j]: int(cands[pos[j], r]) for j, r in zip(pick, ranks)}))
        hyps.append(moves)
    return hyps


def length_step(
    enc: QueryEncoder, ids: list[int], cands: torch.Tensor, target: torch.Tensor, current: torch.Tensor, batch: int
) -> tuple[list[int], torch.Tensor, int]:
    """One token fewer (the last content token dropped) or more (one of the last position's first
    :data:`LENGTH_CANDIDATES` candidates appended), within the payload's slot count; the best if it beats the current
    summed cosine. Returns (ids, slot cosines, 1 if the length moved else 0)."""
    head, tail = enc.fixed
    groups = []  # hypotheses of one length each
    if len(ids) > 1 and -(-(len(ids) - 1 + head + tail) // enc.k) == target.shape[0]:
        groups.append([ids[:-1]])
    if len(ids) + 1 + head + tail <= target.shape[0] * enc.k:
        groups.append([ids + [int(t)] for t in cands[-1, :LENGTH_CANDIDATES]])
    best, best_cos = ids, current
    for group in groups:
        cos = slot_cosines(enc, torch.tensor([enc.frame(o) for o in group]), target, batch)
        top = int(cos.sum(-1).argmax())
        if cos[top].sum() > best_cos.sum() + 1e-6:
            best, best_cos = group[top], cos[top]
    return best, best_cos, int(best is not ids)


def invert_slots(
    enc: QueryEncoder,
    target: torch.Tensor,
    vectors: torch.Tensor,
    config: IterativeConfig,
    frequent: torch.Tensor | None = None,
    *,
    generator: torch.Generator,
) -> tuple[list[int], dict[str, Any]]:
    """Content token ids for one payload's slots ``target`` [S, d] (unit rows), and the trace: the mean slot cosine
    after the start and after each round (``cosine``) and the changes each round made (``moves``)."""
    target = target.float()
    ids = initial_ids(target, vectors, enc)
    current = slot_cosines(enc, torch.tensor([enc.frame(ids)]), target, config.batch_size)[0]
    trace: dict[str, Any] = {"start": list(ids), "cosine": [float(current.mean())], "moves": []}
    for _ in range(config.rounds):
        cands = position_candidates(enc, ids, target, vectors, config.candidates, frequent)
        moved = 0
        for hyps in (
            lambda: substitution_moves(enc, ids, cands),
            lambda: permutation_moves(enc, ids),
            lambda: pair_moves(enc, ids, cands, config.pairs, generator),
        ):
            ids, current, made = block_step(enc, ids, hyps(), target, current, config.batch_size)
            moved += made
        ids, current, lengthened = length_step(enc, ids, cands, target, current, config.batch_size)
        trace["cosine"].append(float(current.mean()))
        trace["moves"].append(moved + lengthened)
        if not moved + lengthened:
            break
    return ids, trace


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """The text of content tokens, special tokens (an unknown-token placeholder too) dropped."""
    special = set(tokenizer.all_special_ids)
    return tokenizer.decode([i for i in ids if i not in special], clean_up_tokenization_spaces=True).strip()


@register_attack(
    "iterative",
    requires=ITERATIVE_REQUIRES,
    description="zero-shot search over token sequences whose own pooled slots match the payload's (PPFT App. K)",
)
def iterative_attack(
    enc: QueryEncoder,
    payload: Any,
    tokenizer: Any,
    *,
    threat: ThreatModel,
    config: IterativeConfig = IterativeConfig(),
    vectors: torch.Tensor | None = None,
    frequent: torch.Tensor | None = None,
    generator: torch.Generator,
    progress: bool | None = False,
) -> tuple[list[str], list[dict[str, Any]]]:
    """One reconstruction per payload row (the searched content tokens, :func:`decode`) and each row's trace
    (:func:`invert_slots`, with ``wall_s``). ``vectors``: :func:`token_vectors`, computed when not given;
    ``frequent``: :func:`frequent_tokens` of the attacker's public text, which then needs ``training_text``."""
    from tqdm.auto import tqdm

    check_grant("iterative", ITERATIVE_REQUIRES, threat)
    if frequent is not None:
        check_grant("iterative", ITERATIVE_WITH_TEXT_REQUIRES, threat)
    if vectors is None:
        vectors = token_vectors(enc, progress=progress)
    texts, traces = [], []
    for i, n in enumerate(
        tqdm(
            list(payload.lengths),
            desc="iterative inversion",
            unit="text",
            disable=None if progress is None else not progress,
        )
    ):
        t0 = time.perf_counter()
        ids, trace = invert_slots(enc, payload.vectors[i, :n], vectors, config, frequent, generator=generator)
        texts.append(decode(tokenizer, ids))
        traces.append(trace | {"wall_s": time.perf_counter() - t0})
    return texts, traces
