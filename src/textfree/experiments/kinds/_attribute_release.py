"""What cell kind ``attribute_inference`` (:mod:`.attributes`) gives its attackers: the attacker's training and
validation parts and the evaluated part of the dataset (:class:`_Data`), their clean inputs (slots, token rows,
encoded text), and each release form's observed releases and formal guarantee (:class:`_Release`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ...attacks.attributes import attribute_targets, complete_rows, validation_mask
from ...heads.classifier import noisy_rows
from ...mechanisms import SlotPrivatization, center_slots, mechanism_from_dict
from ...mechanisms.slots import pad_slots, repeat_mean_slots
from ...mechanisms.transforms import l2_normalize
from ...results.cell import CellError
from ...rng import seeded_generator
from ..inputs import load_cell_encoder, record_private_text
from ..registry import RunContext
from ._attribute_params import ANSWER, ENCODE_BATCH, _Settings, _Source
from ._t2t import t2t_guarantee, t2t_mechanism
from ._tokens import token_guarantee, token_sequences, token_table


def _client_map(run: str, width: int) -> tuple[torch.Tensor, int]:
    """The run's client slot map (``slot_center.safetensors``): the centre [d], or the centre and its class subspace
    [1 + m, d]; and the subspace's rank m (0: a centre alone)."""
    from ...ppft.checkpoint import load_center_file

    try:
        smap = load_center_file(run, width)
    except (OSError, ValueError) as exc:
        raise CellError(f"params.center: {exc}", field="params.center") from None
    return smap, (smap.shape[0] - 1 if smap.dim() == 2 else 0)


