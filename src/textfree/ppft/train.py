"""PPFT training: stage 1 (alignment, no noise) and stage 2 (text-free domain adaptation on payloads).

Both stages share one loop (:func:`textfree.training.loop.fit`, Accelerate), so
``accelerate launch -m textfree.cli ppft train-stage1 ...`` scales it; a run resumes from its newest checkpoint.
Stage-2 noise is a seeded generator per epoch, so a resumed run replays exactly what the uninterrupted run would
have done. The configs are in :mod:`textfree.ppft.train_config`; what stage 2 fits beyond the paper before its loop
(centre, class subspace, answer head) in :mod:`textfree.ppft.stage2_fits`.

Stage 1 (``train_stage1``): encoder + projection + LoRA decoder trained jointly on general-domain instruction
data (alpaca, lima, gsm8k train) without noise; the encoder's gradient flows through pooling and normalisation.

Stage 2 (``train_stage2``): encoder frozen. The client side (:class:`~textfree.ppft.batches.ClientCache`)
encodes the domain prompts once and privatizes them afresh every epoch; the server part (projection + LoRA)
trains on the resulting payload rows, public text and targets only.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from pathlib import Path
from typing import Any, Callable

import torch

from ..accel import make_accelerator
from ..lm.adapters import AdapterSettings
from ..rng import secure_generator, seeded_generator
from ..training.config import LoopConfig
from ..training.loop import fit, param_groups
from ..training.runs import check_run_dir, prepare_run_dir, total_wall_s, write_summary
from ..training.schedule import lr_multiplier
from .batches import (
    ClientCache,
    add_restore_examples,
    blind_payload_examples,
    collate_payloads,
    collate_text,
    domain_examples,
    general_examples,
    payload_loss,
    public_restore_examples,
)
from .config import PromptTemplate
from .model import TextFreeLM
from .prompt_variants import rewriter_for
from .server import CONFIG_NAME, server_optimizer
from .stage2_fits import answer_head_payloads, fit_answer_head, fit_center
from .train_config import Stage1Config, Stage2Config

__all__ = ["LoopConfig", "Stage1Config", "Stage2Config", "train_stage1", "train_stage2", "fit", "lr_multiplier"]

log = logging.getLogger("textfree.ppft")


# =========================================================================== stage 1
def _check_decoder(decoder: str) -> None:
    """Fail before the data loads when the base decoder is neither a local model directory nor a loadable model name
    (its config only; the weights load with the model)."""
    from transformers import AutoConfig

    from ..encoders.loading import local_model_problem

    problem = local_model_problem(decoder)  # a local path: said plainly, not as from_pretrained's "Repo id must be ..."
    if problem:
        raise FileNotFoundError(f"decoder: {problem}")
    try:
        AutoConfig.from_pretrained(decoder)
    except (OSError, ValueError) as exc:
        raise FileNotFoundError(f"cannot load decoder {decoder!r}: {str(exc).splitlines()[0]}") from None


def train_stage1(cfg: Stage1Config, *, on_step: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """Stage 1: align encoder + projection + LoRA decoder on general-domain data (no noise).

    Returns the summary written to summary.json plus ``"model"``: the trained :class:`TextFreeLM`. The data and the
    decoder load before ``cfg.out`` is written: a run that cannot start leaves it as it was."""
    check_run_dir(cfg)
    _check_decoder(cfg.decoder)
    accelerator = make_accelerator(cpu=cfg.cpu)  # before the run directory: only its main process writes there
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    t0 = time.time()

    # -- data: general-domain instruction examples (+ optional "restore the prompt" copies)
    examples = general_examples(cfg.data, limit_per_source=cfg.limit_per_source)
    examples = add_restore_examples(examples, cfg.restore_fraction, seed=cfg.seed)
    log.info("stage 1: %d examples from %s (restore fraction %g)", len(examples), cfg.data, cfg.restore_fraction)

    # -- model: encoder (trainable) + projection + LoRA decoder (base frozen)
    targets = [t.strip() for t in cfg.lora_targets.split(",")] if cfg.lora_targets != "all-linear" else "all-linear"
    lm = TextFreeLM.build(
        cfg.decoder,
        encoder=None if cfg.encoder == "default" else cfg.encoder,
        k=cfg.k,
        mechanism=cfg.mechanism,
        projection=cfg.projection,
        projection_hidden=cfg.projection_hidden,
        lora=AdapterSettings(r=cfg.lora_r, alpha=cfg.lora_alpha, dropout=cfg.lora_dropout, target_modules=targets),
        template=PromptTemplate(max_public_tokens=cfg.max_public_tokens, max_target_tokens=cfg.max_target_tokens),
        max_private_tokens=cfg.max_private_tokens,
        seed=cfg.seed,
    )
    run = prepare_run_dir(cfg)
    for name, p in lm.encoder.named_parameters():  # the pooler head is unused (we take token states): frozen,
        p.requires_grad_(".pooler." not in f".{name}")  # so DDP sees no parameter without a gradient
    lm.encoder.train()
    optimizer = torch.optim.AdamW(
        param_groups(
            [
                ([p for p in lm.encoder.parameters() if p.requires_grad], cfg.encoder_lr),
                (list(lm.server.projection.parameters()) + list(lm.server.lora_parameters().values()), cfg.lr),
            ],
            cfg.weight_decay,
        )
    )

    def loss_fn(model, batch):
        return model(batch["input_ids"], batch["attention_mask"], public=batch["public"], targets=batch["targets"]).loss

    summary = fit(
        cfg=cfg,
        model=lm,
        optimizer=optimizer,
        n_examples=len(examples),
        epoch_examples=lambda epoch: examples,
        collate=collate_text(lm.tokenize_private),
        loss_fn=loss_fn,
        on_step=on_step,
        accelerator=accelerator,
    )
    lm = summary["model"]
    lm.server.config = lm.config.replace(stage="stage1", epsilon=None)
    extra = {"stage": "stage1", "examples": len(examples), "total_wall_s": total_wall_s(summary, t0)}
    return _save_run(accelerator, lm, run, summary, extra)


def _save_run(accelerator, model, run: Path, summary: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Save ``model`` and summary.json into ``run`` from the main process (the others wait for it); return the summary
    with ``"model"`` on every process."""
    if accelerator.is_main_process:
        model.save(run)
    accelerator.wait_for_everyone()
    data = write_summary(run, summary, extra)
    if accelerator.is_main_process:
        stage, steps, loss = extra["stage"], data["steps"], data["final_loss"]
        log.info("%s done: %d steps, final loss %s; model in %s", stage, steps, loss, run)
    return data | {"model": model}


