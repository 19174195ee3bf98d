"""Cell kind ``learned_inversion``: how much of a prompt a decoder regenerates from its PPFT payload (PPFT App. H-J, L).

Variants (``params.variant``):

* ``unaware``: the attacker trains an inverter on *clean* payloads of its in-domain text (the PPFT train part):
  stage 2 with the ``restore`` task (target = the private text) from ``params.init``;
* ``aware``: the same, trained on payloads noised by the evaluated mechanism (``epsilon``), fresh noise each epoch;
* ``restoration``: no training; the served PPFT model ``params.model`` is asked to restore the prompt.

``params.init`` is a run directory (a stage-1 run: the *stage-1-aligned* inverter) or a mapping ``{encoder: DIR,
decoder: DIR}``: an unaligned init (that encoder, a fresh projection, the pretrained decoder + fresh LoRA) built
once into ``<out>-init``. The encoder must be the one that made the attacked payloads (query access to it).

Each (point, seed): the first ``eval_limit`` distinct held-out private texts are privatized at ``epsilon`` (null:
clean) with the seed, the model generates from each payload with the restore instruction, and the reconstructions are
scored (:func:`textfree.attacks.learned.score_reconstructions`): ``rouge_l`` (mean ROUGE-L F1), ``rouge_l_recall``,
``bleu``, and on Pri-DDX ``symptoms_recall_text`` / ``antecedents_recall_text``. The no-input reference ``*_prior``
scores one constant guess, the medoid of 100 of the attacker's training texts (Pri-* prompts share a template, so
ROUGE-L is far from 0 without any payload). Beside them the formal guarantee
(``slot_epsilon``, ``prompt_epsilon``: mean slots x slot loss; NaN for clean payloads) and the training figures.
Trained inverters are reused when a finished run with the same training config exists (like ``ppft_stage2``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ...attacks.learned import (
    LEARNED_INVERSION_REQUIRES,
    RESTORATION_REQUIRES,
    learned_inversion_attack,
    restoration_attack,
    score_reconstructions,
)
from ...attacks.threat import NOISE_AWARE_REQUIRES, ThreatModel
from ...rng import seeded_generator
from ..cell import CellError
from ..registry import RunContext, register_cell_kind
from ._grant import granted_threat, require_ppft_dataset
from .ppft import _TRAIN, stage2_model

__all__ = ["learned_inversion", "INVERSION_METRICS", "INVERSION_PARAMS"]

VARIANTS = ("unaware", "aware", "restoration")
INVERSION_METRICS = ("rouge_l", "rouge_l_recall", "bleu", "symptoms_recall_text", "antecedents_recall_text",
                     "rouge_l_prior", "symptoms_recall_text_prior", "antecedents_recall_text_prior",
                     "slot_epsilon", "prompt_epsilon", "n_eval", "eval_wall_s") + _TRAIN
INVERSION_PARAMS = {
    "variant": "unaware (trained on clean payloads), aware (on noisy payloads at epsilon) or restoration (no training)",
    "epsilon": "L2-Laplace epsilon of the evaluated payloads (and of aware training); null: clean payloads",
    "k": "pooling k (default: the init's / model's)",
    "init": "trained variants: a run directory (stage-1-aligned) or {encoder: DIR, decoder: DIR} (unaligned)",
    "model": "restoration: the served PPFT run directory",
    "out": "trained variants: run directory template; {variant} {epsilon} {k} are filled in",
    "epochs": "training epochs (default 6)",
    "max_target_tokens": "decoder tokens of the training targets (default 160)",
    "train_seed": "training seed (default 0)",
    "train_limit": "train on the first N training records only (default: all)",
    "prior_sample": "training texts the no-input reference (their medoid) is chosen from (default 100)",
    "eval_limit": "evaluate the first N distinct held-out private texts (default 100)",
    "max_new_tokens": "generation length (default 160)",
}


def _params(cell: Any, point: dict) -> dict[str, Any]:
    p = dict(cell.resolve(point).params)
    variant = p.get("variant")
    if variant not in VARIANTS:
        raise CellError(f"variant must be one of {list(VARIANTS)}, got {variant!r}", field="params.variant")
    if variant == "restoration":
        if not isinstance(p.get("model"), str) or "init" in p or "out" in p:
            raise CellError("restoration takes `model` (a served PPFT run) and no init/out", field="params.model")
    else:
        init = p.get("init")
        ok = isinstance(init, str) or (isinstance(init, dict) and set(init) == {"encoder", "decoder"}
                                       and all(isinstance(v, str) and v for v in init.values()))
        if not ok or not isinstance(p.get("out"), str) or "model" in p:
            raise CellError("a trained variant takes `init` (a run directory or {encoder, decoder}) and `out`, not `model`", field="params.init")
    eps = p.get("epsilon")
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0):
        raise CellError(f"epsilon must be a number > 0 or null, got {eps!r}", field="params.epsilon")
    if variant == "aware" and eps is None:
        raise CellError("the aware variant trains on noisy payloads: it needs an epsilon", field="params.epsilon")
    if p.get("train_limit") is not None and (isinstance(p["train_limit"], bool) or not isinstance(p["train_limit"], int) or p["train_limit"] < 1):
        raise CellError(f"train_limit must be an integer >= 1, got {p['train_limit']!r}", field="params.train_limit")
    for name, default in (("epochs", 6), ("max_target_tokens", 160), ("eval_limit", 100), ("max_new_tokens", 160), ("train_seed", 0),
                          ("prior_sample", 100)):
        v = p.setdefault(name, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "train_seed" else 1):
            raise CellError(f"{name} must be an integer >= 1, got {v!r}", field=f"params.{name}")
    return p


def _threat(cell: Any, point: dict, variant: str) -> ThreatModel:
    needs = {"restoration": RESTORATION_REQUIRES, "unaware": LEARNED_INVERSION_REQUIRES,
             "aware": LEARNED_INVERSION_REQUIRES.union(NOISE_AWARE_REQUIRES)}[variant]
    return granted_threat(cell.resolve(point).attack, "learned_inversion", f"learned_inversion ({variant})", needs)


def _validate(cell: Any, points: list[dict]) -> None:
    require_ppft_dataset(cell, "learned_inversion", " (pri-ddx or pri-slja)")
    if cell.mechanism is not None:
        raise CellError("learned_inversion takes the noise in params.epsilon (L2-Laplace, as the model), not `mechanism`", field="mechanism")
    for point in points:
        _threat(cell, point, _params(cell, point)["variant"])


def _unaligned_init(init: dict[str, str], out: str, k: int | None) -> str:
    """Build (once) an init run: ``init['encoder']``, a fresh projection, the pretrained decoder + fresh LoRA."""
    from ...ppft.model import TextFreeLM

    path = Path(f"{out}-init")
    if not (path / "textfree_config.json").is_file():
        TextFreeLM.build(init["decoder"], encoder=init["encoder"], k=k or 4).save(path)
    return str(path)


def _model(cell: Any, p: dict[str, Any], context: RunContext):
    from ...ppft.model import TextFreeLM
    from ...ppft.train import Stage2Config

    if p["variant"] == "restoration":
        return context.cached(("model", p["model"]), lambda: (TextFreeLM.load(p["model"]), {}))
    epsilon = p.get("epsilon") if p["variant"] == "aware" else None
    out = str(p["out"]).format(variant=p["variant"], epsilon=epsilon, k=p.get("k"))
    init = p["init"] if isinstance(p["init"], str) else _unaligned_init(p["init"], out, p.get("k"))
    cfg = Stage2Config(init=init, out=out, dataset=cell.dataset, epsilon=epsilon, k=p.get("k"), tasks=["restore"],
                       epochs=p["epochs"], max_target_tokens=p["max_target_tokens"], seed=p["train_seed"], limit=p.get("train_limit"),
                       progress=False)

    return stage2_model(cfg, cell.name, context)


def _prior_text(dataset: str, n: int = 100) -> str:
    """The no-input reference: the attacker's best constant guess, the medoid of ``n`` (``params.prior_sample``) of its
    own training texts (:func:`~textfree.attacks.learned.medoid_text` over the PPFT train part)."""
    from ...attacks.learned import medoid_text
    from ...data import mcqa_prompt, ppft_split

    return medoid_text([mcqa_prompt(r).private for r in ppft_split(dataset)["train"]], n)


def _heldout(dataset: str, limit: int):
    from ...data import mcqa_prompt, ppft_split

    seen: dict[str, Any] = {}
    for r in ppft_split(dataset)["heldout"]:
        seen.setdefault(mcqa_prompt(r).private, r)
    return list(seen.items())[:limit]


@register_cell_kind("learned_inversion", metrics=INVERSION_METRICS, params=INVERSION_PARAMS, validate=_validate,
                    help="ROUGE-L of learned inverters (noise-unaware, noise-aware, stage-1-aligned) and of the restoration instruction on PPFT payloads.")
def learned_inversion(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    import time

    from ...ppft.batches import RESTORE_INSTRUCTION

    p = _params(cell, point)
    threat = _threat(cell, point, p["variant"])
    lm, train_metrics = _model(cell, p, context)
    rows = context.cached(("heldout", cell.dataset, p["eval_limit"]), lambda: _heldout(cell.dataset, p["eval_limit"]))
    texts = [t for t, _ in rows]
    epsilon = p.get("epsilon")
    privatizer = lm.privatizer(epsilon, k=p.get("k"))
    t0 = time.perf_counter()
    payload = privatizer.privatize(texts, generator=seeded_generator(seed, warn=False) if epsilon is not None else None,
                                   public=[RESTORE_INSTRUCTION] * len(texts))
    attack = restoration_attack if p["variant"] == "restoration" else learned_inversion_attack
    recon = attack(lm.server, payload, threat=threat, max_new_tokens=p["max_new_tokens"])
    wall = time.perf_counter() - t0
    for text, guess in list(zip(texts, recon))[:3]:
        context.logger.info("%s %s eps=%s seed %d\n  prompt: %s\n  recon:  %s", cell.name, p["variant"], epsilon, seed, text, guess)
    attributes = None
    if all("symptoms" in r.attributes for _, r in rows):
        attributes = {"symptoms": [r.attributes["symptoms"] for _, r in rows],
                      "antecedents": [r.attributes["antecedents"] for _, r in rows]}
    out = score_reconstructions(recon, texts, attributes)
    n_prior = p.get("prior_sample", 100)
    prior = context.cached(("prior_text", cell.dataset, n_prior), lambda: _prior_text(cell.dataset, n_prior))
    out |= {f"{k}_prior": v for k, v in score_reconstructions([prior] * len(texts), texts, attributes).items()
            if k in ("rouge_l", "symptoms_recall_text", "antecedents_recall_text")}
    nan = math.nan
    slot = privatizer.privatization.slot_loss().epsilon if epsilon is not None else nan
    slots = payload.lengths if epsilon is not None else []
    out |= {"slot_epsilon": slot, "prompt_epsilon": slot * sum(slots) / len(slots) if slots else nan,
            "n_eval": float(len(texts)), "eval_wall_s": wall}
    return out | train_metrics
