"""Pretrain the server's small Llama-architecture decoder on the local general-domain corpus.

``pretrain_decoder(config) -> Path`` does, top to bottom:

1. corpus: :func:`~.corpus.build_corpus` (or the ``texts`` you pass), shuffled with ``config.seed``; the first
   ``eval_fraction`` of the documents is the held-out slice, the rest is training text;
2. tokenizer: reuse ``<out>/tokenizer.json`` if present, else train byte-level BPE on the training text;
3. tokens: every document's ids followed by ``<|endoftext|>``, concatenated, cached in
   ``<out>/tokens.safetensors`` (rebuilt when the corpus or tokenizer changes) and cut into fixed blocks of
   ``context_length`` tokens;
4. model: ``LlamaForCausalLM(LlamaConfig(...))`` with tied input/output embeddings, initialised from the seed;
5. training: AdamW, linear warm-up then cosine decay (:func:`textfree.training.schedule.lr_multiplier`, set by hand
   each step), gradient clipping,
   Accelerate for device placement, mixed precision and ``accelerate launch`` data parallelism. The batch of step
   ``s`` is a pure function of ``(seed, s, process)`` (a seeded permutation of the blocks per epoch), so resuming
   needs only the step number;
6. held-out loss/perplexity at the start, every ``eval_every`` steps and at the end; train loss every
   ``log_every`` steps (log + ``train_log.jsonl``);
7. checkpoints every ``checkpoint_every`` steps (and on Ctrl-C) to ``<out>/checkpoints/step-N`` in the shared
   training format (:mod:`textfree.training.checkpoint`: safetensors + JSON, the run's trainer state and config in
   ``trainer_state.json``); calling again with the same output directory resumes from the latest;
8. the final model (``save_pretrained``), tokenizer, ``pretrain_config.json``, ``metrics.json`` and
   ``corpus_manifest.json`` in ``<out>``, loadable with ``textfree.lm.loading.load_decoder(out)``.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from safetensors.numpy import load_file as load_numpy
from safetensors.numpy import save_file as save_numpy
from tqdm.auto import tqdm
from transformers import LlamaConfig, LlamaForCausalLM

from ...accel import make_accelerator
from ...atomic import atomic_write_text, read_json
from ...training.checkpoint import (
    CHECKPOINTS_DIR,
    latest_checkpoint,
    load_training_checkpoint,
    save_training_checkpoint,
)
from ...training.schedule import lr_multiplier
from .config import CONFIG_NAME, DecoderPretrainConfig, resolve_mixed_precision
from .corpus import Corpus, build_corpus, corpus_from_texts
from .tokenizer import load_tokenizer, train_tokenizer

__all__ = [
    "pretrain_decoder",
    "finished_pretraining",
    "build_llama_config",
    "lr_at",
    "count_parameters",
    "TOKENS_NAME",
    "METRICS_NAME",
    "MANIFEST_NAME",
    "LOG_NAME",
]

logger = get_logger(__name__)

TOKENS_NAME = "tokens.safetensors"
METRICS_NAME = "metrics.json"
MANIFEST_NAME = "corpus_manifest.json"
LOG_NAME = "train_log.jsonl"
LEGACY_CHECKPOINT_DIR = "checkpoint"  # the resume state before the shared format (no longer read)

_now = time.monotonic  # the clock of time budgets and speeds (a module attribute so tests can replace it)


# ------------------------------------------------------------------------------------------------ pieces
def build_llama_config(config: DecoderPretrainConfig, tokenizer) -> LlamaConfig:
    """The decoder architecture: a Llama sized by ``config`` with ``len(tokenizer)`` embeddings (tied)."""
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads or config.num_heads,
        max_position_embeddings=config.context_length,
        rope_theta=config.rope_theta,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )


def lr_at(step: int, config: DecoderPretrainConfig, total_steps: int | None) -> float:
    """Learning rate of optimizer step ``step`` (0-based): ``config.learning_rate`` times the shared schedule
    (:func:`textfree.training.schedule.lr_multiplier`: linear warm-up, then cosine to ``min_lr_ratio``).

    While ``total_steps`` is unknown (time-budget calibration) the rate after warm-up is the peak rate.
    """
    if total_steps is None and step >= config.warmup_steps:
        return config.learning_rate
    total = config.warmup_steps if total_steps is None else total_steps  # unknown: only warm-up steps reach here
    return config.learning_rate * lr_multiplier(step, total, config.warmup_steps, config.min_lr_ratio)


def count_parameters(model: torch.nn.Module) -> dict[str, int]:
    """Unique parameters (tied embeddings counted once), and those outside the embedding table."""
    total = sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once
    embed = model.get_input_embeddings().weight.numel()
    return {"parameters": total, "non_embedding_parameters": total - embed}


def _fingerprint(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _encode(tokenizer, texts: Sequence[str]) -> np.ndarray:
    """Each document's ids followed by EOS, concatenated (uint16 when the vocabulary fits, else int32)."""
    eos = tokenizer.eos_token_id
    dtype = np.uint16 if len(tokenizer) <= np.iinfo(np.uint16).max else np.int32
    pieces = []
    for start in range(0, len(texts), 4096):
        for enc in tokenizer.backend_tokenizer.encode_batch(
            list(texts[start : start + 4096]), add_special_tokens=False
        ):
            pieces.append(np.asarray(enc.ids + [eos], dtype=dtype))
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=dtype)


