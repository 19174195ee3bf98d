"""What cell kind ``attribute_inference`` (:mod:`.attributes`) gives its attackers: the attacker's training part and
the evaluated part of the dataset, their clean inputs (slots, token rows, encoded text), and each release form's
observed release and formal guarantee (:class:`_Release`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ...attacks.attributes import age_bucket
from ...heads.classifier import noisy_rows
from ...mechanisms import SlotPrivatization, center_slots, mechanism_from_dict
from ...mechanisms.slots import pad_slots, repeat_mean_slots
from ...mechanisms.transforms import l2_normalize
from ...results.cell import CellError
from ...rng import seeded_generator
from ..inputs import load_cell_encoder, record_private_text
from ..registry import RunContext
from ._attribute_params import ANSWER_DATASETS, ENCODE_BATCH, _dataset
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


def _ddx_target(record: Any) -> dict[str, Any]:
    a = record.attributes
    return {
        "sex": str(a["sex"]),
        "age": age_bucket(a["age"]),
        "symptoms": list(a["symptoms"]),
        "antecedents": list(a["antecedents"]),
    }


@dataclass
class _Part:
    texts: list[str]
    targets: list[dict[str, Any]]
    labels: list[str] | None


def _dedupe(texts: list[str], targets: list[dict], labels: list[str] | None) -> _Part:
    seen: set[str] = set()
    keep = [i for i, t in enumerate(texts) if t.strip() and not (t in seen or seen.add(t))]
    return _Part(
        [texts[i] for i in keep], [targets[i] for i in keep], None if labels is None else [labels[i] for i in keep]
    )


def _parts(dataset: str, target: str) -> tuple[_Part, _Part]:
    """(attacker's training part, evaluated part), repeated and empty texts dropped. With ``target="answer"`` the one
    attribute is the record's correct answer (and there is no label-only reference: the label is the target)."""
    if dataset in ANSWER_DATASETS:
        from ...data import ppft_split

        split = ppft_split(dataset)
        parts = []
        for name in ("train", "heldout"):
            records = split[name]
            answers = [r.options[r.answer_index] for r in records]
            if target == "answer":
                parts.append(_dedupe([record_private_text(r) for r in records], [{"answer": a} for a in answers], None))
            else:
                parts.append(
                    _dedupe([record_private_text(r) for r in records], [_ddx_target(r) for r in records], answers)
                )
        return parts[0], parts[1]
    from ...data import load_dataset

    parts = []
    for name in ("train", "test"):
        records = load_dataset("trustpilot", split=name)
        parts.append(
            _dedupe(
                [r.text for r in records],
                [{"gender": str(r.attributes["gender"]), "age_cat": str(r.attributes["age_cat"])} for r in records],
                None,
            )
        )
    train, test = parts
    overlap = set(train.texts) & set(test.texts)
    if overlap:  # never evaluate on a text the attacker trained on
        keep = [i for i, t in enumerate(train.texts) if t not in overlap]
        train = _Part(
            [train.texts[i] for i in keep],
            [train.targets[i] for i in keep],
            None if train.labels is None else [train.labels[i] for i in keep],
        )
    return train, test


def _data(cell: Any, target: str, train_limit: int | None, context: RunContext) -> tuple[str, _Part, _Part]:
    """(dataset, the attacker's training part cut to ``train_limit``, the evaluated part cut to ``cell.limit``)."""
    dataset = _dataset(cell, target)
    train, test = context.cached(("parts", target), lambda: _parts(dataset, target))
    if train_limit is not None:
        train = _Part(
            train.texts[:train_limit],
            train.targets[:train_limit],
            None if train.labels is None else train.labels[:train_limit],
        )
    if cell.limit is not None:
        test = _Part(
            test.texts[: cell.limit],
            test.targets[: cell.limit],
            None if test.labels is None else test.labels[: cell.limit],
        )
    return dataset, train, test


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
    train_limit: int | None,
    context: RunContext,
    max_length: int | None = None,
):
    """The clean slots of the training or evaluated texts (cached per run)."""

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

    return context.cached(("slots", part, k, train_limit, max_length), encode)


