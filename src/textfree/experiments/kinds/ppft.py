"""Cell kinds for the PPFT pipeline: one per stage, so the experiment runner drives all of it.

* ``ppft_pretrain``: pretrain the local decoder (``textfree.lm.local``). Params: ``out`` (directory), ``preset``
  (tiny | small | gpu) and any :class:`~textfree.lm.local.DecoderPretrainConfig` field as ``config`` overrides.
* ``ppft_stage1``: alignment (:func:`~textfree.ppft.train.train_stage1`); params are
  :class:`~textfree.ppft.train_config.Stage1Config` fields (``decoder``, ``out``, ...).
* ``ppft_stage2``: text-free domain adaptation on the cell's ``dataset`` (pri-ddx | pri-slja), trained **once per
  grid point** (the cell's seeds do not retrain), then evaluated on the held-out split **once per seed**: the
  seed is the evaluation noise seed, so every metric is a mean over noise draws. Params are
  :class:`~textfree.ppft.train_config.Stage2Config` fields (``init``, ``epsilon``, ``k``, ``mechanism``,
  ``noise_match``,
  ``tasks``, ``blind``, ``epochs``, ...) plus ``out`` (a template: ``{dataset}``, ``{epsilon}``, ``{k}``,
  ``{mechanism}``, ``{noise_match}``, ``{blind}`` are filled in), ``train_seed`` (default 0) and ``eval_tasks``.
* ``ppft_evaluate``: evaluate an existing run (``model``) on the cell's ``dataset``: a Pri-* held-out split, or a
  general MCQA set (``csqa``, ``arc``: the cell's ``split``) for PPFT's Table 4. The lower bound of Table 1 is
  this kind on a stage-1 run.
* ``ppft_pipeline``: the whole default pipeline in one go (:func:`~textfree.ppft.pipeline.run_pipeline`: decoder
  pretraining, stage 1, stage 2 on the cell's ``dataset``, evaluation), each step timed; params are
  :class:`~textfree.ppft.pipeline.PipelineConfig` fields, the seed is the training seed. Metrics: ``<step>_wall_s``
  per step, ``total_wall_s``, ``measured_in_one_go`` (1 when no step was reused), ``acc_<task>`` and ``n_heldout``.

Training kinds reuse a finished run: when ``out`` already holds a ``summary.json`` written under the same training
config, the model is loaded instead of retrained and ``reused`` is 1 (the recorded wall time is the original
run's). A ``ppft_stage2`` run is reused only while its ``init`` run is the one it was trained from (its recorded
``init_fingerprint``). Evaluation metrics are always computed afresh. The stage-1, stage-2 and evaluate kinds record
the fingerprint of the stage-1 run their model descends from as the point's ``stage1_build`` provenance
(:func:`~textfree.ppft.checkpoint.stage1_build`): ``runs/stage1`` rebuilt is another build at the same path.

Metrics of the evaluating kinds, per task ``T`` in ``eval_tasks`` (mcqa, open, blind_mcqa, blind_open, the
option-ranked mcqa_rank, blind_mcqa_rank, the label-ranked open_rank, blind_open_rank, the slot-count-only controls
length_mcqa, length_open and, for a model with an answer head, open_head and mcqa_head: :mod:`textfree.ppft.evaluate`):
``acc_T``, ``acc_T_no_leak`` (records whose private text does not name the answer) and ``acc_T_exclusive``;
plus ``n_heldout``, ``n_no_leak``, ``majority_baseline``, ``payload_epsilon`` (the eps the client noised the evaluation
payloads with: the cell's, else the model's; NaN without noise), ``slot_epsilon`` (worst-case loss of one slot; NaN
without noise), ``prompt_epsilon`` (mean worst-case loss of a held-out prompt) and ``eval_wall_s``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from ...ppft.checks import EVAL_TASKS
from ...results.cell import CellError
from ..registry import RunContext, register_cell_kind
from ._builds import record_build

__all__ = ["EVAL_TASKS", "eval_metric_names", "STAGE2_PARAMS", "STAGE1_PARAMS", "EVALUATE_PARAMS", "PRETRAIN_PARAMS"]

_PER_TASK = ("acc_{}", "acc_{}_no_leak", "acc_{}_exclusive")
_COMMON = (
    "n_heldout",
    "n_no_leak",
    "majority_baseline",
    "payload_epsilon",
    "slot_epsilon",
    "prompt_epsilon",
    "eval_wall_s",
)
_TRAIN = ("train_first_loss", "train_final_loss", "train_wall_s", "train_steps", "reused")


_PROMPTS = ("prompts_acc_{}",)


def eval_metric_names() -> tuple[str, ...]:
    tasks = tuple(p.format(t) for t in EVAL_TASKS for p in _PER_TASK + _PROMPTS)
    return tasks + _COMMON + ("n_prompts",)


def _config_params(cls, extra: dict[str, str], skip: tuple[str, ...] = ()) -> dict[str, str]:
    out = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cls) if f.name not in skip}
    return out | extra


def _stage_classes():
    from ...ppft.train import Stage1Config, Stage2Config

    return Stage1Config, Stage2Config


_S1, _S2 = _stage_classes()
STAGE1_PARAMS = _config_params(_S1, {})
STAGE2_PARAMS = _config_params(
    _S2,
    {
        "out": "Run directory template; {dataset} {epsilon} {k} {mechanism} {noise_match} {blind} are filled in.",
        "train_seed": "Training seed (init, dropout, data order, training noise); the cell's seeds are evaluation "
        "noise seeds.",
        "eval_tasks": "Evaluation tasks: mcqa, mcqa_rank, open, open_rank, length_mcqa, length_open, open_head and "
        "mcqa_head (answer head models), blind_mcqa, blind_mcqa_rank, blind_open, blind_open_rank "
        "(default: mcqa + mcqa_rank + open + open_rank + length_open; blind runs: the blind_ four).",
        "eval_limit": "Evaluate on the first N held-out records only.",
        "eval_prompts": "Also score these Pri-* layout JSON Lines records (e.g. the hand-written prompts of "
        "tests/fixtures/ppft/handwritten_ddx.jsonl, never trained on) at the same noise: prompts_acc_<task>.",
    },
    skip=("seed", "progress", "resume"),
)
EVALUATE_PARAMS = {
    "model": "The PPFT run directory to evaluate.",
    "epsilon": "Client noise epsilon at test time (null: clean payloads, NOT private). Default: the model's.",
    "k": "Pooling k (default: the model's).",
    "mechanism": "Noise family (default: the model's).",
    "noise_match": "Gaussian matching, budget or norm (default: the model's).",
    "eval_tasks": "Evaluation tasks (default: mcqa + mcqa_rank + open + open_rank + length_open on Pri-*, mcqa + "
    "mcqa_rank elsewhere).",
    "eval_limit": "Evaluate on the first N records only.",
    "eval_prompts": "Also score these Pri-* layout JSON Lines records at the same noise: prompts_acc_<task>.",
}
PRETRAIN_PARAMS = {
    "out": "Output directory of the decoder.",
    "preset": "tiny | small | gpu (default small).",
    "config": "Mapping of DecoderPretrainConfig field overrides.",
}


# ------------------------------------------------------------------------------------------------ helpers
def _reusable(run: Path, config: dict[str, Any], volatile: set[str]) -> bool:
    from ...training.runs import finished_run

    return finished_run(run, config, volatile)


def _train_metrics(summary: dict[str, Any], reused: bool) -> dict[str, float]:
    """The run's training figures; nan where the summary has none or records one as unknown (null: a run resumed from
    a checkpoint that predates the record of training time and first loss)."""

    def number(*keys: str) -> float:
        for key in keys:
            if key in summary:
                return float("nan") if summary[key] is None else summary[key]
        return float("nan")

    return {
        "train_first_loss": number("first_loss"),
        "train_final_loss": number("final_loss"),
        "train_wall_s": number("total_wall_s", "wall_s"),
        "train_steps": number("steps"),
        "reused": 1.0 if reused else 0.0,
    }


def _is_pri(dataset: str) -> bool:
    return dataset.lower().startswith("pri-") or Path(dataset).is_dir() and (Path(dataset) / "test.jsonl").exists()


def _records(dataset: str, split: str | None, limit: int | None, validation: float | None = None):
    """(train, evaluation records, label records) for a Pri-* set (ppft_split: its held-out part, or with split
    ``validation`` the validation part carved from train at share ``validation``) or a general MCQA set. The
    label records are the whole set, whichever part is evaluated, so the open-answer label set is the same."""
    from ...data import MCQARecord, load_dataset, ppft_split

    if _is_pri(dataset):
        parts = ppft_split(dataset, validation=validation or 0.0)
        train, evaluated = parts["train"], parts["validation" if split == "validation" else "heldout"]
        every = parts["train"] + parts["validation"] + parts["heldout"]
    else:
        train, evaluated = [], load_dataset(dataset, split=split)
        every = evaluated
    evaluated = [r for r in evaluated if isinstance(r, MCQARecord)]
    if not evaluated:
        raise ValueError(f"{dataset!r} holds no multiple-choice records to evaluate on")
    return train, (evaluated if limit is None else evaluated[:limit]), [r for r in every if isinstance(r, MCQARecord)]


def _evaluate(
    lm,
    cell,
    seed: int,
    context: RunContext,
    *,
    tasks,
    epsilon,
    k,
    mechanism,
    noise_match,
    limit,
    validation: float | None = None,
    prompts: str | None = None,
) -> dict[str, float]:
    from ...data import load_privacyrestore
    from ...ppft.evaluate import evaluate_qa, majority_baseline, task_labels

    train, records, all_records = context.cached(
        ("records", cell.dataset, cell.split, limit, validation),
        lambda: _records(cell.dataset, cell.split, limit, validation),
    )
    written = context.cached(("prompts", prompts), lambda: load_privacyrestore(Path(prompts))) if prompts else []
    labels = context.cached(("labels", cell.dataset, prompts), lambda: task_labels(all_records, written))
    out: dict[str, float] = {}
    wall = 0.0
    for task in tasks if written else ():  # the hand-written prompts, at the same noise and seed
        r = evaluate_qa(lm, written, task=task, epsilon=epsilon, k=k, mechanism=mechanism, match=noise_match,
                        labels=labels, seed=seed)  # fmt: skip
        out[f"prompts_acc_{task}"], out["n_prompts"] = r["accuracy"], len(written)
        wall += r["wall_s"]
    for task in tasks:
        r = evaluate_qa(
            lm,
            records,
            task=task,
            epsilon=epsilon,
            k=k,
            mechanism=mechanism,
            match=noise_match,
            labels=labels,
            seed=seed,
        )
        out[f"acc_{task}"] = r["accuracy"]
        out[f"acc_{task}_no_leak"] = r["accuracy_no_leak"]
        out[f"acc_{task}_exclusive"] = r["accuracy_exclusive"]
        out["n_no_leak"] = r["n_no_leak"]
        wall += r["wall_s"]
        context.logger.info(
            "%s seed %d %s: accuracy %.4f (no leak %.4f)", cell.name, seed, task, r["accuracy"], r["accuracy_no_leak"]
        )
    out["n_heldout"] = len(records)
    out["majority_baseline"] = majority_baseline(train, records) if train else float("nan")
    out |= _privacy(
        lm,
        records,
        epsilon=None if all(t.startswith("blind") for t in tasks) else epsilon,
        k=k,
        mechanism=mechanism,
        noise_match=noise_match,
        context=context,
    )
    out["eval_wall_s"] = wall
    return out


def _privacy(lm, records, *, epsilon, k, mechanism, noise_match, context) -> dict[str, float]:
    """Worst-case loss of one slot and the mean worst-case loss of a held-out prompt (by its slot count, or the
    padded count with the model's ``fixed_slots``)."""
    if epsilon is None:
        return {"payload_epsilon": float("nan"), "slot_epsilon": float("nan"), "prompt_epsilon": float("nan")}
    from ...data import mcqa_prompt

    privatizer = lm.privatizer(epsilon, k=k, mechanism=mechanism, match=noise_match)
    slot = privatizer.privatization.slot_loss().epsilon

    def mean_slots() -> float:
        kk = privatizer.privatization.k
        lengths = [len(lm.encoder.tokenize([mcqa_prompt(r).private])["input_ids"][0]) for r in records]
        return sum(math.ceil(n / kk) for n in lengths) / len(lengths)

    pad_to = privatizer.privatization.pad_to  # fixed_slots: every payload has this many slots
    slots = pad_to if pad_to is not None else context.cached(("slots", id(lm), privatizer.privatization.k), mean_slots)
    return {"payload_epsilon": float(epsilon), "slot_epsilon": slot, "prompt_epsilon": slot * slots}


def _default_tasks(dataset: str, blind: bool) -> list[str]:
    if blind:
        return ["blind_mcqa", "blind_mcqa_rank", "blind_open", "blind_open_rank"]
    return (
        ["mcqa", "mcqa_rank", "open", "open_rank", "length_open"]
        if dataset.lower().startswith("pri-")
        else ["mcqa", "mcqa_rank"]
    )


def _check_tasks(tasks: Any) -> None:
    if not isinstance(tasks, list) or not tasks or any(t not in EVAL_TASKS for t in tasks):
        raise CellError(f"eval_tasks must be a non-empty list from {EVAL_TASKS}, got {tasks!r}", field="params")


# ------------------------------------------------------------------------------------------------ stage 2
def _evaluating_points(cell, points, kind: str, datasets: str, required: dict[str, str]) -> list[dict[str, Any]]:
    """Checks shared by the evaluating kinds; returns each point's resolved params. On a Pri-* set the evaluated
    part is the held-out one (``split`` unset or ``heldout``) or, for ``ppft_stage2`` runs trained with
    ``validation`` > 0, the validation part (``split: validation``): model selection never reads the held-out part."""
    if cell.dataset is None:
        raise CellError(f"{kind} needs a `dataset` ({datasets})", field="dataset")
    parts = ("heldout", "validation") if kind == "ppft_stage2" else ("heldout",)
    if _is_pri(cell.dataset) and cell.split not in (None, *parts):
        raise CellError(
            f"{kind} on a Pri-* set evaluates its {' or '.join(parts)} part: split must be "
            f"{' or '.join(repr(x) for x in parts)} or unset, got {cell.split!r}",
            field="split",
        )
    if cell.mechanism is not None:
        raise CellError(
            "ppft kinds take the noise in params (epsilon, mechanism, noise_match), not `mechanism`", field="mechanism"
        )
    out = []
    for point in points:
        p = cell.resolve(point).params
        missing = [name for name in required if name not in p]
        if missing:
            wanted = " and ".join(f"`{n}` ({required[n]})" for n in required)
            raise CellError(f"{kind} needs params {wanted}", field="params")
        if "eval_tasks" in p:
            _check_tasks(p["eval_tasks"])
        for name in ("eval_limit", "k"):  # 0 would mean "all records" / "the model's k" where it is read with `or`
            value = p.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise CellError(
                    f"{name} must be an integer >= 1 or null at {point or 'the cell'}, got {value!r}",
                    field=f"params.{name}",
                )
        if cell.split == "validation" and not p.get("validation"):
            raise CellError(
                f"split 'validation' evaluates the part of the training rows a run held back: params.validation "
                f"must be > 0 at {point or 'the cell'}, got {p.get('validation')!r}",
                field="params.validation",
            )
        out.append(p)
    return out


def _stage2_validate(cell, points) -> None:
    required = {"init": "a stage-1 run", "out": "a run directory template"}
    for point, p in zip(points, _evaluating_points(cell, points, "ppft_stage2", "pri-ddx or pri-slja", required)):
        try:
            _stage2_config(cell, p)
        except (TypeError, ValueError, KeyError) as exc:
            raise CellError(f"invalid stage-2 settings at {point or 'the cell'}: {exc}", field="params") from None


def _stage2_config(cell, p: dict[str, Any]):
    from ...ppft.train import Stage2Config

    fields = {f.name for f in dataclasses.fields(Stage2Config)}
    cfg = {k: v for k, v in p.items() if k in fields}
    fill = {
        "dataset": cell.dataset,
        "epsilon": p.get("epsilon", 75.0),
        "k": p.get("k"),
        "mechanism": p.get("mechanism") or "l2_laplace",
        "noise_match": p.get("noise_match", "budget"),
        "blind": bool(p.get("blind", False)),
    }
    out = str(p["out"]).format(**fill)
    return Stage2Config(
        **cfg | {"out": out, "dataset": cell.dataset, "seed": int(p.get("train_seed", 0)), "progress": False}
    )


def _check_same_init(run: Path, summary: dict[str, Any], init: str, name: str, context: RunContext) -> None:
    """A finished stage-2 run is reused only if its ``init`` run is the one it was trained from (see
    :func:`textfree.training.runs.same_init`). Runs that predate the recorded fingerprint are reused with a warning."""
    from ...training.runs import InitChanged, same_init

    try:
        checked = same_init(run, summary.get("init_fingerprint"), init)
    except InitChanged as exc:
        raise CellError(f"{exc}: remove {run} or give the cell another out", field="params.out") from None
    if not checked:
        context.logger.warning(
            "%s: %s records no fingerprint of its init run %s; reusing it without checking that %s is unchanged",
            name,
            run,
            init,
            init,
        )


def stage2_model(cfg, name: str, context: RunContext):
    """(model, training metrics) of stage 2 under ``cfg``: a finished run with the same config is reused, else trained;
    cached for the rest of the cell run."""

    def train():
        from ...atomic import read_json
        from ...ppft.model import TextFreeLM
        from ...ppft.train import train_stage2

        run = Path(cfg.out)
        if _reusable(run, cfg.to_dict(), {"progress", "resume", "cpu", "log_every"}):
            summary = read_json(run / "summary.json")
            _check_same_init(run, summary, cfg.init, name, context)
            context.logger.info("%s: reusing the finished run %s", name, run)
            return TextFreeLM.load(run), _train_metrics(summary, True)
        summary = train_stage2(cfg)
        return summary.pop("model"), _train_metrics(summary, False)

    return context.cached(("stage2", cfg.out), train)


@register_cell_kind(
    "ppft_stage2",
    metrics=eval_metric_names() + _TRAIN,
    params=STAGE2_PARAMS,
    validate=_stage2_validate,
    takes_attack=False,
)
def ppft_stage2(cell, point, seed: int, context: RunContext) -> dict[str, float]:
    """PPFT stage 2 on the cell's dataset (trained once per point), evaluated on its held-out split per noise seed."""
    p = cell.resolve(point).params
    cfg = _stage2_config(cell, p)
    lm, train_metrics = stage2_model(cfg, cell.name, context)
    record_build(context, cfg.out)
    tasks = p.get("eval_tasks") or _default_tasks(cell.dataset, cfg.blind)
    metrics = _evaluate(
        lm,
        cell,
        seed,
        context,
        tasks=tasks,
        epsilon=cfg.epsilon,
        k=cfg.k,
        mechanism=cfg.mechanism,
        noise_match=cfg.noise_match,
        limit=p.get("eval_limit"),
        validation=cfg.validation,
        prompts=p.get("eval_prompts"),
    )
    return metrics | train_metrics


# ------------------------------------------------------------------------------------------------ evaluate
def _evaluate_validate(cell, points) -> None:
    _evaluating_points(
        cell, points, "ppft_evaluate", "pri-ddx, pri-slja, csqa, arc, or a path", {"model": "a PPFT run directory"}
    )


@register_cell_kind(
    "ppft_evaluate",
    metrics=eval_metric_names(),
    params=EVALUATE_PARAMS,
    validate=_evaluate_validate,
    takes_attack=False,
)
def ppft_evaluate(cell, point, seed: int, context: RunContext) -> dict[str, float]:
    """Accuracy of an existing PPFT run on a held-out split or a general MCQA set, per noise seed."""
    from ...ppft.model import TextFreeLM

    p = cell.resolve(point).params
    lm = context.cached(("model", p["model"]), lambda: TextFreeLM.load(p["model"]))
    record_build(context, p["model"])
    epsilon = p["epsilon"] if "epsilon" in p else lm.config.epsilon
    tasks = p.get("eval_tasks") or _default_tasks(cell.dataset, False)
    return _evaluate(
        lm,
        cell,
        seed,
        context,
        tasks=tasks,
        epsilon=epsilon,
        k=p.get("k"),
        mechanism=p.get("mechanism"),
        noise_match=p.get("noise_match"),
        limit=p.get("eval_limit"),
        prompts=p.get("eval_prompts"),
    )


# ------------------------------------------------------------------------------------------------ stage 1
def _stage1_validate(cell, points) -> None:
    for point in points:
        p = cell.resolve(point).params
        try:
            _stage1_config(p)
        except (TypeError, ValueError) as exc:
            raise CellError(f"invalid stage-1 settings at {point or 'the cell'}: {exc}", field="params") from None


def _stage1_config(p: dict[str, Any]):
    from ...ppft.train import Stage1Config

    return Stage1Config(**p | {"progress": False})


@register_cell_kind("ppft_stage1", metrics=_TRAIN, params=STAGE1_PARAMS, validate=_stage1_validate, takes_attack=False)
def ppft_stage1(cell, point, seed: int, context: RunContext) -> dict[str, float]:
    """PPFT stage 1 (alignment, no noise) with the cell's params; the seed is the training seed."""
    from ...atomic import read_json
    from ...ppft.train import train_stage1

    cfg = dataclasses.replace(_stage1_config(cell.resolve(point).params), seed=seed)
    run = Path(cfg.out)
    if _reusable(run, cfg.to_dict(), {"progress", "resume", "cpu", "log_every"}):
        record_build(context, run)
        return _train_metrics(read_json(run / "summary.json"), True)
    summary = train_stage1(cfg)
    summary.pop("model")
    record_build(context, run)
    return _train_metrics(summary, False)


# ------------------------------------------------------------------------------------------------ pretraining
def _pretrain_config(p: dict[str, Any], seed: int):
    from ...lm.local import DecoderPretrainConfig

    overrides = dict(p.get("config") or {}) | {"output_dir": str(p["out"]), "seed": seed}
    return DecoderPretrainConfig.from_preset(p.get("preset", "small"), **overrides)


def _pretrain_validate(cell, points) -> None:
    for point in points:
        p = cell.resolve(point).params
        if "out" not in p:
            raise CellError("ppft_pretrain needs params `out`", field="params")
        try:
            _pretrain_config(p, cell.seeds[0])
        except (TypeError, ValueError) as exc:
            raise CellError(f"invalid pretraining settings: {exc}", field="params") from None


@register_cell_kind(
    "ppft_pretrain",
    metrics=("heldout_loss", "heldout_ppl", "initial_heldout_loss", "parameters", "wall_s", "tokens_per_s", "reused"),
    params=PRETRAIN_PARAMS,
    validate=_pretrain_validate,
    takes_attack=False,
)
def ppft_pretrain(cell, point, seed: int, context: RunContext) -> dict[str, float]:
    """Pretrain the local decoder (the seed is the training seed); metrics from its metrics.json."""
    import json

    from ...lm.local import finished_pretraining, pretrain_decoder

    p = cell.resolve(point).params
    cfg = _pretrain_config(p, seed)
    out = Path(cfg.output_dir)
    reused = finished_pretraining(cfg)
    if not reused:
        pretrain_decoder(cfg, progress=False)
    m = json.loads((out / "metrics.json").read_text())
    return {
        "heldout_loss": m["heldout_loss"],
        "heldout_ppl": m["heldout_ppl"],
        "initial_heldout_loss": m["initial_heldout_loss"],
        "parameters": m["parameters"],
        "wall_s": m.get("session_wall_seconds", float("nan")),
        "tokens_per_s": m["tokens_per_s"],
        "reused": 1.0 if reused else 0.0,
    }


# ------------------------------------------------------------------------------------------------ the whole pipeline
def _pipeline_config(cell, p: dict[str, Any], seed: int):
    from ...ppft.pipeline import PipelineConfig

    return PipelineConfig(**p | {"dataset": cell.dataset or "pri-ddx", "seed": seed, "progress": False})


def _pipeline_validate(cell, points) -> None:
    if cell.mechanism is not None:
        raise CellError("ppft_pipeline takes the noise in params (epsilon, k), not `mechanism`", field="mechanism")
    for point in points:
        try:
            _pipeline_config(cell, cell.resolve(point).params, cell.seeds[0])
        except (TypeError, ValueError) as exc:
            raise CellError(f"invalid pipeline settings at {point or 'the cell'}: {exc}", field="params") from None


def _pipeline_params() -> dict[str, str]:
    from ...ppft.pipeline import PipelineConfig

    return _config_params(PipelineConfig, {}, skip=("seed", "progress", "dataset"))


def _pipeline_metrics() -> tuple[str, ...]:
    from ...ppft.pipeline import STEPS

    return (
        tuple(f"{s}_wall_s" for s in STEPS)
        + ("total_wall_s", "measured_in_one_go", "n_heldout", "n_prompts")
        + tuple(f"acc_{t}" for t in EVAL_TASKS)
        + tuple(f"prompts_acc_{t}" for t in EVAL_TASKS)
    )


@register_cell_kind(
    "ppft_pipeline",
    metrics=_pipeline_metrics(),
    params=_pipeline_params(),
    validate=_pipeline_validate,
    takes_attack=False,
)
def ppft_pipeline(cell, point, seed: int, context: RunContext) -> dict[str, float]:
    """The default PPFT pipeline (pretraining, stage 1, stage 2, evaluation) in one go, each step timed."""
    from ...ppft.pipeline import run_pipeline

    result = run_pipeline(_pipeline_config(cell, cell.resolve(point).params, seed))
    out = {f"{name}_wall_s": step["wall_s"] for name, step in result["steps"].items()}
    out |= {f"acc_{task}": acc for task, acc in result["accuracy"].items()}
    out |= {f"prompts_acc_{task}": acc for task, acc in (result.get("prompts_accuracy") or {}).items()}
    if result.get("n_prompts") is not None:
        out["n_prompts"] = float(result["n_prompts"])
    return out | {
        "total_wall_s": result["total_wall_s"],
        "measured_in_one_go": float(result["measured_in_one_go"]),
        "n_heldout": float(result["n_heldout"]),
    }
