"""The audit's learned inverter (``--inverter``, PPFT slots only): the slot-token classifier of
:mod:`textfree.attacks.slot_tokens` (no decoder), trained noise-aware at each grid epsilon on the attacker's own texts
(the attribute cell's attacker part, fresh noise every epoch), then reading the evaluated texts' payloads back.

A small preset (hidden width 256, ``--inverter-epochs`` passes, the first 200 attacker texts): its logits span the
encoder's whole vocabulary (30,522 tokens for MiniLM), so each epsilon costs a few minutes on two CPU cores; that is
why it runs only when asked. Scores: ROUGE-L of the reconstructions against the evaluated texts, beside the ROUGE-L of
the attacker's best constant guess (the medoid of its texts), and the PII units found when a PII column is mapped."""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from .config import AuditConfig

__all__ = ["run_inverter", "INVERTER_TEXTS", "INVERTER_HIDDEN"]

INVERTER_TEXTS = 200
INVERTER_HIDDEN = 256
log = logging.getLogger("textfree.audit")


def _parts(config: AuditConfig) -> tuple[list[str], list[str], list[list[str]] | None]:
    """The attacker's texts, the evaluated texts (the attribute cell's parts) and, with a PII column, each evaluated
    text's PII units."""
    from ..data import load_dataset
    from ..experiments.kinds._attribute_params import _Source
    from ..experiments.kinds._attribute_release import _parts as attribute_parts

    source = _Source(config.data, config.columns, config.columns.attributes)
    train, test = attribute_parts(source, config.split, config.test_share)
    evaluated = test.texts[: config.limit]
    units = None
    if config.columns.pii is not None:
        first: dict[str, list[str]] = {}
        for r in load_dataset(config.data, split=config.split, columns=config.columns):
            first.setdefault(r.text, list(r.pii))
        units = [first.get(t, []) for t in evaluated]
    return train.texts[:INVERTER_TEXTS], evaluated, units


def run_inverter(config: AuditConfig, *, progress: bool = True) -> dict[str, Any]:
    """``{"rows": [{x, rouge_l, rouge_l_prior, pii_exact?}], "n_train", "n_eval", "hidden", "epochs"}``."""
    from ..attacks.learned import medoid_text, score_reconstructions
    from ..attacks.slot_tokens import SlotTokenConfig, slot_targets, slot_tokens_attack, train_slot_inverter
    from ..attacks.threat import ThreatModel
    from ..encoders import load_encoder
    from ..mechanisms import mechanism_from_dict
    from ..mechanisms.transforms import l2_normalize
    from ..metrics.privacy import pii_recovery
    from ..privatizer import Privatizer
    from ..rng import seeded_generator

    train, evaluated, units = _parts(config)
    encoder = load_encoder(None if config.encoder == "default" else config.encoder, kind="contextual")
    clean = Privatizer(encoder, None, config.k).privatize(train)
    rows = torch.cat([clean.vectors[i, :n] for i, n in enumerate(clean.lengths)]).to(torch.float64)
    ids = []
    for start in range(0, len(train), 64):
        enc = encoder.tokenize(train[start : start + 64])
        ids += [row[mask.bool()].cpu() for row, mask in zip(enc["input_ids"], enc["attention_mask"])]
    targets = slot_targets(ids, list(clean.lengths), config.k, encoder.tokenizer.pad_token_id)
    table = encoder.model.get_input_embeddings().weight
    threat = ThreatModel(encoder_queries=True, training_text="in_domain", knows_mechanism=True, knows_parameters=True)
    prior = medoid_text(train)
    seed = config.seeds[0]
    out = []
    for eps in config.epsilons:
        mech = mechanism_from_dict({"name": "l2_laplace", "epsilon": eps})

        def releases(epoch: int, mech=mech) -> torch.Tensor:  # the attacker's own payloads, fresh noise each epoch
            gen = seeded_generator(seed * 100_003 + epoch, warn=False)
            return l2_normalize(mech.sample(rows, generator=gen)).to(torch.float32)

        log.info("audit: slot-token inverter at epsilon %g on %d texts (%d slots)", eps, len(train), len(targets))
        model, _ = train_slot_inverter(
            releases,
            targets,
            table,
            config.k,
            SlotTokenConfig(hidden=INVERTER_HIDDEN, epochs=config.inverter_epochs),
            generator=seeded_generator(seed + 7919, warn=False),
            progress=progress,
        )
        payload = Privatizer(encoder, mech, config.k).privatize(evaluated, generator=seeded_generator(seed, warn=False))
        recon = slot_tokens_attack(model, payload, encoder.tokenizer, threat=threat)
        row = {
            "x": eps,
            "rouge_l": score_reconstructions(recon, evaluated)["rouge_l"],
            "rouge_l_prior": score_reconstructions([prior] * len(evaluated), evaluated)["rouge_l"],
        }
        if units and any(units):
            row["pii_exact"] = pii_recovery(units, recon)["exact"]["micro"]
        else:
            row["pii_exact"] = math.nan
        out.append(row)
    return {
        "rows": out,
        "n_train": len(train),
        "n_eval": len(evaluated),
        "hidden": INVERTER_HIDDEN,
        "epochs": config.inverter_epochs,
    }