# =========================================================================== stage 2
def train_stage2(cfg: Stage2Config, *, on_step: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """Stage 2: encoder frozen; projection + LoRA adapt to privatized payloads of the domain's training split.

    Returns the summary written to summary.json plus ``"model"``: the adapted :class:`TextFreeLM`. The init run
    and the data load before ``cfg.out`` is written: a run that cannot start leaves it as it was."""
    init_fingerprint = _check_init(cfg)  # also in summary.json: a reuse checks it
    accelerator = make_accelerator(cpu=cfg.cpu)  # its device is this process's own (several GPUs: one each)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    t0 = time.time()

    lm, family, k = _load_init(cfg, accelerator)
    examples = _stage2_examples(cfg, lm)
    run = prepare_run_dir(cfg, init=cfg.init, fingerprint=init_fingerprint)
    source = _payload_source(cfg, run, lm, examples, k, family)

    # -- server side: only projection + LoRA train; it sees payload rows, public text and targets
    head_info = None
    if cfg.answer_head:
        payloads = answer_head_payloads(cfg, source.cache, source.privatizer, source.noise_seed)
        head_info = fit_answer_head(cfg, run, lm.server, payloads)
    summary = _fit_server(cfg, lm.server, len(examples), source, accelerator, on_step)
    lm.server = summary["model"]
    extra = _stage2_extra(cfg, lm, len(examples), k, family, head_info, source.center_info, init_fingerprint)
    extra["total_wall_s"] = total_wall_s(summary, t0)
    return _save_run(accelerator, lm, run, summary, extra)


def _check_init(cfg: Stage2Config) -> str | None:
    """Refuse an init that is no PPFT run directory, or an output directory that holds another run; return the init
    run's fingerprint (see :func:`check_run_dir`)."""
    if not (Path(cfg.init) / CONFIG_NAME).is_file():
        raise FileNotFoundError(f"init {str(cfg.init)!r} is not a PPFT run directory (no {CONFIG_NAME})")
    return check_run_dir(cfg, init=cfg.init)


def _load_init(cfg: Stage2Config, accelerator) -> tuple[TextFreeLM, str, int]:
    """The init run's model with stage 2's settings: its encoder frozen (client side), its server part (projection +
    LoRA) trainable. Returns the model, the noise family and the pooling k."""
    lm = TextFreeLM.load(cfg.init, trainable=True, decoder=cfg.decoder)
    lm.encoder.requires_grad_(False)
    lm.encoder.eval()
    if accelerator.device.type == "cuda":
        lm.encoder.to(accelerator.device)  # the client's one-off encoding pass; payload rows are kept on the CPU
    family = cfg.mechanism or lm.config.mechanism
    k = lm.config.k if cfg.k is None else cfg.k
    lm.server.config = _stage2_model_config(cfg, lm.config, family, k)
    lm.encoder.max_length = lm.config.max_private_tokens
    proj = lm.server.projection.config
    n = proj.count_vectors if cfg.count_vectors is None else cfg.count_vectors
    dropout = proj.count_dropout if cfg.count_dropout is None else cfg.count_dropout
    if (n, dropout) != (proj.count_vectors, proj.count_dropout):
        lm.server.projection = lm.server.projection.with_count_vectors(n, dropout)
    if cfg.train_decoder:
        lm.server.train_base()
    return lm, family, k


def _stage2_model_config(cfg: Stage2Config, init_config, family: str, k: int):
    """The init run's model config with stage 2's overrides (a null setting keeps the init run's)."""
    template = init_config.template
    if cfg.max_target_tokens is not None:
        template = dataclasses.replace(template, max_target_tokens=cfg.max_target_tokens)
    return init_config.replace(
        k=k,
        mechanism=family,
        epsilon=cfg.epsilon,
        noise_match=cfg.noise_match,
        stage="stage2",
        max_private_tokens=init_config.max_private_tokens if cfg.max_private_tokens is None else cfg.max_private_tokens,
        template=template,
        summary_slots=init_config.summary_slots if cfg.summary_slots is None else cfg.summary_slots,
        fixed_slots=init_config.fixed_slots if cfg.fixed_slots is None else cfg.fixed_slots,
        repeat_mean=init_config.repeat_mean if cfg.repeat_mean is None else cfg.repeat_mean,
        summary_only=init_config.summary_only if cfg.summary_only is None else cfg.summary_only,
    )


def _stage2_examples(cfg: Stage2Config, lm: TextFreeLM) -> list:
    """The training examples: the dataset's training rows in ``cfg.tasks``' formats, or with ``restore_text`` the public
    texts the client sends whole."""
    from ..data import ppft_split

    if cfg.restore_text:
        examples = public_restore_examples(
            cfg.restore_text, limit_per_source=cfg.restore_text_limit, fits=lm.sends_whole
        )
        examples = examples[: cfg.limit] if cfg.limit is not None else examples
        log.info(
            "stage 2 restore task on public text: %d texts of %s within %d encoder tokens",
            len(examples),
            cfg.restore_text,
            lm.config.max_private_tokens,
        )
        return examples
    records = ppft_split(cfg.dataset, cfg.split_fraction, validation=cfg.validation or 0.0)["train"]
    if cfg.limit is not None:
        records = records[: cfg.limit]
    return domain_examples(records, cfg.tasks)


@dataclasses.dataclass
class _PayloadSource:
    """The client side of stage 2: ``epoch_payloads(epoch)`` gives the rows the server trains on in that epoch; the
    cache, privatizer and noise seed they come from (None for a blind run) feed the optional answer-head fit."""

    epoch_payloads: Callable[[int], Any]
    center_info: dict[str, Any] | None
    noise_seed: int
    cache: ClientCache | None = None
    privatizer: Any = None


def _payload_source(cfg: Stage2Config, run: Path, lm: TextFreeLM, examples, k: int, family: str) -> _PayloadSource:
    """The client side: encode the training prompts once (fitting the slot centre first when ``center_mu`` is set);
    privatize them afresh every epoch. A blind run sends no private prefix at all."""
    noise_seed = cfg.seed if cfg.noise_seed is None else cfg.noise_seed
    center_info = (
        None
        if lm.center is None
        else {"inherited_from": str(cfg.init), "sha256": lm.config.center_sha256, "mu": lm.config.center_mu}
    )
    if cfg.blind:
        blind = blind_payload_examples(examples, lm.config.encoder_dim)
        log.info("stage 2 blind control: %d examples with no private prefix", len(blind))
        return _PayloadSource(lambda epoch: blind, center_info, noise_seed)
    cache = ClientCache(lm.encoder, examples, progress=cfg.progress)
    if cfg.center_mu is not None:
        center_info = fit_center(cfg, run, lm, cache, examples, k, noise_seed, family)
    privatizer = lm.privatizer(cfg.epsilon, k=k, mechanism=family, match=cfg.noise_match)
    if cfg.epsilon is None:
        log.warning(
            "stage 2 without noise (epsilon=None): the server sees clean embeddings; an upper bound, not private"
        )
    epoch_payloads = _epoch_payloads(cfg, cache, privatizer, noise_seed)
    return _PayloadSource(epoch_payloads, center_info, noise_seed, cache, privatizer)


def _epoch_payloads(cfg: Stage2Config, cache: ClientCache, privatizer, noise_seed: int) -> Callable[[int], Any]:
    """Each epoch's payload rows: the client's (optionally rewritten) prompts privatized with that epoch's noise
    generator, then the server's optional slot-count augmentation, with a generator of its own."""
    augment = cfg.slot_augment()
    variants = cfg.variants()
    rewriter = rewriter_for(cfg.dataset) if variants.active else None

    def epoch_payloads(epoch: int):
        gen = None
        if cfg.epsilon is not None:
            gen = secure_generator() if cfg.secure_noise else seeded_generator(noise_seed * 100_003 + epoch)
        sent = cache
        if variants.active:  # client side, before encoding: this epoch's rewrites of the training prompts
            rewrites = variants.epoch_rewrites(cache.private, rewriter, seed=cfg.seed * 100_003 + epoch + 15_013)
            sent = cache.replaced(rewrites)
            log.info("epoch %d: the client sends %d of %d training prompts rewritten", epoch, len(rewrites), len(cache))
        payloads = sent.privatize(privatizer, generator=gen)
        if augment.active and (
            cfg.slot_augment_epochs is None or epoch < cfg.slot_augment_epochs
        ):  # server side, on payloads already privatized; its randomness is not the noise's
            payloads = augment.apply(
                payloads, generator=seeded_generator(cfg.seed * 100_003 + epoch + 7_919, warn=False)
            )
        return payloads

    return epoch_payloads


def _fit_server(cfg: Stage2Config, server, n_examples: int, source: _PayloadSource, accelerator, on_step):
    """Train the server part (projection + LoRA) on the payload rows of each epoch; return :func:`fit`'s summary."""
    return fit(
        cfg=cfg,
        model=server,
        optimizer=server_optimizer(server, cfg),
        n_examples=n_examples,
        epoch_examples=source.epoch_payloads,
        collate=collate_payloads,
        loss_fn=payload_loss,
        on_step=on_step,
        accelerator=accelerator,
    )


def _stage2_extra(
    cfg: Stage2Config,
    lm: TextFreeLM,
    n_examples: int,
    k: int,
    family: str,
    head_info: dict[str, Any] | None,
    center_info: dict[str, Any] | None,
    init_fingerprint: str | None,
) -> dict[str, Any]:
    """What summary.json records of a stage-2 run beyond the loop's summary (the trained model's settings)."""
    return {
        "stage": "stage2",
        "dataset": None if cfg.restore_text else cfg.dataset,
        "restore_text": cfg.restore_text,
        "examples": n_examples,
        "epsilon": cfg.epsilon,
        "k": k,
        "mechanism": family,
        "noise_match": cfg.noise_match,
        "tasks": list(cfg.tasks),
        "blind": cfg.blind,
        "summary_slots": lm.config.summary_slots,
        "summary_only": lm.config.summary_only,
        "fixed_slots": lm.config.fixed_slots,
        "repeat_mean": lm.config.repeat_mean,
        "count_vectors": lm.server.projection.config.count_vectors,
        "count_dropout": lm.server.projection.config.count_dropout,
        "answer_head": head_info,
        "center": center_info,
        "slot_augment": cfg.slot_augment().to_dict(),
        "slot_augment_epochs": cfg.slot_augment_epochs,
        "prompt_variants": cfg.variants().to_dict(),
        "validation": cfg.validation,
        "init_fingerprint": init_fingerprint,
    }