def _token_rows(cell: Any, part: str, texts: list[str], max_tokens: int, train_limit: int | None, context: RunContext):
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

    return context.cached(("tokens", part, max_tokens, train_limit), build)


@dataclass
class _Release:
    """What one (point, seed) gives the attackers: the clean training inputs, the observed releases, how aware training
    sees the mechanism (``noise`` or ``variants``, made on first use), and the formal guarantee."""

    train: tuple[torch.Tensor, torch.Tensor]
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


def _slots_release(cell, resolved, s, train, test, seed, context) -> _Release:
    mech = mechanism_from_dict(resolved.mechanism)
    train_x, train_m = _clean_slots(cell, "train", train.texts, s.k, s.train_limit, context, s.max_private_tokens)
    test_x, test_m = _clean_slots(cell, "test", test.texts, s.k, s.train_limit, context, s.max_private_tokens)
    subspace_rank = None
    if s.center is not None:  # as the run's client: unit(slot - centre), projected onto its subspace if it has one
        smap, subspace_rank = _client_map(s.center, train_x.shape[-1])
        train_x, test_x = _map_slots(smap, train_x, train_m), _map_slots(smap, test_x, test_m)
    if s.repeat_mean:  # as a repeat_mean client: each prompt's unit mean slot in place of every one of its slots
        train_x, test_x = repeat_mean_slots(train_x, train_m), repeat_mean_slots(test_x, test_m)
    if s.pad_to is not None:  # the client hides the count: filler slots up to pad_to, noised like the prompt's own
        try:
            (train_x, train_m), (test_x, test_m) = (
                pad_slots(train_x, train_m, s.pad_to),
                pad_slots(test_x, test_m, s.pad_to),
            )
        except ValueError as exc:
            raise CellError(str(exc), field="params.pad_to") from None

    noise = _row_noise(mech, normalize=True)
    released = noisy_rows(noise, test_x, test_m, seeded_generator(seed, warn=False))
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
    return _Release((train_x, train_m), (released, test_m), guarantee, lambda: {"noise": noise})


def _tokens_release(cell, resolved, s, train, test, seed, context) -> _Release:
    mech = mechanism_from_dict(resolved.mechanism)
    train_x, train_m, _ = _token_rows(cell, "train", train.texts, s.max_tokens, s.train_limit, context)
    test_x, test_m, own = _token_rows(cell, "test", test.texts, s.max_tokens, s.train_limit, context)

    noise = _row_noise(mech, normalize=False)
    released = noisy_rows(noise, test_x, test_m, seeded_generator(seed, warn=False))
    guarantee = token_guarantee(mech, token_table(cell, context).diameter)
    eps = guarantee["token_epsilon"]
    guarantee |= {
        "prompt_epsilon": float((own * eps).mean()),
        "prompt_epsilon_max": float((own * eps).max()),
        "tokens_per_prompt": float(own.mean()),
        "cosine": _cosine(released, test_x, test_m),
    }
    return _Release((train_x, train_m), (released, test_m), guarantee, lambda: {"noise": noise})


def _text_release(cell, resolved, s, train, test, seed, context) -> _Release:
    mech = t2t_mechanism(s.text, context)
    encoder = context.cached("encoder", lambda: load_cell_encoder(cell, "contextual"))
    released = mech.privatize_detailed(test.texts, generator=seeded_generator(seed, warn=False))

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
        _clean_slots(cell, "train", train.texts, s.k, s.train_limit, context),
        _encode(encoder, released.texts, s.k),
        t2t_guarantee(mech, released),
        variants,
    )


_RELEASE_BUILDERS = {"slots": _slots_release, "tokens": _tokens_release, "t2t": _text_release, "pct2t": _text_release}