def _map_slots(smap: torch.Tensor, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Clean unit slots [N, S, d] mapped as the run's client does: unit(slot - centre), projected onto the class
    subspace when the map has one, on real slots; zeros elsewhere."""
    return center_slots(x, smap) * m.unsqueeze(-1)


@dataclass
class _Part:
    texts: list[str]
    targets: list[dict[str, Any]]
    labels: list[str] | None

    def take(self, keep: list[int]) -> "_Part":
        return _Part(
            [self.texts[i] for i in keep],
            [self.targets[i] for i in keep],
            None if self.labels is None else [self.labels[i] for i in keep],
        )

    def head(self, n: int | None) -> "_Part":
        return self if n is None else self.take(list(range(min(n, len(self.texts)))))


def _dedupe(texts: list[str], targets: list[dict], labels: list[str] | None) -> _Part:
    seen: set[str] = set()
    keep = [i for i, t in enumerate(texts) if t.strip() and not (t in seen or seen.add(t))]
    return _Part(texts, targets, labels).take(keep)


def _rows(records: list, source: _Source, answers: list[str] | None) -> _Part:
    """A part of the records: their private texts, raw attribute values (by attribute name; None when absent) and
    labels (``answers``: the task's answer of each record, the label-only reference; None: no task label)."""
    texts = [record_private_text(r) for r in records]
    if source.attributes == (ANSWER,):
        return _dedupe(texts, [{"answer": a} for a in answers or []], None)
    # a table's records hold their attributes by name; a registered dataset's by its own field (the column)
    keys = {a.name: a.name if source.columns is not None else a.column for a in source.attributes}
    targets = [{name: r.attributes.get(key) for name, key in keys.items()} for r in records]
    return _dedupe(texts, targets, answers)


def _parts(source: _Source, split: str | None, test_share: float) -> tuple[_Part, _Part]:
    """(attacker's part, evaluated part), repeated and empty texts dropped, no evaluated text in the attacker's part.

    A Pri-* dataset: its PPFT train and held-out parts; trustpilot: its train and test files; a table (path or hub
    name with ``columns``): its rows split by a stable hash of the text, ``test_share`` of them evaluated."""
    from ...data import load_dataset, ppft_split

    if source.ppft:
        split_parts = ppft_split(source.dataset)
        parts = [
            _rows(split_parts[name], source, [r.options[r.answer_index] for r in split_parts[name]])
            for name in ("train", "heldout")
        ]
    elif source.columns is None:
        parts = [_rows(load_dataset(source.dataset, split=name), source, None) for name in ("train", "test")]
    else:
        from ...data.splits import stable_unit_interval

        records = load_dataset(source.dataset, split=split, columns=source.columns)
        whole = _rows(records, source, [r.label for r in records] if source.columns.label is not None else None)
        if source.attributes == (ANSWER,):
            whole = _Part(whole.texts, [{"answer": r} for r in _labels_of(records, whole.texts)], None)
        evaluated = [stable_unit_interval(t, "textfree-attribute-test") < test_share for t in whole.texts]
        parts = [whole.take([i for i, e in enumerate(evaluated) if e is want]) for want in (False, True)]
    train, test = parts
    overlap = set(train.texts) & set(test.texts)
    if overlap:  # never evaluate on a text the attacker trained on
        train = train.take([i for i, t in enumerate(train.texts) if t not in overlap])
    return train, test


def _labels_of(records: list, texts: list[str]) -> list[str | None]:
    """The label of the first record of each text (the answer of a table's ``target: answer``)."""
    first: dict[str, Any] = {}
    for r in records:
        first.setdefault(record_private_text(r), r.label)
    return [first[t] for t in texts]


@dataclass
class _Data:
    """The attacker's training part, its validation part and the evaluated part, targets in the attack's form."""

    kinds: dict[str, str]
    train: _Part
    validation: _Part
    test: _Part
    dropped: int  # rows without a value for some attribute


def _data(cell: Any, s: _Settings, context: RunContext) -> _Data:
    """The parts of one cell: the attacker's part cut to ``train_limit`` and split into training and validation
    (``s.validation``), the evaluated part cut to ``cell.limit``; rows missing an attribute dropped; numeric
    attributes bucketed on the attacker's part."""
    attacker, test = context.cached(
        ("parts", s.target, s.test_share), lambda: _parts(s.source, cell.split, s.test_share)
    )
    names = [a.name for a in s.source.attributes]
    complete = [p.take(complete_rows(p.targets, names)) for p in (attacker, test)]
    dropped = len(attacker.texts) + len(test.texts) - sum(len(p.texts) for p in complete)
    attacker, test = complete[0].head(s.train_limit), complete[1].head(cell.limit)
    if not attacker.texts or not test.texts:
        raise ValueError(
            f"attribute_inference: {len(attacker.texts)} attacker texts and {len(test.texts)} evaluated texts with "
            f"every attribute ({', '.join(names)}); need both > 0"
        )
    kinds, (train_t, test_t) = attribute_targets(s.source.attributes, attacker.targets, test.targets)
    attacker, test = _Part(attacker.texts, train_t, attacker.labels), _Part(test.texts, test_t, test.labels)
    held = validation_mask(attacker.texts, s.validation)
    train = attacker.take([i for i, h in enumerate(held) if not h])
    validation = attacker.take([i for i, h in enumerate(held) if h])
    if not train.texts or not validation.texts:
        raise ValueError(
            f"attribute_inference: the attacker's {len(attacker.texts)} texts give {len(train.texts)} to train on and "
            f"{len(validation.texts)} to validate on at validation={s.validation}; need both > 0"
        )
    return _Data(kinds, train, validation, test, dropped)


def _encode(encoder: Any, texts: list[str], k: int, max_length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Clean unit slots [N, S, d] (zero padding) + slot mask [N, S]: the client's payload without noise; with
    ``max_length`` each text cut to that many encoder tokens first (a PPFT client's ``max_private_tokens``)."""
    from ...privatizer import Privatizer

    own = encoder.max_length
    if max_length is not None:
        encoder.max_length = max_length  # the encoder is shared within the run: restored below
    try:
        payload = Privatizer(encoder, None, k, batch_size=ENCODE_BATCH).privatize(texts)
    finally:
        encoder.max_length = own
    return payload.vectors, payload.mask


def _clean_slots(
    cell: Any,
    part: str,
    texts: list[str],
    k: int,
    context: RunContext,
    max_length: int | None = None,
):
    """The clean slots of the training, validation or evaluated texts (cached per run and text list)."""

    def encode():
        encoder = context.cached("encoder", lambda: load_cell_encoder(cell, "contextual"))
        context.logger.info(
            "attribute_inference: encoding %d %s texts with %s, k=%d, at most %s tokens",
            len(texts),
            part,
            encoder.name,
            k,
            max_length or encoder.max_length,
        )
        return _encode(encoder, texts, k, max_length)

    return context.cached(("slots", part, k, max_length, len(texts), hash(tuple(texts))), encode)


def _token_rows(cell: Any, part: str, texts: list[str], max_tokens: int, context: RunContext):
    """Clean token embeddings [N, S, d] (zero padding), the position mask [N, S] and each text's own-token count."""

    def build():
        tt = token_table(cell, context)
        seqs, own = token_sequences(tt.tokenizer, texts, max_tokens)
        width = max(len(q) for q in seqs)
        x = torch.zeros(len(seqs), width, tt.table.shape[1])
        mask = torch.zeros(len(seqs), width, dtype=torch.bool)
        for i, q in enumerate(seqs):
            x[i, : len(q)] = tt.table[q]
            mask[i, : len(q)] = True
        context.logger.info(
            "attribute_inference: %d %s texts, %d tokens (table %s)",
            len(texts),
            part,
            int(mask.sum()),
            tuple(tt.table.shape),
        )
        return x, mask, torch.tensor([int(o.sum()) for o in own], dtype=torch.float64)

    return context.cached(("tokens", part, max_tokens, len(texts), hash(tuple(texts))), build)


@dataclass
class _Release:
    """What one (point, seed) gives the attackers: the clean training inputs, the released validation inputs (the
    auditor's, to choose the attacker on), the observed releases, how aware training sees the mechanism (``noise`` or
    ``variants``, made on first use), and the formal guarantee."""

    train: tuple[torch.Tensor, torch.Tensor]
    validation: tuple[torch.Tensor, torch.Tensor]
    observed: tuple[torch.Tensor, torch.Tensor]
    guarantee: dict[str, float]
    make_aware: Callable[[], dict]
    _aware: dict | None = field(default=None, repr=False)

    def aware(self) -> dict:
        if self._aware is None:
            self._aware = self.make_aware()
        return self._aware


def _row_noise(mech: Any, *, normalize: bool) -> Callable[[torch.Tensor, torch.Generator], torch.Tensor]:
    """The client's noise on rows [n, d]: the mechanism's sample (then renormalised for PPFT slots), float32."""

    def noise(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        y = mech.sample(x.to(torch.float64), generator=generator)
        return (l2_normalize(y) if normalize else y).to(torch.float32)

    return noise


def _cosine(released: torch.Tensor, clean: torch.Tensor, mask: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(released[mask], clean[mask], dim=-1).mean())


#: The validation releases draw from their own stream: the evaluated release of a seed is what it was before.
_VALIDATION_SEED = 1_000_003


def _slots_release(cell, resolved, s, train, validation, test, seed, context) -> _Release:
    mech = mechanism_from_dict(resolved.mechanism)
    parts = [
        _clean_slots(cell, name, part.texts, s.k, context, s.max_private_tokens)
        for name, part in (("train", train), ("validation", validation), ("test", test))
    ]
    subspace_rank = None
    if s.center is not None:  # as the run's client: unit(slot - centre), projected onto its subspace if it has one
        smap, subspace_rank = _client_map(s.center, parts[0][0].shape[-1])
        parts = [(_map_slots(smap, x, m), m) for x, m in parts]
    if s.repeat_mean:  # as a repeat_mean client: each prompt's unit mean slot in place of every one of its slots
        parts = [(repeat_mean_slots(x, m), m) for x, m in parts]
    if s.pad_to is not None:  # the client hides the count: filler slots up to pad_to, noised like the prompt's own
        try:
            parts = [pad_slots(x, m, s.pad_to) for x, m in parts]
        except ValueError as exc:
            raise CellError(str(exc), field="params.pad_to") from None
    (train_x, train_m), (val_x, val_m), (test_x, test_m) = parts

    noise = _row_noise(mech, normalize=True)
    released = noisy_rows(noise, test_x, test_m, seeded_generator(seed, warn=False))
    val_released = noisy_rows(noise, val_x, val_m, seeded_generator(seed + _VALIDATION_SEED, warn=False))
    slots = test_m.sum(1).to(torch.float64)
    slot_eps = SlotPrivatization(noise=mech, k=s.k, pad_to=s.pad_to, repeat_mean=s.repeat_mean).slot_loss().epsilon
    guarantee = {
        "slot_epsilon": slot_eps,
        "prompt_epsilon": float((slots * slot_eps).mean()),
        "prompt_epsilon_max": float((slots * slot_eps).max()),
        "slots_per_prompt": float(slots.mean()),
        "cosine": float((released * test_x).sum(-1)[test_m].mean()),
    }
    if subspace_rank is not None:  # the run's map: 0 for a centre alone, else the rank of its class subspace
        guarantee["subspace_rank"] = subspace_rank
    return _Release((train_x, train_m), (val_released, val_m), (released, test_m), guarantee, lambda: {"noise": noise})


def _tokens_release(cell, resolved, s, train, validation, test, seed, context) -> _Release:
    mech = mechanism_from_dict(resolved.mechanism)
    train_x, train_m, _ = _token_rows(cell, "train", train.texts, s.max_tokens, context)
    val_x, val_m, _ = _token_rows(cell, "validation", validation.texts, s.max_tokens, context)
    test_x, test_m, own = _token_rows(cell, "test", test.texts, s.max_tokens, context)

    noise = _row_noise(mech, normalize=False)
    released = noisy_rows(noise, test_x, test_m, seeded_generator(seed, warn=False))
    val_released = noisy_rows(noise, val_x, val_m, seeded_generator(seed + _VALIDATION_SEED, warn=False))
    guarantee = token_guarantee(mech, token_table(cell, context).diameter)
    eps = guarantee["token_epsilon"]
    guarantee |= {
        "prompt_epsilon": float((own * eps).mean()),
        "prompt_epsilon_max": float((own * eps).max()),
        "tokens_per_prompt": float(own.mean()),
        "cosine": _cosine(released, test_x, test_m),
    }
    return _Release((train_x, train_m), (val_released, val_m), (released, test_m), guarantee, lambda: {"noise": noise})


def _text_release(cell, resolved, s, train, validation, test, seed, context) -> _Release:
    mech = t2t_mechanism(s.text, context)
    encoder = context.cached("encoder", lambda: load_cell_encoder(cell, "contextual"))
    released = mech.privatize_detailed(test.texts, generator=seeded_generator(seed, warn=False))
    val_released = mech.privatize(validation.texts, generator=seeded_generator(seed + _VALIDATION_SEED, warn=False))

    def variants() -> dict:
        generator = seeded_generator(seed + 104_729, warn=False)
        runs = []
        for r in range(s.rounds):
            context.logger.info(
                "attribute_inference: %s eta=%s, the attacker's run %d/%d over %d training texts",
                s.release,
                s.text["eta"],
                r + 1,
                s.rounds,
                len(train.texts),
            )
            runs.append(_encode(encoder, mech.privatize(train.texts, generator=generator), s.k))
        return {"variants": runs}

    return _Release(
        _clean_slots(cell, "train", train.texts, s.k, context),
        _encode(encoder, val_released, s.k),
        _encode(encoder, released.texts, s.k),
        t2t_guarantee(mech, released),
        variants,
    )


_RELEASE_BUILDERS = {"slots": _slots_release, "tokens": _tokens_release, "t2t": _text_release, "pct2t": _text_release}