def _token_cache(out: Path, tokenizer, train_texts, heldout_texts, key: dict[str, str]) -> dict[str, np.ndarray]:
    """``{"train": ids, "heldout": ids}`` from ``out/tokens.safetensors``, rebuilt when ``key`` differs."""
    path = out / TOKENS_NAME
    if path.is_file():
        from safetensors import safe_open

        with safe_open(str(path), framework="np") as handle:
            if (handle.metadata() or {}) == key:
                logger.info("token cache %s reused", path)
                return load_numpy(str(path))
    tokens = {"train": _encode(tokenizer, train_texts), "heldout": _encode(tokenizer, heldout_texts)}
    save_numpy(tokens, str(path), metadata=key)
    return tokens


def _blocks(stream: np.ndarray, length: int) -> np.ndarray:
    """``stream`` cut into ``[n, length]`` blocks (the tail dropped; one short block if shorter than ``length``)."""
    n = len(stream) // length
    if n == 0:
        return stream[None, :]
    return stream[: n * length].reshape(n, length)


class BlockSchedule:
    """Which training blocks step ``s`` reads: sample ``i`` of the global stream is block ``perm_e[i % n]`` with
    ``e = i // n`` and ``perm_e`` a permutation seeded by ``(seed, e)``; process ``p`` of ``P`` takes its own
    ``batch_size`` samples of each global batch."""

    def __init__(self, n_blocks: int, batch_size: int, seed: int, process: int = 0, processes: int = 1):
        self.n, self.batch, self.seed, self.process, self.processes = n_blocks, batch_size, seed, process, processes
        self._perms: dict[int, np.ndarray] = {}

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            self._perms = {epoch: np.random.default_rng([self.seed, epoch]).permutation(self.n)}
        return self._perms[epoch]

    def indices(self, step: int) -> list[int]:
        first = (step * self.processes + self.process) * self.batch
        return [int(self._perm(i // self.n)[i % self.n]) for i in range(first, first + self.batch)]


@torch.no_grad()
def _heldout_loss(model, blocks: torch.Tensor, batch_size: int, accelerator: Accelerator) -> float:
    """Mean next-token loss over the held-out blocks (each process takes every P-th batch; summed over all).

    Runs the unwrapped model: a DDP-wrapped forward may broadcast buffers, a collective that would hang when the
    processes evaluate different numbers of batches.
    """
    model = accelerator.unwrap_model(model)
    model.eval()
    total = torch.zeros(2, device=accelerator.device, dtype=torch.float64)
    starts = list(range(0, len(blocks), batch_size))[accelerator.process_index :: accelerator.num_processes]
    for start in starts:
        x = blocks[start : start + batch_size].to(accelerator.device)
        loss = model(input_ids=x, labels=x).loss
        n = x.numel() - x.shape[0]  # predicted positions
        total += torch.tensor([loss.item() * n, n], device=total.device, dtype=torch.float64)
    model.train()
    total = accelerator.reduce(total, reduction="sum")
    return float(total[0] / total[1])


def _ppl(loss: float | None) -> float | None:
    return None if loss is None else float(math.exp(min(loss, 50.0)))


# ------------------------------------------------------------------------------------------------ resume checks
def _check_resumable(checkpoint: Path, saved: dict[str, Any] | None, config: DecoderPretrainConfig) -> None:
    """Raise when the checkpoint's run (its trainer state's ``config``) differs from ``config`` outside
    :data:`~.config.RESUMABLE_FIELDS`; a checkpoint that records no config is not checked."""
    if saved is None:
        return
    diff = DecoderPretrainConfig.from_dict(saved, source=str(checkpoint)).mismatches(config)
    if diff:
        detail = ", ".join(f"{k}: checkpoint {a!r} vs now {b!r}" for k, (a, b) in diff.items())
        raise ValueError(
            f"{checkpoint.parent.parent} holds a checkpoint of a different run ({detail}); use another output "
            f"directory or delete {checkpoint.parent}"
        )


def finished_pretraining(config: DecoderPretrainConfig) -> bool:
    """True when ``config.output_dir`` holds a finished decoder pretrained under ``config`` (its metrics, weights and
    config); a finished decoder of other settings is an error naming them, so it is never silently reused.

    Only the final files count (``metrics.json``, ``model.safetensors``, ``pretrain_config.json``, written once the
    run has finished); the resume state in ``checkpoints/`` plays no part.
    """
    out = Path(config.output_dir)
    if not all((out / name).is_file() for name in (METRICS_NAME, "model.safetensors", CONFIG_NAME)):
        return False
    differ = DecoderPretrainConfig.load(out / CONFIG_NAME).mismatches(config)
    if differ:
        raise ValueError(
            f"{str(out)!r} holds a decoder pretrained with other settings ({sorted(differ)}); use another out"
        )
    return True


# ------------------------------------------------------------------------------------------------- train
def pretrain_decoder(
    config: DecoderPretrainConfig,
    *,
    texts: Sequence[str] | None = None,
    stop_after_steps: int | None = None,
    progress: bool = True,
) -> Path:
    """Pretrain (or resume pretraining) the local decoder; returns the output directory.

    Args:
        config: the run (``DecoderPretrainConfig.from_preset("small")``); ``config.output_dir`` is created.
        texts: explicit documents to train on instead of the shared-data corpus (tests, custom data); the
            held-out slice is taken from them in the same way. Duplicates are kept.
        stop_after_steps: stop this call after this many optimizer steps, leaving a checkpoint and no final
            model, as an interruption would (tests; calling again resumes).
        progress: show a tqdm progress bar.
    """
    config.validate()
    threads = torch.get_num_threads()
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    try:
        return _pretrain(config, texts, stop_after_steps, progress)
    finally:
        torch.set_num_threads(threads)


def _pretrain(
    cfg: DecoderPretrainConfig, texts: Sequence[str] | None, stop_after_steps: int | None, progress: bool
) -> Path:
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    accelerator = make_accelerator(mixed_precision=resolve_mixed_precision(cfg.mixed_precision))
    t_session = _now()
    data = _prepare_data(cfg, out, texts, accelerator)
    model, optimizer, sizes = _model_and_optimizer(cfg, data.tokenizer, accelerator)
    state = _resume(cfg, out, data.key, model, optimizer, accelerator)
    previous_plan = state["planned_steps"]  # a raised time budget re-calibrates at this plan's final rate
    state["planned_steps"] = _plan(cfg, state)
    session = _Session(cfg, out, accelerator, model, optimizer, data, state, sizes, t_session, previous_plan)
    stopped_by = session.train(stop_after_steps, progress)
    if stopped_by == "stop_after_steps":
        session.checkpoint()
        logger.info("stopped after %d steps this session (step %d); rerun to resume", session.steps, session.step)
        return out
    session.finish(stopped_by)
    return out


@dataclass
class _Data:
    """The tokenizer and the token blocks of one run (steps 1-3 of the module docstring)."""

    tokenizer: Any
    key: dict[str, str]  # what the token cache was built from (corpus and tokenizer fingerprints)
    train_tokens: int  # tokens in the training stream
    train_blocks: np.ndarray  # [n, context_length]
    heldout_blocks: torch.Tensor  # [m, context_length], int64, at most max_eval_blocks


def _split_corpus(cfg: DecoderPretrainConfig, texts: Sequence[str] | None) -> tuple[Corpus, int]:
    """The shuffled corpus (``texts``, or the shared data's) and its number of held-out documents."""
    if texts is not None:
        corpus: Corpus = corpus_from_texts(texts, seed=cfg.seed)
    else:
        corpus = build_corpus(
            cfg.data_dir,
            seed=cfg.seed,
            sources=cfg.sources,
            extra_text_files=cfg.extra_text_files,
            decontaminate=cfg.decontaminate,
        )
    if len(corpus.texts) < 2:
        raise ValueError(f"need at least 2 documents (one is held out), got {len(corpus.texts)}")
    return corpus, min(len(corpus.texts) - 1, max(1, round(cfg.eval_fraction * len(corpus.texts))))


def _prepare_data(cfg: DecoderPretrainConfig, out: Path, texts: Sequence[str] | None, accelerator) -> _Data:
    """Corpus, tokenizer (reused from ``out`` or trained) and token cache, built once by the main process first;
    writes ``corpus_manifest.json``."""
    corpus, n_heldout = _split_corpus(cfg, texts)
    heldout_texts, train_texts = corpus.texts[:n_heldout], corpus.texts[n_heldout:]
    manifest = {**corpus.manifest, "heldout_documents": n_heldout, "train_documents": len(train_texts)}
    with accelerator.main_process_first():
        if (out / "tokenizer.json").is_file():
            tokenizer = load_tokenizer(out)
            logger.info("reusing the tokenizer in %s (%d tokens)", out, len(tokenizer))
        else:
            tokenizer = train_tokenizer(
                train_texts,
                cfg.vocab_size,
                min_frequency=cfg.tokenizer_min_frequency,
                model_max_length=cfg.context_length,
            )
            if accelerator.is_main_process:
                tokenizer.save_pretrained(out)
        key = {
            "corpus_sha256": corpus.manifest["sha256"],
            "heldout_documents": str(n_heldout),
            "tokenizer_sha256": _fingerprint(out / "tokenizer.json"),
        }
        tokens = _token_cache(out, tokenizer, train_texts, heldout_texts, key)
        if accelerator.is_main_process:
            manifest["tokens"] = {"train": int(len(tokens["train"])), "heldout": int(len(tokens["heldout"]))}
            atomic_write_text(out / MANIFEST_NAME, json.dumps(manifest, indent=1) + "\n")
    heldout = _blocks(tokens["heldout"], cfg.context_length)[: cfg.max_eval_blocks].astype(np.int64)
    return _Data(
        tokenizer=tokenizer,
        key=key,
        train_tokens=int(len(tokens["train"])),
        train_blocks=_blocks(tokens["train"], cfg.context_length),
        heldout_blocks=torch.from_numpy(heldout),
    )


def _model_and_optimizer(cfg: DecoderPretrainConfig, tokenizer, accelerator):
    """``(model, optimizer, sizes)``: the seeded Llama and AdamW (weight decay on matrices only), both prepared by
    ``accelerator``, and :func:`count_parameters` of the model."""
    set_seed(cfg.seed)
    model = LlamaForCausalLM(build_llama_config(cfg, tokenizer))
    sizes = count_parameters(model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.learning_rate,
        betas=(cfg.beta1, cfg.beta2),
    )
    model, optimizer = accelerator.prepare(model, optimizer)
    return model, optimizer, sizes


def _resume(cfg: DecoderPretrainConfig, out: Path, key: dict[str, str], model, optimizer, accelerator) -> dict:
    """The trainer state to start from: the latest ``checkpoints/step-N`` of ``out`` loaded into ``model`` and
    ``optimizer`` (after checking that it is this run's: settings, corpus and tokenizer), or a fresh state."""
    checkpoint = latest_checkpoint(out)
    if checkpoint is None and (out / LEGACY_CHECKPOINT_DIR / "trainer_state.json").is_file():
        raise ValueError(
            f"{out / LEGACY_CHECKPOINT_DIR} is a checkpoint in the format before {CHECKPOINTS_DIR}/step-N, which "
            "cannot be resumed; finish or extend it with an older version, or use another output directory"
        )
    if checkpoint is None and (out / METRICS_NAME).is_file():
        raise ValueError(
            f"{out} holds a finished run without a checkpoint (keep_checkpoint was off); it cannot be "
            "extended: use another output directory"
        )
    if checkpoint is not None:
        saved = read_json(checkpoint / "trainer_state.json")
        _check_resumable(checkpoint, saved.get("config"), cfg)
        if saved.get("tokens_key") != key:
            raise ValueError(
                f"{checkpoint} was trained on another corpus or tokenizer; use another output directory or "
                f"delete {out / CHECKPOINTS_DIR}"
            )
        state = load_training_checkpoint(checkpoint, accelerator.unwrap_model(model), optimizer)
        state.pop("config", None)
        if cfg.max_steps is not None and state.get("planned_steps") not in (None, cfg.max_steps):
            logger.warning(
                "max_steps changed from %s to %s: the cosine schedule is recomputed for the new total",
                state["planned_steps"],
                cfg.max_steps,
            )
        logger.info("resuming from step %d (%s)", state["step"], checkpoint)
    else:
        state = {
            "step": 0,
            "tokens_seen": 0,
            "train_seconds": 0.0,
            "loop_seconds": 0.0,
            "planned_steps": None,
            "evals": [],
            "last_train_loss": None,
            "tokens_key": key,
        }
    return state


def _plan(cfg: DecoderPretrainConfig, state: dict[str, Any]) -> int | None:
    """This session's planned total of steps: ``max_steps``, else the previous plan; None (calibrate first) for a new
    time-budget run, or when a finished time-budget run gets a larger budget."""
    budget_s = None if cfg.minutes is None else cfg.minutes * 60.0
    planned = cfg.max_steps if cfg.max_steps is not None else state["planned_steps"]
    if (
        cfg.max_steps is None
        and budget_s is not None
        and planned is not None
        and state["step"] >= planned
        and state.get("loop_seconds", 0.0) < budget_s
    ):
        logger.info(
            "time budget raised to %.1f min: extending the run; re-planning after %d steps",
            cfg.minutes,
            cfg.calibration_steps,
        )
        planned = None  # calibrate again (at the old schedule's final rate), then a cosine over the new total
    return planned


class _Session:
    """One call of :func:`pretrain_decoder` from the loaded state on: the loop (:meth:`train`) with its evaluations,
    logs, re-planning and checkpoints, and the final save (:meth:`finish`)."""

    def __init__(self, cfg, out: Path, accelerator, model, optimizer, data: _Data, state, sizes, t_session, previous):
        self.cfg, self.out, self.accelerator, self.model, self.optimizer = cfg, out, accelerator, model, optimizer
        self.data, self.sizes, self.t_session = data, sizes, t_session
        self.previous_plan: int | None = previous  # the checkpoint's plan (the rate while calibrating again)
        self.state = state
        self.step: int = state["step"]
        self.planned: int | None = state["planned_steps"]
        self.budget_s = None if cfg.minutes is None else cfg.minutes * 60.0
        self.schedule = BlockSchedule(
            len(data.train_blocks), cfg.batch_size, cfg.seed, accelerator.process_index, accelerator.num_processes
        )
        self.tokens_per_step = cfg.batch_size * data.train_blocks.shape[1] * accelerator.num_processes
        self.loop_before = state.get("loop_seconds", 0.0)
        self.t_loop = self.loop_at_start = 0.0
        self.eval_seconds = 0.0  # the last evaluation's wall-clock (calibration counts it per step)
        self.train_s = 0.0  # time inside optimizer steps this session (for tokens/s)
        self.steps = 0  # optimizer steps this session
        logger.info(
            "decoder: %s parameters (%s without embeddings); %d train blocks x %d tokens, %d held-out blocks; "
            "%d tokens/step; mixed precision %s; %d process(es)",
            f"{sizes['parameters']:,}",
            f"{sizes['non_embedding_parameters']:,}",
            len(data.train_blocks),
            data.train_blocks.shape[1],
            len(data.heldout_blocks),
            self.tokens_per_step,
            accelerator.mixed_precision,
            accelerator.num_processes,
        )

    def loop_seconds(self) -> float:
        """Wall-clock inside the training loop, all sessions (what the time budget counts)."""
        return self.loop_before + _now() - self.t_loop

    def write_log(self, record: dict[str, Any]) -> None:
        if self.accelerator.is_main_process:
            with open(self.out / LOG_NAME, "a") as handle:
                handle.write(json.dumps(record) + "\n")

    def evaluate(self) -> float:
        """Held-out loss at the current step (recorded, logged); returns the seconds it took."""
        t0 = _now()
        loss = _heldout_loss(self.model, self.data.heldout_blocks, self.cfg.batch_size, self.accelerator)
        self.state["evals"].append(
            {
                "step": self.step,
                "heldout_loss": loss,
                "heldout_ppl": _ppl(loss),
                "tokens_seen": self.state["tokens_seen"],
            }
        )
        self.write_log(
            {
                "step": self.step,
                "heldout_loss": round(loss, 5),
                "heldout_ppl": round(_ppl(loss), 3),
                "eval_seconds": round(_now() - t0, 2),
            }
        )
        logger.info("step %d: held-out loss %.4f (ppl %.2f)", self.step, loss, _ppl(loss))
        return _now() - t0

    def checkpoint(self) -> None:
        """``checkpoints/step-N`` in the shared training format (the run's config in its trainer state)."""
        self.state["loop_seconds"] = self.loop_seconds()
        if self.accelerator.is_main_process:
            model = self.accelerator.unwrap_model(self.model)
            trainable = {name: p for name, p in model.named_parameters() if p.requires_grad}
            trainer_state = {**self.state, "config": self.cfg.to_dict()}
            save_training_checkpoint(self.out, self.step, trainable, self.optimizer, trainer_state, keep=1)
        self.accelerator.wait_for_everyone()

    def train(self, stop_after_steps: int | None, progress: bool) -> str:
        """Run optimizer steps until the plan, the time budget or ``stop_after_steps`` ends them; returns which.

        Its own loop, not :func:`textfree.training.loop.fit`: it is indexed by optimizer step over fixed token
        blocks (the batch of step s is a pure function of the seed and s), in time-budget mode it re-plans the
        length of the cosine schedule from the measured speed while it runs, and it evaluates on held-out blocks.
        """
        cfg, state = self.cfg, self.state
        self.t_loop = _now()
        self.eval_seconds = self.evaluate() if self.step == 0 else 0.0
        self.loop_at_start = self.loop_seconds()
        window: list[float] = []  # losses since the last log line
        recent: deque[float] = deque(maxlen=cfg.log_every)  # the last log_every losses (the final train loss)
        stopped_by = "max_steps"
        main = self.accelerator.is_main_process
        bar = tqdm(
            total=self.planned,
            initial=self.step,
            desc="pretrain",
            unit="step",
            disable=not (progress and main),
            dynamic_ncols=True,
        )
        self.model.train()
        try:
            while not (self.planned is not None and self.step >= self.planned):
                reason = self._stop_reason(stop_after_steps)
                if reason is not None:
                    stopped_by = reason
                    break
                t0 = _now()
                lr = lr_at(self.step, cfg, self.planned if self.planned is not None else self.previous_plan)
                window.append(self._optimizer_step(lr))
                recent.append(window[-1])
                dt = _now() - t0
                self.train_s += dt
                state["train_seconds"] += dt
                bar.update(1)
                self._replan(bar)
                if self.step % cfg.log_every == 0 or self.step == self.planned:
                    self._log_train(window, lr, bar)
                    window = []
                if self.step % cfg.eval_every == 0 and self.step != self.planned:
                    self.eval_seconds = self.evaluate()
                if self.step % cfg.checkpoint_every == 0:
                    self.checkpoint()
        except KeyboardInterrupt:
            logger.warning(
                "interrupted at step %d: writing a checkpoint; rerun with the same output dir to resume", self.step
            )
            self.checkpoint()
            raise
        finally:
            bar.close()
        if recent:
            state["last_train_loss"] = float(np.mean(recent))
        return stopped_by

    def _stop_reason(self, stop_after_steps: int | None) -> str | None:
        """``"time"`` once the budget is spent, ``"stop_after_steps"`` after that many steps this session, else None."""
        self.state["loop_seconds"] = self.loop_seconds()
        if self.budget_s is not None and self.state["loop_seconds"] >= self.budget_s:
            logger.info("time budget of %.1f min reached at step %d", self.cfg.minutes, self.step)
            return "time"
        if stop_after_steps is not None and self.steps >= stop_after_steps:
            return "stop_after_steps"
        return None

    def _optimizer_step(self, lr: float) -> float:
        """One step at rate ``lr`` on the batch of the current step; returns its loss (the processes' mean)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        x = torch.from_numpy(self.data.train_blocks[self.schedule.indices(self.step)].astype(np.int64))
        x = x.to(self.accelerator.device)
        loss = self.model(input_ids=x, labels=x).loss
        self.accelerator.backward(loss)
        if self.cfg.grad_clip > 0:
            self.accelerator.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.steps += 1
        self.state["step"] = self.step
        self.state["tokens_seen"] += self.tokens_per_step
        return self.accelerator.reduce(loss.detach(), reduction="mean").item()

    def _replan(self, bar) -> None:
        """Time-budget mode: set the schedule's length from the measured speed once calibrated, then re-plan it at
        every log step from this session's mean time per step (evaluations and checkpoints included)."""
        cfg = self.cfg
        if not (
            cfg.max_steps is None
            and self.budget_s is not None
            and self.steps >= cfg.calibration_steps
            and (self.planned is None or self.step % cfg.log_every == 0)
        ):
            return
        if self.planned is None:
            per_step = self.train_s / self.steps + self.eval_seconds / cfg.eval_every
        else:
            per_step = (self.loop_seconds() - self.loop_at_start) / self.steps
        before = self.planned
        self.planned = self.step + max(1, int((self.budget_s - self.loop_seconds()) / per_step))
        self.state["planned_steps"] = self.planned
        bar.total = self.planned
        bar.refresh()
        if before is None:
            logger.info("time budget %.1f min: %.2f s/step -> max_steps %d", cfg.minutes, per_step, self.planned)

    def _log_train(self, window: list[float], lr: float, bar) -> None:
        """The mean train loss since the last log line, the rate and the speed: log, ``train_log.jsonl``, bar."""
        train_loss = float(np.mean(window))
        self.state["last_train_loss"] = train_loss
        tps = self.tokens_per_step * self.steps / max(self.train_s, 1e-9)
        self.write_log(
            {
                "step": self.step,
                "train_loss": round(train_loss, 5),
                "lr": lr,
                "planned_steps": self.planned,
                "tokens_seen": self.state["tokens_seen"],
                "tokens_per_s": round(tps, 1),
                "elapsed_s": round(_now() - self.t_session, 1),
            }
        )
        bar.set_postfix(loss=f"{train_loss:.3f}", lr=f"{lr:.1e}", tok_s=f"{tps:.0f}")
        logger.info("step %d: train loss %.4f, lr %.2e, %.0f tokens/s", self.step, train_loss, lr, tps)

    def finish(self, stopped_by: str) -> None:
        """The final evaluation and checkpoint; then the decoder directory (``save_pretrained`` model, tokenizer,
        ``pretrain_config.json``, ``metrics.json``); the checkpoints are removed unless ``keep_checkpoint``."""
        if not self.state["evals"] or self.state["evals"][-1]["step"] != self.step:
            self.evaluate()
        self.checkpoint()
        if self.accelerator.is_main_process:
            tokenizer = self.data.tokenizer
            unwrapped = self.accelerator.unwrap_model(self.model)
            unwrapped.generation_config.eos_token_id = tokenizer.eos_token_id
            unwrapped.generation_config.bos_token_id = tokenizer.bos_token_id
            unwrapped.generation_config.pad_token_id = tokenizer.pad_token_id
            unwrapped.save_pretrained(self.out)
            tokenizer.save_pretrained(self.out)
            self.cfg.save(self.out)
            metrics = self._metrics(stopped_by)
            atomic_write_text(self.out / METRICS_NAME, json.dumps(metrics, indent=1) + "\n")
            logger.info(
                "done: step %d, train loss %.4f, held-out loss %.4f (ppl %.2f), %.0f tokens/s -> %s",
                self.step,
                metrics["train_loss"] or float("nan"),
                metrics["heldout_loss"],
                metrics["heldout_ppl"],
                metrics["tokens_per_s"],
                self.out,
            )
        if not self.cfg.keep_checkpoint and self.accelerator.is_main_process:
            shutil.rmtree(self.out / CHECKPOINTS_DIR, ignore_errors=True)
        self.accelerator.wait_for_everyone()

    def _metrics(self, stopped_by: str) -> dict[str, Any]:
        """What ``metrics.json`` records of the finished run."""
        state, accelerator, final = self.state, self.accelerator, self.state["evals"][-1]
        return {
            "steps": self.step,
            "planned_steps": self.planned if self.planned is not None else self.step,  # None: ran out calibrating
            "stopped_by": stopped_by,
            "tokens_seen": state["tokens_seen"],
            "train_tokens_in_corpus": self.data.train_tokens,
            "epochs": state["tokens_seen"] / max(self.data.train_tokens, 1),
            "heldout_tokens_evaluated": int(self.data.heldout_blocks.numel()),
            "train_loss": state["last_train_loss"],  # mean of the last log_every steps
            "train_ppl": _ppl(state["last_train_loss"]),
            "heldout_loss": final["heldout_loss"],
            "heldout_ppl": final["heldout_ppl"],
            "initial_heldout_loss": state["evals"][0]["heldout_loss"],
            "tokens_per_s": state["tokens_seen"] / max(state["train_seconds"], 1e-9),
            "train_seconds": state["train_seconds"],
            "loop_seconds": self.loop_seconds(),
            "session_wall_seconds": _now() - self.t_session,
            **self.sizes,
            "vocab_size": len(self.data.tokenizer),
            "mixed_precision": accelerator.mixed_precision,
            "num_processes": accelerator.num_processes,
            "device": str(accelerator.device),
            "torch_threads": torch.get_num_threads(),
            "evals": state["evals"],
        }
