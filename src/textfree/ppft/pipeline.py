"""The default PPFT pipeline in one call, each step timed: decoder pretraining, stage 1, stage 2, evaluation.

``run_pipeline(PipelineConfig(out="runs/pipeline"))`` runs the four steps the PPFT issue's time target covers, with the
settings of the cells in ``examples/cells/ppft/`` (``pipeline_pretrain``, ``pipeline_stage1``, ``ddx_main`` at one
evaluation noise seed), each in its own subdirectory of ``out``:

* ``decoder/``: the local Llama decoder (:func:`~textfree.lm.local.pretrain_decoder`, preset ``small``);
* ``stage1/``: MiniLM + projection + LoRA aligned on general data (:func:`~textfree.ppft.train.train_stage1`);
* ``stage2/``: text-free domain adaptation on payloads at ``epsilon`` and ``k``
  (:func:`~textfree.ppft.train.train_stage2`);
* ``eval.json``: held-out accuracy per task at the same ``epsilon`` (:func:`~textfree.ppft.evaluate.evaluate_qa`);

and ``pipeline.json``: the config, each step's wall time (measured here around the whole call, loading included),
the accuracies and the total. A step whose directory already holds a finished run under the same settings is reused,
not redone: its ``reused`` flag is set and its time is the one recorded when it ran, so ``measured_in_one_go`` is
true only when every step ran in this call. An interrupted step resumes from its checkpoint on the next call. A step
directory that holds a run of other settings is an error naming them, raised before any step runs: nothing is
overwritten (use another ``out``). So is a finished stage above a step that would run anew or was rebuilt since
(stage 2 records a fingerprint of the stage-1 run it started from).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import read_json, write_json
from ..training.runs import InitChanged, differing_settings, finished_run, same_init

__all__ = ["PipelineConfig", "run_pipeline", "PIPELINE_JSON", "STEPS"]

log = logging.getLogger("textfree.ppft")

PIPELINE_JSON = "pipeline.json"
STEPS = ("pretrain", "stage1", "stage2", "evaluate")
_VOLATILE = {"progress", "resume", "cpu", "log_every"}


@dataclass(kw_only=True)
class PipelineConfig:
    """The default PPFT pipeline; every field defaults to the setting of the cells that make the report's tables."""

    out: str = field(
        default="runs/pipeline",
        metadata={"help": "Root directory: decoder/, stage1/, stage2/, eval.json, pipeline.json."},
    )
    dataset: str = field(
        default="pri-ddx",
        metadata={"help": "Pri-* dataset of stage 2 and the evaluation (pri-ddx, pri-slja or a directory)."},
    )
    encoder: str = field(
        default="default", metadata={"help": "Client encoder: 'default' (all-MiniLM-L6-v2) or an HF name/path."}
    )
    preset: str = field(default="small", metadata={"help": "Decoder pretraining preset: tiny (tests), small, gpu."})
    pretrain_steps: int | None = field(
        default=None, metadata={"help": "Override the preset's pretraining steps (tests)."}
    )
    pretrain_texts: str | None = field(
        default=None,
        metadata={"help": "Pretrain the decoder on this .txt/.jsonl/.json file instead of the shared-data corpus."},
    )
    stage1_limit_per_source: int | None = field(
        default=1000, metadata={"help": "Stage 1: at most this many records of each general source."}
    )
    stage1_max_steps: int | None = field(default=250, metadata={"help": "Stage 1: optimizer steps (batch 8)."})
    max_private_tokens: int = field(
        default=128, metadata={"help": "Client truncation of the private text in encoder tokens."}
    )
    epsilon: float = field(
        default=28.0,
        metadata={
            "help": "Client noise epsilon of stage 2 and the evaluation (28: the width-matched value of the paper's "
            "75)."
        },
    )
    k: int = field(default=4, metadata={"help": "Pooling k."})
    stage2_epochs: int = field(
        default=12, metadata={"help": "Stage 2: passes over the training payloads, fresh noise each."}
    )
    stage2_max_steps: int | None = field(
        default=None, metadata={"help": "Stage 2: stop after this many steps (tests)."}
    )
    stage2_limit: int | None = field(
        default=None, metadata={"help": "Stage 2: use only the first N training records (tests)."}
    )
    stage2_prompt_variants: float | None = field(
        default=None,
        metadata={
            "help": "Stage 2, client side, training only: the chance per example and epoch of a fresh rewrite of the "
            "training prompt (Stage2Config.prompt_variants; null: off, as PPFT)."
        },
    )
    stage2_prompt_variant_drop: float = field(
        default=0.0, metadata={"help": "With stage2_prompt_variants: each list item left out with this probability."}
    )
    stage2_prompt_variant_rephrase: float | None = field(
        default=None,
        metadata={
            "help": "With stage2_prompt_variants: a rewrite said in another sentence frame with this probability."
        },
    )
    eval_tasks: list[str] = field(
        default_factory=lambda: ["mcqa", "open"], metadata={"help": "Evaluation tasks (textfree.ppft.evaluate.TASKS)."}
    )
    eval_limit: int | None = field(default=None, metadata={"help": "Evaluate on the first N held-out records only."})
    eval_prompts: str | None = field(
        default=None,
        metadata={
            "help": "Also score these Pri-* layout JSON Lines records at the same noise (e.g. the hand-written prompts "
            "of tests/fixtures/ppft/handwritten_ddx.jsonl, never trained on): their accuracy per task."
        },
    )
    eval_seed: int = field(default=0, metadata={"help": "Evaluation noise seed (experiments: reproducible noise)."})
    seed: int = field(default=0, metadata={"help": "Training seed of every step."})
    progress: bool = field(default=True, metadata={"help": "Progress bars."})

    def __post_init__(self) -> None:
        from ..lm.local.config import PRESETS
        from .checks import EVAL_TASKS

        if not self.out:
            raise ValueError("out (the pipeline's root directory) is required")
        if not (isinstance(self.epsilon, (int, float)) and self.epsilon > 0):
            raise ValueError(
                f"epsilon must be a positive number, got {self.epsilon!r} (the pipeline trains on noisy payloads)"
            )
        for name in ("k", "stage2_epochs", "max_private_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in (
            "pretrain_steps",
            "stage1_limit_per_source",
            "stage1_max_steps",
            "stage2_max_steps",
            "stage2_limit",
            "eval_limit",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or null, got {value}")
        if self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {self.preset!r}")
        if self.pretrain_texts is not None and not Path(self.pretrain_texts).is_file():
            raise ValueError(
                f"pretrain_texts {self.pretrain_texts!r} is not a file (a .txt, .jsonl or .json of documents)"
            )
        if self.eval_prompts is not None and not Path(self.eval_prompts).is_file():
            raise ValueError(f"eval_prompts {self.eval_prompts!r} is not a file (Pri-* layout JSON Lines records)")
        if not self.eval_tasks or any(t not in EVAL_TASKS for t in self.eval_tasks):
            raise ValueError(f"eval_tasks must be a non-empty list from {EVAL_TASKS}, got {self.eval_tasks!r}")
        if self.encoder != "default":
            from ..model_paths import local_model_problem

            if problem := local_model_problem(self.encoder):
                raise ValueError(f"encoder: {problem}")  # found now, not after the decoder's pretraining

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pretrain_config(cfg: PipelineConfig):
    from ..lm.local import DecoderPretrainConfig

    overrides: dict[str, Any] = {"output_dir": str(Path(cfg.out) / "decoder"), "seed": cfg.seed}
    if cfg.pretrain_steps is not None:
        overrides["max_steps"] = cfg.pretrain_steps
    return DecoderPretrainConfig.from_preset(cfg.preset, **overrides)


def _stage1_config(cfg: PipelineConfig, decoder: str):
    from .train import Stage1Config

    return Stage1Config(
        decoder=decoder,
        out=str(Path(cfg.out) / "stage1"),
        encoder=cfg.encoder,
        k=cfg.k,
        limit_per_source=cfg.stage1_limit_per_source,
        max_steps=cfg.stage1_max_steps,
        max_private_tokens=cfg.max_private_tokens,
        save_every=100,
        seed=cfg.seed,
        progress=cfg.progress,
    )


def _stage2_config(cfg: PipelineConfig, init: str):
    from .train import Stage2Config

    return Stage2Config(
        init=init,
        out=str(Path(cfg.out) / "stage2"),
        dataset=cfg.dataset,
        epsilon=cfg.epsilon,
        k=cfg.k,
        epochs=cfg.stage2_epochs,
        max_steps=cfg.stage2_max_steps,
        limit=cfg.stage2_limit,
        prompt_variants=cfg.stage2_prompt_variants,
        prompt_variant_drop=cfg.stage2_prompt_variant_drop,
        prompt_variant_rephrase=cfg.stage2_prompt_variant_rephrase,
        seed=cfg.seed,
        progress=cfg.progress,
    )


def _or_nan(value: float | None) -> float:
    """A recorded time, or nan where the run records it as unknown (None)."""
    return float("nan") if value is None else value


def _timed(fn) -> tuple[Any, float]:
    t0 = time.perf_counter()
    value = fn()
    return value, round(time.perf_counter() - t0, 2)


def _check_steps_below(stage_cfgs: dict[str, Any], decoder_done: bool, decoder: str) -> None:
    """A finished stage is reused only on top of the step it was trained from. Raised before any step runs: a finished
    stage whose lower step would run anew (missing or unfinished), or a finished stage 2 whose stage-1 run was rebuilt
    since (its recorded init fingerprint). A stage 2 from before fingerprints is reused with a warning."""
    s1, s2 = stage_cfgs["stage1"], stage_cfgs["stage2"]
    s1_done = finished_run(s1.out, s1.to_dict(), _VOLATILE)
    s2_done = finished_run(s2.out, s2.to_dict(), _VOLATILE)
    for done, above, lower, lower_done in (
        (s1_done, s1.out, decoder, decoder_done),
        (s2_done, s2.out, s1.out, s1_done),
    ):
        if done and not lower_done:
            raise ValueError(
                f"{above!r} holds a finished run, but {lower!r} below it is missing or unfinished and would "
                f"be trained anew under it; remove {above!r} (and the steps above it) or use another out"
            )
    if s2_done:
        try:
            checked = same_init(s2.out, read_json(Path(s2.out) / "summary.json").get("init_fingerprint"), s1.out)
        except InitChanged as exc:
            raise InitChanged(
                f"{exc}: remove {s2.out!r} or use another out (finished steps are never overwritten)"
            ) from None
        if not checked:
            log.warning(
                "%s records no fingerprint of its init run %s; reusing it without checking that it is unchanged",
                s2.out,
                s1.out,
            )


def run_pipeline(cfg: PipelineConfig) -> dict[str, Any]:
    """Run (or resume) the pipeline; returns what it writes to ``<out>/pipeline.json``."""
    from ..lm.local import finished_pretraining

    root = Path(cfg.out)
    steps: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()

    # settings are checked before anything runs: a step directory holding a run of other settings is an error, never
    # overwritten (finished_pretraining raises for a decoder of other settings)
    pre = _pretrain_config(cfg)
    decoder_done = finished_pretraining(pre)
    stage_cfgs = {"stage1": _stage1_config(cfg, pre.output_dir), "stage2": _stage2_config(cfg, str(root / "stage1"))}
    _check_settings(stage_cfgs)
    _check_steps_below(stage_cfgs, decoder_done, pre.output_dir)
    root.mkdir(parents=True, exist_ok=True)  # only once every setting has passed: a refused call leaves no directory

    steps["pretrain"] = _pretrain_step(cfg, pre, decoder_done)
    lm = _train_stages(stage_cfgs, steps)

    # 4. evaluation on the held-out split, at the same noise, one noise seed
    log.info("pipeline 4/4: evaluating %s on the held-out split of %s", steps["stage2"]["dir"], cfg.dataset)
    evaluation, wall = _timed(lambda: _evaluate(cfg, lm, steps["stage2"]["dir"]))
    write_json(root / "eval.json", evaluation)
    steps["evaluate"] = {"dir": str(root / "eval.json"), "reused": False, "wall_s": wall}

    result = {
        "config": cfg.to_dict(),
        "steps": steps,
        "accuracy": evaluation["accuracy"],
        "n_heldout": evaluation["n"],
        "prompts_accuracy": evaluation.get("prompts_accuracy"),
        "n_prompts": evaluation.get("n_prompts"),
        "total_wall_s": round(sum(s["wall_s"] for s in steps.values()), 2),
        "this_call_wall_s": round(time.perf_counter() - started, 2),
        "measured_in_one_go": not any(s["reused"] for s in steps.values()),
    }
    write_json(root / PIPELINE_JSON, result)
    return result


def _check_settings(stage_cfgs: dict[str, Any]) -> None:
    """Refuse a stage directory that holds a run of other settings (finished steps are never overwritten)."""
    for name, step_cfg in stage_cfgs.items():
        differ = differing_settings(step_cfg.out, step_cfg.to_dict(), _VOLATILE)
        if differ:
            raise ValueError(
                f"{step_cfg.out!r} holds a {name} run with other settings ({', '.join(differ)}); "
                "use another out (finished steps are never overwritten)"
            )


def _pretrain_step(cfg: PipelineConfig, pre, decoder_done: bool) -> dict[str, Any]:
    """Step 1, decoder pretraining (a time- or step-budgeted run of the local Llama decoder), or its finished run
    reused; returns the step's record."""
    from ..lm.local import pretrain_decoder
    from ..lm.local.corpus import load_text_file

    if decoder_done:
        wall = read_json(Path(pre.output_dir) / "metrics.json").get("session_wall_seconds", float("nan"))
        return {"dir": pre.output_dir, "reused": True, "wall_s": wall}
    log.info("pipeline 1/4: pretraining the %s decoder in %s", cfg.preset, pre.output_dir)
    texts = load_text_file(cfg.pretrain_texts) if cfg.pretrain_texts else None
    _, wall = _timed(lambda: pretrain_decoder(pre, texts=texts, progress=cfg.progress))
    return {"dir": pre.output_dir, "reused": False, "wall_s": wall}


def _train_stages(stage_cfgs: dict[str, Any], steps: dict[str, dict[str, Any]]):
    """Steps 2 and 3, stage 1 and stage 2, each reused when its directory holds a finished run of the same config;
    records each in ``steps``. Returns the stage-2 model when this call trained it, else None."""
    from .train import train_stage1, train_stage2

    lm = None
    for name, train in (("stage1", train_stage1), ("stage2", train_stage2)):
        step_cfg = stage_cfgs[name]
        if finished_run(step_cfg.out, step_cfg.to_dict(), _VOLATILE):
            summary = read_json(Path(step_cfg.out) / "summary.json")
            steps[name] = {
                "dir": step_cfg.out,
                "reused": True,
                "wall_s": _or_nan(summary.get("total_wall_s")),
                "final_loss": summary.get("final_loss"),
            }
            lm = None
        else:
            log.info("pipeline %d/4: %s in %s", 2 if name == "stage1" else 3, name, step_cfg.out)
            summary, wall = _timed(lambda: train(step_cfg))
            lm = summary.pop("model")
            steps[name] = {
                "dir": step_cfg.out,
                "reused": False,
                "wall_s": wall,
                "final_loss": summary.get("final_loss"),
            }
    return lm


def _evaluate(cfg: PipelineConfig, lm, stage2_dir: str) -> dict[str, Any]:
    """Step 4: held-out accuracy per task of the stage-2 model (``lm``, or loaded from ``stage2_dir`` when None) at
    the pipeline's noise, one noise seed."""
    from ..data import load_privacyrestore, ppft_split
    from .evaluate import evaluate_qa, task_labels
    from .model import TextFreeLM

    model = lm if lm is not None else TextFreeLM.load(stage2_dir)
    split = ppft_split(cfg.dataset)
    parts = {"held-out": split["heldout"][: cfg.eval_limit] if cfg.eval_limit else split["heldout"]}
    if cfg.eval_prompts is not None:
        parts["prompts"] = load_privacyrestore(Path(cfg.eval_prompts))
    labels = task_labels(split["train"], split["heldout"], *parts.values())
    out = {"n": len(parts["held-out"]), "epsilon": cfg.epsilon, "k": cfg.k, "seed": cfg.eval_seed, "accuracy": {}}
    if "prompts" in parts:
        out |= {"n_prompts": len(parts["prompts"]), "prompts_accuracy": {}}
    for part, records in parts.items():
        for task in cfg.eval_tasks:
            r = evaluate_qa(model, records, task=task, epsilon=cfg.epsilon, k=cfg.k, labels=labels,
                            seed=cfg.eval_seed, progress=cfg.progress)  # fmt: skip
            out["accuracy" if part == "held-out" else "prompts_accuracy"][task] = r["accuracy"]
            log.info("pipeline 4/4: %s %s accuracy %.4f (n=%d, epsilon %g)", part, task, r["accuracy"], len(records),
                     cfg.epsilon)  # fmt: skip
    return out
