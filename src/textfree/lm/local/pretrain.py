"""Pretrain the server's small Llama-architecture decoder on the local general-domain corpus.

``pretrain_decoder(config) -> Path`` does, top to bottom:

1. corpus: :func:`~.corpus.build_corpus` (or the ``texts`` you pass), shuffled with ``config.seed``; the first
   ``eval_fraction`` of the documents is the held-out slice, the rest is training text;
2. tokenizer: reuse ``<out>/tokenizer.json`` if present, else train byte-level BPE on the training text;
3. tokens: every document's ids followed by ``<|endoftext|>``, concatenated, cached in
   ``<out>/tokens.safetensors`` (rebuilt when the corpus or tokenizer changes) and cut into fixed blocks of
   ``context_length`` tokens;
4. model: ``LlamaForCausalLM(LlamaConfig(...))`` with tied input/output embeddings, initialised from the seed;
5. training: AdamW, linear warm-up then cosine decay (set by hand each step, nanoGPT style), gradient clipping,
   Accelerate for device placement, mixed precision and ``accelerate launch`` data parallelism. The batch of step
   ``s`` is a pure function of ``(seed, s, process)`` (a seeded permutation of the blocks per epoch), so resuming
   needs only the step number;
6. held-out loss/perplexity at the start, every ``eval_every`` steps and at the end; train loss every
   ``log_every`` steps (log + ``train_log.jsonl``);
7. checkpoints every ``checkpoint_every`` steps (and on Ctrl-C) to ``<out>/checkpoint`` (safetensors + JSON);
   calling again with the same output directory resumes from it;
8. the final model (``save_pretrained``), tokenizer, ``pretrain_config.json``, ``metrics.json`` and
   ``corpus_manifest.json`` in ``<out>``, loadable with ``textfree.lm.loading.load_decoder(out)``.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import deque
from collections.abc import Sequence
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
from .checkpoint import (
    CHECKPOINT_DIR,
    load_checkpoint,
    read_trainer_state,
    save_checkpoint,
)
from .config import CONFIG_NAME, DecoderPretrainConfig, resolve_mixed_precision
from .corpus import Corpus, build_corpus, corpus_from_texts
from .tokenizer import load_tokenizer, train_tokenizer

__all__ = [
    "pretrain_decoder",
    "finished_pretraining",
    "build_llama_config",
    "lr_at",
    "greedy_generate",
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
    """Learning rate of optimizer step ``step`` (0-based): linear warm-up, then cosine to ``min_lr_ratio``.

    While ``total_steps`` is unknown (time-budget calibration) the rate after warm-up is the peak rate.
    """
    peak, floor = config.learning_rate, config.learning_rate * config.min_lr_ratio
    if step < config.warmup_steps:
        return peak * (step + 1) / config.warmup_steps
    if total_steps is None:
        return peak
    span = max(1, total_steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * progress))


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


@torch.no_grad()
def greedy_generate(model, tokenizer, prompts: Sequence[str], max_new_tokens: int = 40) -> list[str]:
    """Greedy continuations of ``prompts`` (text after the prompt, up to EOS)."""
    model.eval()
    device = next(model.parameters()).device
    outs = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids.to(device)
        gen = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        outs.append(tokenizer.decode(gen[0, ids.shape[1] :], skip_special_tokens=True))
    return outs


def _check_resumable(out: Path, config: DecoderPretrainConfig) -> None:
    saved = out / CHECKPOINT_DIR / CONFIG_NAME
    if not saved.is_file():
        return
    diff = DecoderPretrainConfig.load(saved).mismatches(config)
    if diff:
        detail = ", ".join(f"{k}: checkpoint {a!r} vs now {b!r}" for k, (a, b) in diff.items())
        raise ValueError(
            f"{out} holds a checkpoint of a different run ({detail}); use another output directory "
            f"or delete {out / CHECKPOINT_DIR}"
        )


def finished_pretraining(config: DecoderPretrainConfig) -> bool:
    """True when ``config.output_dir`` holds a finished decoder pretrained under ``config`` (its metrics, weights and
    config); a finished decoder of other settings is an error naming them, so it is never silently reused."""
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
    main = accelerator.is_main_process
    t_session = _now()

    # ---- 1. corpus, held-out slice
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
        raise ValueError("need at least 2 documents (one is held out)")
    n_heldout = min(len(corpus.texts) - 1, max(1, round(cfg.eval_fraction * len(corpus.texts))))
    heldout_texts, train_texts = corpus.texts[:n_heldout], corpus.texts[n_heldout:]
    manifest = {**corpus.manifest, "heldout_documents": n_heldout, "train_documents": len(train_texts)}

    # ---- 2. tokenizer, 3. token cache (built once, by the main process first)
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
            if main:
                tokenizer.save_pretrained(out)
        key = {
            "corpus_sha256": corpus.manifest["sha256"],
            "heldout_documents": str(n_heldout),
            "tokenizer_sha256": _fingerprint(out / "tokenizer.json"),
        }
        tokens = _token_cache(out, tokenizer, train_texts, heldout_texts, key)
        if main:
            manifest["tokens"] = {"train": int(len(tokens["train"])), "heldout": int(len(tokens["heldout"]))}
            (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n")
    train_blocks = _blocks(tokens["train"], cfg.context_length)
    heldout_blocks = torch.from_numpy(
        _blocks(tokens["heldout"], cfg.context_length)[: cfg.max_eval_blocks].astype(np.int64)
    )
    schedule = BlockSchedule(
        len(train_blocks), cfg.batch_size, cfg.seed, accelerator.process_index, accelerator.num_processes
    )
    tokens_per_step = cfg.batch_size * train_blocks.shape[1] * accelerator.num_processes

    def get_batch(step: int) -> torch.Tensor:
        return torch.from_numpy(train_blocks[schedule.indices(step)].astype(np.int64)).to(accelerator.device)

    # ---- 4. model, optimizer
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

    # ---- resume
    state = read_trainer_state(out)
    if state is None and (out / METRICS_NAME).is_file():
        raise ValueError(
            f"{out} holds a finished run without a checkpoint (keep_checkpoint was off); it cannot be "
            "extended: use another output directory"
        )
    if state is not None:
        _check_resumable(out, cfg)
        if state.get("tokens_key") != key:
            raise ValueError(
                f"{out}/checkpoint was trained on another corpus or tokenizer; use another output "
                "directory or delete the checkpoint"
            )
        load_checkpoint(out, accelerator.unwrap_model(model), optimizer)
        if cfg.max_steps is not None and state.get("planned_steps") not in (None, cfg.max_steps):
            logger.warning(
                "max_steps changed from %s to %s: the cosine schedule is recomputed for the new total",
                state["planned_steps"],
                cfg.max_steps,
            )
        logger.info("resuming from step %d (%s)", state["step"], out / CHECKPOINT_DIR)
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
    step: int = state["step"]
    budget_s = None if cfg.minutes is None else cfg.minutes * 60.0
    previous_plan: int | None = state["planned_steps"]
    planned: int | None = cfg.max_steps if cfg.max_steps is not None else previous_plan
    if (
        cfg.max_steps is None
        and budget_s is not None
        and planned is not None
        and step >= planned
        and state.get("loop_seconds", 0.0) < budget_s
    ):
        logger.info(
            "time budget raised to %.1f min: extending the run; re-planning after %d steps",
            cfg.minutes,
            cfg.calibration_steps,
        )
        planned = None  # calibrate again (at the old schedule's final rate), then a cosine over the new total
    state["planned_steps"] = planned

    logger.info(
        "decoder: %s parameters (%s without embeddings); %d train blocks x %d tokens, %d held-out blocks; "
        "%d tokens/step; mixed precision %s; %d process(es)",
        f"{sizes['parameters']:,}",
        f"{sizes['non_embedding_parameters']:,}",
        len(train_blocks),
        train_blocks.shape[1],
        len(heldout_blocks),
        tokens_per_step,
        accelerator.mixed_precision,
        accelerator.num_processes,
    )

    def write_log(record: dict[str, Any]) -> None:
        if main:
            with open(out / LOG_NAME, "a") as handle:
                handle.write(json.dumps(record) + "\n")

    def evaluate() -> float:
        t0 = _now()
        loss = _heldout_loss(model, heldout_blocks, cfg.batch_size, accelerator)
        state["evals"].append(
            {"step": step, "heldout_loss": loss, "heldout_ppl": _ppl(loss), "tokens_seen": state["tokens_seen"]}
        )
        write_log(
            {
                "step": step,
                "heldout_loss": round(loss, 5),
                "heldout_ppl": round(_ppl(loss), 3),
                "eval_seconds": round(_now() - t0, 2),
            }
        )
        logger.info("step %d: held-out loss %.4f (ppl %.2f)", step, loss, _ppl(loss))
        return _now() - t0

    def checkpoint() -> None:
        state["loop_seconds"] = loop_seconds()
        if main:
            save_checkpoint(out, accelerator.unwrap_model(model), optimizer, state)
            cfg.save(out / CHECKPOINT_DIR)
        accelerator.wait_for_everyone()

    # ---- 5. the loop
    t_loop, loop_before = _now(), state.get("loop_seconds", 0.0)

    def loop_seconds() -> float:  # wall-clock inside the training loop, all sessions (the time budget)
        return loop_before + _now() - t_loop

    eval_seconds = evaluate() if step == 0 else 0.0
    loop_at_start = loop_seconds()
    session_train_s = 0.0  # time inside optimizer steps this session (for tokens/s)
    session_steps = 0
    window: list[float] = []  # losses since the last log line
    recent: deque[float] = deque(maxlen=cfg.log_every)  # the last log_every losses (the final train loss)
    stopped_by = "max_steps"
    bar = tqdm(
        total=planned, initial=step, desc="pretrain", unit="step", disable=not (progress and main), dynamic_ncols=True
    )
    model.train()
    try:
        while True:
            if planned is not None and step >= planned:
                break
            state["loop_seconds"] = loop_seconds()
            if budget_s is not None and state["loop_seconds"] >= budget_s:
                stopped_by = "time"
                logger.info("time budget of %.1f min reached at step %d", cfg.minutes, step)
                break
            if stop_after_steps is not None and session_steps >= stop_after_steps:
                stopped_by = "stop_after_steps"
                break
            t0 = _now()
            lr = lr_at(step, cfg, planned if planned is not None else previous_plan)
            for group in optimizer.param_groups:
                group["lr"] = lr
            x = get_batch(step)
            loss = model(input_ids=x, labels=x).loss
            accelerator.backward(loss)
            if cfg.grad_clip > 0:
                accelerator.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            session_steps += 1
            state["step"] = step
            state["tokens_seen"] += tokens_per_step
            window.append(accelerator.reduce(loss.detach(), reduction="mean").item())
            recent.append(window[-1])
            dt = _now() - t0
            session_train_s += dt
            state["train_seconds"] += dt
            bar.update(1)

            # time-budget mode: set the schedule's length from the measured speed once calibrated, then re-plan
            # it at every log step from this session's mean time per step (evaluations and checkpoints included)
            if (
                cfg.max_steps is None
                and budget_s is not None
                and session_steps >= cfg.calibration_steps
                and (planned is None or step % cfg.log_every == 0)
            ):
                if planned is None:
                    per_step = session_train_s / session_steps + eval_seconds / cfg.eval_every
                else:
                    per_step = (loop_seconds() - loop_at_start) / session_steps
                before, planned = planned, step + max(1, int((budget_s - loop_seconds()) / per_step))
                state["planned_steps"] = planned
                bar.total = planned
                bar.refresh()
                if before is None:
                    logger.info("time budget %.1f min: %.2f s/step -> max_steps %d", cfg.minutes, per_step, planned)

            if step % cfg.log_every == 0 or step == planned:
                train_loss = float(np.mean(window))
                state["last_train_loss"] = train_loss
                tps = tokens_per_step * session_steps / max(session_train_s, 1e-9)
                write_log(
                    {
                        "step": step,
                        "train_loss": round(train_loss, 5),
                        "lr": lr,
                        "planned_steps": planned,
                        "tokens_seen": state["tokens_seen"],
                        "tokens_per_s": round(tps, 1),
                        "elapsed_s": round(_now() - t_session, 1),
                    }
                )
                bar.set_postfix(loss=f"{train_loss:.3f}", lr=f"{lr:.1e}", tok_s=f"{tps:.0f}")
                logger.info("step %d: train loss %.4f, lr %.2e, %.0f tokens/s", step, train_loss, lr, tps)
                window = []
            if step % cfg.eval_every == 0 and step != planned:
                eval_seconds = evaluate()
            if step % cfg.checkpoint_every == 0:
                checkpoint()
    except KeyboardInterrupt:
        logger.warning("interrupted at step %d: writing a checkpoint; rerun with the same output dir to resume", step)
        checkpoint()
        raise
    finally:
        bar.close()

    if recent:
        state["last_train_loss"] = float(np.mean(recent))
    if stopped_by == "stop_after_steps":
        checkpoint()
        logger.info("stopped after %d steps this session (step %d); rerun to resume", session_steps, step)
        return out

    # ---- 6. final evaluation, 8. save
    if not state["evals"] or state["evals"][-1]["step"] != step:
        evaluate()
    checkpoint()
    if main:
        unwrapped = accelerator.unwrap_model(model)
        unwrapped.generation_config.eos_token_id = tokenizer.eos_token_id
        unwrapped.generation_config.bos_token_id = tokenizer.bos_token_id
        unwrapped.generation_config.pad_token_id = tokenizer.pad_token_id
        unwrapped.save_pretrained(out)
        tokenizer.save_pretrained(out)
        cfg.save(out)
        final = state["evals"][-1]
        train_tokens = int(len(tokens["train"]))
        metrics = {
            "steps": step,
            "planned_steps": planned if planned is not None else step,  # None: the budget ran out while calibrating
            "stopped_by": stopped_by,
            "tokens_seen": state["tokens_seen"],
            "train_tokens_in_corpus": train_tokens,
            "epochs": state["tokens_seen"] / max(train_tokens, 1),
            "heldout_tokens_evaluated": int(heldout_blocks.numel()),
            "train_loss": state["last_train_loss"],  # mean of the last log_every steps
            "train_ppl": _ppl(state["last_train_loss"]),
            "heldout_loss": final["heldout_loss"],
            "heldout_ppl": final["heldout_ppl"],
            "initial_heldout_loss": state["evals"][0]["heldout_loss"],
            "tokens_per_s": state["tokens_seen"] / max(state["train_seconds"], 1e-9),
            "train_seconds": state["train_seconds"],
            "loop_seconds": loop_seconds(),
            "session_wall_seconds": _now() - t_session,
            **sizes,
            "vocab_size": len(tokenizer),
            "mixed_precision": accelerator.mixed_precision,
            "num_processes": accelerator.num_processes,
            "device": str(accelerator.device),
            "torch_threads": torch.get_num_threads(),
            "evals": state["evals"],
        }
        (out / METRICS_NAME).write_text(json.dumps(metrics, indent=1) + "\n")
        logger.info(
            "done: step %d, train loss %.4f, held-out loss %.4f (ppl %.2f), %.0f tokens/s -> %s",
            step,
            metrics["train_loss"] or float("nan"),
            final["heldout_loss"],
            final["heldout_ppl"],
            metrics["tokens_per_s"],
            out,
        )
    if not cfg.keep_checkpoint and main:
        import shutil

        shutil.rmtree(out / CHECKPOINT_DIR, ignore_errors=True)
    accelerator.wait_for_everyone()
    return out
