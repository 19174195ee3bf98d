"""Cell kind ``learned_inversion``: how much of a prompt a decoder regenerates from its PPFT payload (PPFT App. H-J, L).

Variants (``params.variant``):

* ``unaware``: the attacker trains an inverter on *clean* payloads of its in-domain text (the PPFT train part):
  stage 2 with the ``restore`` task (target = the private text) from ``params.init``;
* ``aware``: the same, trained on payloads noised by the evaluated mechanism (``epsilon``), fresh noise each epoch;
* ``restoration``: no training; the served PPFT model ``params.model`` is asked to restore the prompt.

``params.inverter`` picks the trained model: ``decoder`` (default; the PPFT-shaped inverter above) or
``slot_tokens`` (:mod:`textfree.attacks.slot_tokens`: a classifier of the tokens pooled into each slot, no decoder,
trained on the attacker's own clean or noisy slots; ``init`` is then the run whose client made the payloads, and the
classifier is saved as ``<out>/slot_tokens.safetensors`` + ``slot_tokens.json``, reused when the settings match;
with ``fixed_slots`` the init run's client pads, and the classifier learns filler slots as the pad token), or
``iterative`` (:mod:`textfree.attacks.iterative`, PPFT Appendix K: nothing is trained; a search over token sequences
re-encodes its hypotheses with the client's encoder of the run ``init`` and keeps those whose slots are closest to the
payload's; variant ``unaware`` only, no ``out``; ``rounds``, ``candidates``, ``pairs`` set its budget, ``frequent``
the commonest tokens of ``train_text`` it also tries everywhere, 0 for none, the zero-shot attacker of encoder queries
alone). The iterative inverter adds ``start_rouge_l`` (its starting text: each slot's nearest tokens), the mean slot
cosine of its start (``start_cosine``) and of its result with the payload (``search_cosine``), that of the true text's
own clean slots (``true_cosine``: 1 on clean payloads; a search that ends above it has found text the payload fits
better than the truth, so the noise, not the search, bounds it) and ``s_per_text``.

``params.init`` is a run directory (a stage-1 run: the *stage-1-aligned* inverter; a stage-2 run: the server's own
served model, whose client, centre included, makes the payloads) or a mapping ``{encoder: DIR, decoder: DIR}``: an
unaligned init (that encoder, a fresh projection, the pretrained decoder + fresh LoRA) built once into
``<out>-init``. The result records which as ``init_stage`` (1, 2; 0 for a model built and never trained). The encoder
must be the one that made the attacked payloads (query access to it).

The attacker's text: on a Pri-* dataset the PPFT train part (in-domain text, ``training_text: in_domain``); with
``params.train_text`` (public instruction sources such as alpaca, lima, gsm8k:train) that public text instead
(``training_text: public`` suffices). A dataset other than Pri-* (PUPA, Presidio: free text with PII units) needs
``train_text`` for the trained variants: its records are only ever evaluated.

Each (point, seed): the first ``eval_limit`` distinct evaluated texts (Pri-*: the held-out split; otherwise the
dataset's records) that the client does not cut (at most the model's ``max_private_tokens`` encoder tokens, so no
reference holds text the payload never carried) are privatized at ``epsilon`` (null: clean) with the seed, the model
generates from each payload with the restore instruction, and the reconstructions are scored
(:func:`textfree.attacks.learned.score_reconstructions`): ``rouge_l`` (mean ROUGE-L F1), ``rouge_l_recall``,
``bleu``, on Pri-DDX ``symptoms_recall_text`` / ``antecedents_recall_text``, and on records with PII units
(:func:`textfree.metrics.privacy.pii_recovery`, micro shares) ``pii_exact`` / ``pii_fuzzy`` and ``n_pii_units``. The
no-input reference ``*_prior`` scores one constant guess, the medoid of 100 of the attacker's training texts (Pri-*
prompts share a template, so ROUGE-L is far from 0 without any payload). Beside them the formal guarantee
(``slot_epsilon``, ``prompt_epsilon``: mean slots x slot loss; NaN for clean payloads) and the training figures.
Trained inverters are reused when a finished run with the same training config exists (like ``ppft_stage2``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ...atomic import atomic_save_tensors, atomic_write_text
from ...attacks.iterative import ITERATIVE_REQUIRES, ITERATIVE_WITH_TEXT_REQUIRES
from ...attacks.learned import (
    LEARNED_INVERSION_REQUIRES,
    RESTORATION_REQUIRES,
    learned_inversion_attack,
    restoration_attack,
    score_reconstructions,
)
from ...attacks.slot_tokens import SLOT_TOKENS_REQUIRES, slot_tokens_attack
from ...attacks.threat import NOISE_AWARE_REQUIRES, ThreatModel
from ...data.registry import is_ppft_dataset
from ...metrics.privacy import pii_recovery
from ...results.cell import CellError
from ...rng import seeded_generator
from ..inputs import record_private_text
from ..registry import RunContext, register_cell_kind
from ._builds import record_read_builds
from ._grant import granted_threat
from .ppft import _TRAIN, stage2_model

__all__ = ["learned_inversion", "INVERSION_METRICS", "INVERSION_PARAMS"]

VARIANTS = ("unaware", "aware", "restoration")
INVERTERS = ("decoder", "slot_tokens", "iterative")
ITERATIVE_PARAMS = ("rounds", "candidates", "pairs", "frequent")
SLOT_TOKENS_FILE, SLOT_TOKENS_JSON = "slot_tokens.safetensors", "slot_tokens.json"
INVERSION_METRICS = (
    "rouge_l",
    "rouge_l_recall",
    "bleu",
    "symptoms_recall_text",
    "antecedents_recall_text",
    "rouge_l_prior",
    "symptoms_recall_text_prior",
    "antecedents_recall_text_prior",
    "pii_exact",
    "pii_fuzzy",
    "pii_exact_prior",
    "pii_fuzzy_prior",
    "n_pii_units",
    "slot_epsilon",
    "prompt_epsilon",
    "padded_slots",
    "centred",
    "init_stage",
    "n_eval",
    "eval_wall_s",
    "start_rouge_l",
    "start_cosine",
    "search_cosine",
    "true_cosine",
    "s_per_text",
) + _TRAIN
INVERSION_PARAMS = {
    "variant": "unaware (trained on clean payloads), aware (on noisy payloads at epsilon) or restoration (no training)",
    "inverter": "trained variants: decoder (default; projection + LoRA decoder regenerating the prompt) or slot_tokens "
    "(a classifier of each slot's tokens, no decoder); unaware: iterative (no training: a search re-encoding token "
    "sequences with init's client encoder, PPFT Appendix K)",
    "rounds": "iterative: search rounds (default 6; a round that changes nothing ends the search)",
    "candidates": "iterative: candidate tokens per position and round (default 16)",
    "pairs": "iterative: hypotheses of random double substitutions per round (default 24)",
    "frequent": "iterative: the N commonest tokens of train_text tried at every position (default 256 with "
    "train_text, else 0: encoder queries alone)",
    "hidden": "slot_tokens: width of the classifier's MLP (default 768)",
    "epsilon": "L2-Laplace epsilon of the evaluated payloads (and of aware training); null: clean payloads",
    "k": "pooling k (default: the init's / model's)",
    "init": "trained variants: a run directory (a stage-1 run: stage-1-aligned; a stage-2 run: the served model) or "
    "{encoder: DIR, decoder: DIR} (unaligned)",
    "model": "restoration: the served PPFT run directory; {epsilon} {k} are filled in",
    "out": "trained variants: run directory template; {variant} {epsilon} {k} and {init_name} (the init run "
    "directory's name, for a grid over params.init) are filled in",
    "epochs": "training epochs (default 6; slot_tokens 12)",
    "max_target_tokens": "decoder tokens of the training targets (default 160)",
    "train_seed": "training seed (default 0)",
    "train_limit": "train on the first N training records only (default: all)",
    "train_text": "the attacker's text is public: these instruction sources (alpaca, lima, gsm8k:train; default: the "
    "Pri-* train part)",
    "train_text_limit": "with train_text: read at most N records of each source",
    "train_decoder": "trained variants: also train every base-decoder weight (full fine-tuning; default false: LoRA + "
    "projection)",
    "fixed_slots": "trained variants: the client pads every payload to ceil(max_private_tokens / k) slots, hiding the "
    "length (default false; slot_tokens: the init run's client padded, and the classifier trained on "
    "padded payloads)",
    "max_private_tokens": "trained variants: the client cuts private text at this many encoder tokens (default: the "
    "init's)",
    "lr": "trained variants: peak learning rate (default: Stage2Config's)",
    "prior_sample": "training texts the no-input reference (their medoid) is chosen from (default 100)",
    "eval_limit": "evaluate the first N distinct held-out private texts (default 100)",
    "columns": "an evaluated path or hub dataset in any layout: {text: COLUMN, pii: COLUMN, names: [...]} (the CLI's "
    "--text-column, --pii-column, --columns)",
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
    elif p.get("inverter") == "iterative":
        if not isinstance(p.get("init"), str) or "out" in p or "model" in p:
            raise CellError(
                "the iterative inverter trains nothing: it takes `init` (the run whose client made the payloads), no "
                "out or model",
                field="params.init" if not isinstance(p.get("init"), str) else "params.out",
            )
    else:
        init = p.get("init")
        ok = isinstance(init, str) or (
            isinstance(init, dict)
            and set(init) == {"encoder", "decoder"}
            and all(isinstance(v, str) and v for v in init.values())
        )
        if not ok or not isinstance(p.get("out"), str) or "model" in p:
            raise CellError(
                "a trained variant takes `init` (a run directory or {encoder, decoder}) and `out`, not `model`",
                field="params.init",
            )
    inverter = p.setdefault("inverter", "decoder")
    if inverter not in INVERTERS:
        raise CellError(f"inverter must be one of {list(INVERTERS)}, got {inverter!r}", field="params.inverter")
    if inverter == "slot_tokens":
        if variant == "restoration":
            raise CellError("restoration trains nothing: it takes no inverter", field="params.inverter")
        if not isinstance(p.get("init"), str):
            raise CellError(
                "the slot_tokens inverter takes `init` as a run directory (the client that made the payloads)",
                field="params.init",
            )
        wrong = [n for n in ("train_decoder", "max_target_tokens", "max_new_tokens", "max_private_tokens") if n in p]
        if wrong:
            raise CellError(
                f"the slot_tokens inverter has no decoder and takes the init run's client as it is: drop {wrong}",
                field=f"params.{wrong[0]}",
            )
        p.setdefault("epochs", 12)
        hidden = p.setdefault("hidden", 768)
        if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
            raise CellError(f"hidden must be an integer >= 1, got {hidden!r}", field="params.hidden")
    elif inverter == "iterative":
        if variant != "unaware":
            raise CellError(
                "the iterative inverter reads no noise and trains nothing: variant unaware only", field="params.variant"
            )
        wrong = [
            n
            for n in (
                "train_decoder",
                "max_target_tokens",
                "max_new_tokens",
                "max_private_tokens",
                "epochs",
                "lr",
                "train_limit",
                "train_seed",
                "hidden",
                "fixed_slots",
            )
            if n in p
        ]
        if wrong:
            raise CellError(
                f"the iterative inverter trains nothing and takes the init run's client as it is: drop {wrong}",
                field=f"params.{wrong[0]}",
            )
        for name, default in (
            ("rounds", 6),
            ("candidates", 16),
            ("pairs", 24),
            ("frequent", 256 if p.get("train_text") else 0),
        ):
            v = p.setdefault(name, default)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "frequent" else 1):
                low = 0 if name == "frequent" else 1
                raise CellError(f"{name} must be an integer >= {low}, got {v!r}", field=f"params.{name}")
        if p["frequent"] and not p.get("train_text"):
            raise CellError(
                "frequent tokens are counted in the attacker's public text: give train_text or frequent: 0",
                field="params.frequent",
            )
    elif "hidden" in p:
        raise CellError("hidden applies to the slot_tokens inverter only", field="params.hidden")
    if inverter != "iterative" and any(n in p for n in ITERATIVE_PARAMS):
        name = next(n for n in ITERATIVE_PARAMS if n in p)
        raise CellError(f"{name} applies to the iterative inverter only", field=f"params.{name}")
    eps = p.get("epsilon")
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0):
        raise CellError(f"epsilon must be a number > 0 or null, got {eps!r}", field="params.epsilon")
    if variant == "aware" and eps is None:
        raise CellError("the aware variant trains on noisy payloads: it needs an epsilon", field="params.epsilon")
    for name in ("train_limit", "train_text_limit"):
        v = p.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise CellError(f"{name} must be an integer >= 1, got {v!r}", field=f"params.{name}")
    if variant == "restoration" and ("train_decoder" in p or "lr" in p):
        raise CellError(
            "restoration trains nothing: it takes no train_decoder or lr",
            field="params.train_decoder" if "train_decoder" in p else "params.lr",
        )
    if not isinstance(p.setdefault("train_decoder", False), bool):
        raise CellError(
            f"train_decoder must be true or false, got {p['train_decoder']!r}", field="params.train_decoder"
        )
    if not isinstance(p.setdefault("fixed_slots", False), bool):
        raise CellError(f"fixed_slots must be true or false, got {p['fixed_slots']!r}", field="params.fixed_slots")
    if variant == "restoration" and (p["fixed_slots"] or "max_private_tokens" in p):
        raise CellError(
            "restoration uses the served model's client as it is: no fixed_slots or max_private_tokens",
            field="params.fixed_slots" if p["fixed_slots"] else "params.max_private_tokens",
        )
    tokens = p.get("max_private_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise CellError(
            f"max_private_tokens must be an integer >= 1, got {tokens!r}", field="params.max_private_tokens"
        )
    lr = p.get("lr")
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < 1):
        raise CellError(f"lr must be a number in (0, 1), got {lr!r}", field="params.lr")
    text = p.get("train_text")
    if text is not None:
        if not isinstance(text, list) or not text or not all(isinstance(s, str) and s for s in text):
            raise CellError(
                f"train_text must be a non-empty list of source names like [alpaca, 'gsm8k:train'], got {text!r}",
                field="params.train_text",
            )
        if variant == "restoration":
            raise CellError("restoration trains nothing: it takes no train_text", field="params.train_text")
    elif p.get("train_text_limit") is not None:
        raise CellError("train_text_limit applies to train_text only", field="params.train_text_limit")
    for name, default in (
        ("epochs", 6),
        ("max_target_tokens", 160),
        ("eval_limit", 100),
        ("max_new_tokens", 160),
        ("train_seed", 0),
        ("prior_sample", 100),
    ):
        v = p.setdefault(name, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "train_seed" else 1):
            raise CellError(f"{name} must be an integer >= 1, got {v!r}", field=f"params.{name}")
    return p


def _threat(cell: Any, point: dict, p: dict[str, Any]) -> ThreatModel:
    variant = p["variant"]
    if p["inverter"] == "iterative":  # encoder queries; with frequent tokens, the public text they are counted in
        needs = ITERATIVE_WITH_TEXT_REQUIRES if p["frequent"] else ITERATIVE_REQUIRES
        return granted_threat(cell.resolve(point).attack, "learned_inversion", f"iterative ({variant})", needs)
    needs = (
        RESTORATION_REQUIRES
        if variant == "restoration"
        else (SLOT_TOKENS_REQUIRES if p["inverter"] == "slot_tokens" else LEARNED_INVERSION_REQUIRES)
    )
    if variant != "restoration" and p.get("train_text") is None:
        needs = needs.union(ThreatModel(training_text="in_domain"))  # it trains on the Pri-* train part
    if variant == "aware":
        needs = needs.union(NOISE_AWARE_REQUIRES)
    name = "slot_tokens" if p["inverter"] == "slot_tokens" else "learned_inversion"
    return granted_threat(cell.resolve(point).attack, "learned_inversion", f"{name} ({variant})", needs)


def _validate(cell: Any, points: list[dict]) -> None:
    if cell.dataset is None:
        raise CellError(
            "learned_inversion needs a dataset: Pri-* (pri-ddx, pri-slja), free text with PII units (pupa, presidio), "
            "or a path / hub dataset with params.columns",
            field="dataset",
        )
    if cell.mechanism is not None:
        raise CellError(
            "learned_inversion takes the noise in params.epsilon (L2-Laplace, as the model), not `mechanism`",
            field="mechanism",
        )
    columns = (cell.params or {}).get("columns")
    if columns is not None:
        from ...data.table import ColumnMap

        try:
            ColumnMap.from_dict(columns if isinstance(columns, dict) else {"text": None})
        except ValueError as exc:
            raise CellError(str(exc), field="params.columns") from None
    for point in points:
        p = _params(cell, point)
        if not is_ppft_dataset(cell.dataset) and p["variant"] != "restoration" and p.get("train_text") is None:
            raise CellError(
                f"{cell.dataset!r} is only evaluated: a trained inverter on it needs params.train_text (the attacker's "
                "public text; the iterative inverter: for the no-input reference)",
                field="params.train_text",
            )
        _threat(cell, point, p)


def _out_dir(p: dict[str, Any], epsilon: float | None) -> str:
    """``params.out`` filled in: {variant} {epsilon} {k}, and {init_name}, the init run directory's name (an unaligned
    init, given as encoder + decoder, has none: "unaligned")."""
    init_name = Path(p["init"]).name if isinstance(p.get("init"), str) else "unaligned"
    return str(p["out"]).format(variant=p["variant"], epsilon=epsilon, k=p.get("k"), init_name=init_name)


def _init_stage(init: str) -> float:
    """What a decoder inverter starts from: 1 a stage-1 run (PPFT Appendix J's stage-1-aligned inverter), 2 a stage-2
    run (the server's own served model), 0 a model built and not trained (no summary.json: an unaligned init)."""
    from ...atomic import read_json

    if not (Path(init) / "summary.json").is_file():
        return 0.0
    stage = read_json(Path(init) / "summary.json").get("stage")
    if stage not in ("stage1", "stage2"):
        raise CellError(
            f"params.init {init!r}: its summary.json names stage {stage!r}, not stage1 or stage2", field="params.init"
        )
    return 1.0 if stage == "stage1" else 2.0


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
        model = str(p["model"]).format(epsilon=p.get("epsilon"), k=p.get("k"))
        return context.cached(("model", model), lambda: (TextFreeLM.load(model), {}))
    epsilon = p.get("epsilon") if p["variant"] == "aware" else None
    out = _out_dir(p, epsilon)
    init = p["init"] if isinstance(p["init"], str) else _unaligned_init(p["init"], out, p.get("k"))
    dataset = cell.dataset if is_ppft_dataset(cell.dataset) else Stage2Config.dataset  # unused with train_text
    cfg = Stage2Config(
        init=init,
        out=out,
        dataset=dataset,
        epsilon=epsilon,
        k=p.get("k"),
        tasks=["restore"],
        epochs=p["epochs"],
        max_target_tokens=p["max_target_tokens"],
        seed=p["train_seed"],
        limit=p.get("train_limit"),
        restore_text=p.get("train_text"),
        restore_text_limit=p.get("train_text_limit"),
        train_decoder=p["train_decoder"] or None,
        fixed_slots=p["fixed_slots"] or None,
        max_private_tokens=p.get("max_private_tokens"),
        progress=False,
        **({"lr": p["lr"]} if p.get("lr") else {}),
    )
    stage = _init_stage(init)
    lm, metrics = stage2_model(cfg, cell.name, context)
    return lm, metrics | {"init_stage": stage}


def _attacker_texts(dataset: str, p: dict[str, Any], *, distinct: bool = False) -> list[str]:
    """The attacker's own text: ``train_text`` (public instruction sources) or the Pri-* train part's prompts (each
    once with ``distinct``; the no-input reference keeps the rows as they are)."""
    from ...data import mcqa_prompt, ppft_split
    from ...ppft.batches import general_examples

    if p.get("train_text") is not None:
        return [ex.private for ex in general_examples(p["train_text"], limit_per_source=p.get("train_text_limit"))]
    prompts = [mcqa_prompt(r).private for r in ppft_split(dataset)["train"]]
    return list(dict.fromkeys(prompts)) if distinct else prompts


def _slot_model(cell: Any, p: dict[str, Any], context: RunContext):
    """(the init run, the slot-token classifier, training metrics): loaded from ``out`` when it holds one trained with
    the same settings, else trained on the attacker's own payloads (clean, or fresh noise at ``epsilon`` each epoch)."""
    import json
    import time

    import torch
    from safetensors.torch import load_file

    from ...attacks.slot_tokens import SlotTokenConfig, SlotTokenInverter, slot_targets, train_slot_inverter
    from ...ppft.batches import ClientCache, TextExample
    from ...ppft.model import TextFreeLM

    lm = context.cached(("slot_init", p["init"]), lambda: TextFreeLM.load(p["init"]))
    epsilon = p.get("epsilon") if p["variant"] == "aware" else None
    out = Path(_out_dir(p, epsilon))
    settings = {
        "init": p["init"],
        "variant": p["variant"],
        "epsilon": epsilon,
        "k": p.get("k"),
        "dataset": cell.dataset,
        "train_text": p.get("train_text"),
        "train_text_limit": p.get("train_text_limit"),
        "train_limit": p.get("train_limit"),
        "epochs": p["epochs"],
        "lr": p.get("lr"),
        "hidden": p["hidden"],
        "train_seed": p["train_seed"],
        "fixed_slots": p["fixed_slots"],
    }
    privatizer = lm.privatizer(epsilon, k=p.get("k"), fixed_slots=p["fixed_slots"] or None)
    k, pad_to = privatizer.privatization.k, privatizer.privatization.pad_to
    table = lm.encoder.model.get_input_embeddings().weight

    def fit():
        saved = out / SLOT_TOKENS_JSON
        if saved.is_file() and json.loads(saved.read_text()).get("settings") == settings:
            record = json.loads(saved.read_text())
            model = SlotTokenInverter(lm.config.encoder_dim, k, p["hidden"], table)
            model.load_state_dict(load_file(out / SLOT_TOKENS_FILE) | {"table": model.table})
            context.logger.info("%s: reusing the slot-token classifier in %s", cell.name, out)
            return model.eval(), record["metrics"] | {"reused": 1.0}
        t0 = time.time()
        texts = _attacker_texts(cell.dataset, p, distinct=True)[: p.get("train_limit")]
        cache = ClientCache(lm.encoder, [TextExample(t, "", "") for t in texts])

        def releases(epoch: int) -> torch.Tensor:
            gen = None if epsilon is None else seeded_generator(p["train_seed"] * 100_003 + epoch, warn=False)
            return torch.cat([ex.vectors for ex in cache.privatize(privatizer, generator=gen)])

        lengths = [
            pad_to or math.ceil(h.shape[0] / k) for h in cache.hidden
        ]  # the client's slot counts (filler: pad targets)
        ids = []
        for start in range(0, len(texts), 64):
            enc = lm.encoder.tokenize(texts[start : start + 64])
            ids += [row[mask.bool()].cpu() for row, mask in zip(enc["input_ids"], enc["attention_mask"])]
        targets = slot_targets(ids, lengths, k, lm.encoder.tokenizer.pad_token_id)
        config = SlotTokenConfig(hidden=p["hidden"], epochs=p["epochs"], **({"lr": p["lr"]} if p.get("lr") else {}))
        model, stats = train_slot_inverter(
            releases, targets, table, k, config, generator=seeded_generator(p["train_seed"] + 7919, warn=False)
        )
        metrics = {
            "train_first_loss": stats["first_loss"],
            "train_final_loss": stats["final_loss"],
            "train_steps": stats["steps"],
            "train_wall_s": round(time.time() - t0, 2),
        }
        out.mkdir(parents=True, exist_ok=True)
        atomic_save_tensors(out / SLOT_TOKENS_FILE, {n: t for n, t in model.state_dict().items() if n != "table"})
        atomic_write_text(
            saved,
            json.dumps(
                {"settings": settings, "metrics": metrics, "texts": len(texts), "slots": len(targets)}, indent=1
            ),
        )
        return model, metrics | {"reused": 0.0}

    model, metrics = context.cached(("slot_tokens", str(out)), fit)
    return lm, model, metrics


def _iterative(
    cell: Any, p: dict[str, Any], lm: Any, payload: Any, texts: list[str], seed: int, threat, context: RunContext
) -> tuple[list[str], dict[str, float]]:
    """The iterative inverter's reconstructions and its own figures: the start's ROUGE-L, the mean slot cosine of the
    start, of the result and of the true text with the payload, seconds per text."""
    import torch

    from ...attacks.iterative import (
        IterativeConfig,
        QueryEncoder,
        decode,
        frequent_tokens,
        iterative_attack,
        slot_cosines,
        token_vectors,
    )

    enc = QueryEncoder.from_contextual(lm.encoder, payload.privatization.k)
    vectors = context.cached(("token_vectors", p["init"], enc.k), lambda: token_vectors(enc))
    frequent = None
    if p["frequent"]:
        key = ("frequent", p["init"], tuple(p["train_text"]), p.get("train_text_limit"), p["frequent"])
        frequent = context.cached(
            key, lambda: frequent_tokens(enc, lm.encoder.tokenizer, _attacker_texts(cell.dataset, p), p["frequent"])
        )
    config = IterativeConfig(rounds=p["rounds"], candidates=p["candidates"], pairs=p["pairs"])
    recon, traces = iterative_attack(
        enc,
        payload,
        lm.encoder.tokenizer,
        threat=threat,
        config=config,
        vectors=vectors,
        frequent=frequent,
        generator=torch.Generator().manual_seed(seed),  # the search's own draws, apart from the payload's noise
        progress=None,
    )
    true_cos = []
    for i, text in enumerate(texts):  # the evaluator's reference: how well the truth itself fits the payload
        ids = lm.encoder.tokenizer(text, truncation=False)["input_ids"]
        target = payload.vectors[i, : payload.lengths[i]].float()
        true_cos.append(float(slot_cosines(enc, torch.tensor([ids]), target)[0].mean()))
    start = [decode(lm.encoder.tokenizer, t["start"]) for t in traces]
    n = len(traces)
    return recon, {
        "start_rouge_l": score_reconstructions(start, texts)["rouge_l"],
        "start_cosine": sum(t["cosine"][0] for t in traces) / n,
        "search_cosine": sum(t["cosine"][-1] for t in traces) / n,
        "true_cosine": sum(true_cos) / n,
        "s_per_text": sum(t["wall_s"] for t in traces) / n,
    }


def _prior_text(dataset: str, p: dict[str, Any]) -> str:
    """The no-input reference: the attacker's best constant guess, the medoid of ``params.prior_sample`` of its own
    training texts (:func:`~textfree.attacks.learned.medoid_text` over ``train_text`` or the PPFT train part)."""
    from ...attacks.learned import medoid_text

    return medoid_text(_attacker_texts(dataset, p), p["prior_sample"])


def _evaluated(cell: Any, limit: int, fits) -> list[tuple[str, Any]]:
    """(text, record) of the first ``limit`` distinct evaluated texts the client does not cut: the Pri-* held-out
    split, or the dataset's records (``cell.split``)."""
    from ...data import load_dataset, ppft_split
    from ...data.table import ColumnMap

    columns = (cell.params or {}).get("columns")
    if columns is not None:
        records = load_dataset(cell.dataset, split=cell.split, columns=ColumnMap.from_dict(columns))
    elif is_ppft_dataset(cell.dataset):
        records = ppft_split(cell.dataset)["heldout"]
    else:
        records = load_dataset(cell.dataset, split=cell.split)
    seen: dict[str, Any] = {}
    for r in records:
        text = record_private_text(r)
        if text not in seen and fits(text):
            seen[text] = r
            if len(seen) == limit:
                break
    if not seen:
        raise CellError(f"no text of {cell.dataset!r} fits the model's private-token limit", field="dataset")
    return list(seen.items())


@register_cell_kind(
    "learned_inversion",
    metrics=INVERSION_METRICS,
    params=INVERSION_PARAMS,
    validate=_validate,
    help="ROUGE-L of learned inverters (noise-unaware, noise-aware, stage-1-aligned) and of the restoration "
    "instruction on PPFT payloads.",
)
def learned_inversion(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    import time

    from ...ppft.batches import RESTORE_INSTRUCTION

    p = _params(cell, point)
    threat = _threat(cell, point, p)
    record_read_builds(context, cell.encoder, p)
    if p["inverter"] == "slot_tokens":
        lm, inverter, train_metrics = _slot_model(cell, p, context)
    elif p["inverter"] == "iterative":
        from ...ppft.model import TextFreeLM

        lm = context.cached(("slot_init", p["init"]), lambda: TextFreeLM.load(p["init"]))
        inverter, train_metrics = None, {}
    else:
        (lm, train_metrics), inverter = _model(cell, p, context), None
    rows = context.cached(
        ("evaluated", cell.dataset, cell.split, p["eval_limit"], lm.config.max_private_tokens),
        lambda: _evaluated(cell, p["eval_limit"], lm.sends_whole),
    )
    texts = [t for t, _ in rows]
    epsilon = p.get("epsilon")
    privatizer = lm.privatizer(
        epsilon, k=p.get("k"), fixed_slots=(p["fixed_slots"] or None) if inverter is not None else None
    )
    if p["inverter"] == "iterative" and privatizer.privatization.pad_to is not None:
        raise CellError(
            "the iterative inverter searches one token sequence per payload: the init run's client pads payloads "
            "(fixed_slots), whose filler slots it cannot tell from text",
            field="params.init",
        )
    t0 = time.perf_counter()
    payload = privatizer.privatize(
        texts,
        generator=seeded_generator(seed, warn=False) if epsilon is not None else None,
        public=[RESTORE_INSTRUCTION] * len(texts),
    )
    if p["inverter"] == "iterative":
        recon, train_metrics = _iterative(cell, p, lm, payload, texts, seed, threat, context)
    elif inverter is not None:
        recon = slot_tokens_attack(inverter, payload, lm.encoder.tokenizer, threat=threat)
    else:
        attack = restoration_attack if p["variant"] == "restoration" else learned_inversion_attack
        recon = attack(
            lm.server, payload, threat=threat, instruction=RESTORE_INSTRUCTION, max_new_tokens=p["max_new_tokens"]
        )
    wall = time.perf_counter() - t0
    for text, guess in list(zip(texts, recon))[:3]:
        context.logger.info(
            "%s %s eps=%s seed %d\n  prompt: %s\n  recon:  %s", cell.name, p["variant"], epsilon, seed, text, guess
        )
    attributes = None
    if all("symptoms" in r.attributes for _, r in rows):
        attributes = {
            "symptoms": [r.attributes["symptoms"] for _, r in rows],
            "antecedents": [r.attributes["antecedents"] for _, r in rows],
        }
    out = score_reconstructions(recon, texts, attributes)
    key = ("prior_text", cell.dataset, p["prior_sample"], tuple(p.get("train_text") or ()), p.get("train_text_limit"))
    prior = context.cached(key, lambda: _prior_text(cell.dataset, p))
    out |= {
        f"{k}_prior": v
        for k, v in score_reconstructions([prior] * len(texts), texts, attributes).items()
        if k in ("rouge_l", "symptoms_recall_text", "antecedents_recall_text")
    }
    units = [list(getattr(r, "pii", None) or []) for _, r in rows]
    if any(units):
        found, constant = pii_recovery(units, recon), pii_recovery(units, [prior] * len(texts))
        out |= {
            "pii_exact": found["exact"]["micro"],
            "pii_fuzzy": found["fuzzy"]["micro"],
            "pii_exact_prior": constant["exact"]["micro"],
            "pii_fuzzy_prior": constant["fuzzy"]["micro"],
            "n_pii_units": float(found["n_units"]),
        }
    nan = math.nan
    slot = privatizer.privatization.slot_loss().epsilon if epsilon is not None else nan
    slots = payload.lengths if epsilon is not None else []
    pad_to = privatizer.privatization.pad_to  # a fixed_slots model's client hides the count: another mechanism
    out |= {
        "slot_epsilon": slot,
        "prompt_epsilon": slot * sum(slots) / len(slots) if slots else nan,
        "padded_slots": float(pad_to) if pad_to is not None else nan,
        "centred": float(privatizer.privatization.center is not None),  # the init run's client centres its slots
        "n_eval": float(len(texts)),
        "eval_wall_s": wall,
    }
    return out | train_metrics
