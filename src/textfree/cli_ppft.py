"""``textfree ppft ...``: PPFT's commands: ``train`` (the whole default pipeline: decoder pretraining, stage 1,
stage 2, evaluation; ``pipeline`` is its old name), ``evaluate``, ``report``, and the steps and tools of PPFT alone
(``pretrain-decoder``, ``train-stage1``, ``train-stage2``, ``ask``, ``width-match``)."""

from __future__ import annotations

import typer

from textfree.accel import is_main_process
from textfree.cli_common import command_group, deprecated_alias, err, spinner, verbs_first

app = command_group(
    "PPFT: text-free alignment, noisy domain adaptation, text-free answers. 'train' runs every step; "
    "pretrain-decoder, train-stage1 and train-stage2 run one step each."
)


# =====================================================================================================================
# PPFT stages 1 and 2, ask, evaluate (textfree.ppft.train / model / server / evaluate)
# =====================================================================================================================
from pathlib import Path as _Path  # noqa: E402
from typing import List as _List  # noqa: E402
from typing import Optional as _Optional  # noqa: E402


def _ppft_fail(message: str, code: int = 2) -> None:
    from textfree.cli_common import _fail

    _fail(message, code)


def _require_run(path: _Path, flag: str) -> None:
    """A PPFT run directory given by ``flag``, checked before any heavy import: a wrong path is reported at once."""
    if not (path / "textfree_config.json").is_file():
        _ppft_fail(f"{flag} {str(path)!r} is not a PPFT run directory (no textfree_config.json)")


def _ppft_setup(verbose: bool = True) -> None:
    """Quiet transformers; ``verbose=False``: textfree's warnings only (logging:
    ``textfree.cli_common.setup_logging``)."""
    from textfree.cli_common import _quiet_transformers, setup_logging

    _quiet_transformers()
    setup_logging(verbose)


#: Config field -> the option of the command that sets it, where the names differ (the others match: ``batch_size``
#: is ``--batch-size``), so that an error names the flag the user typed.
_RENAMES = {"tasks": "task", "eval_tasks": "task", "output_dir": "out", "num_threads": "threads",
            "extra_text_files": "extra_text"}  # fmt: skip


def _ppft_run(fn, *args, **kwargs):
    """Call ``fn``; turn the errors a user can fix (bad paths, data, settings) into one error line, naming the flag
    where the error names a setting."""
    from textfree.cli_common import leading_flag_message, option_flags

    try:
        return fn(*args, **kwargs)
    except (ValueError, OSError) as exc:  # DataError, PayloadError: ValueErrors (textfree.payload imports torch)
        _ppft_fail(leading_flag_message(str(exc), option_flags(app, _RENAMES)))


def _stage_line(summary: dict) -> str:
    """'N steps, loss a -> b, T s' of a training summary; 'unknown' for what it records as None (a run resumed from
    a checkpoint that predates the record of first loss and training time)."""

    def fmt(value, spec: str) -> str:
        return "unknown" if value is None else format(value, spec)

    return (
        f"{summary['steps']} steps, loss {fmt(summary['first_loss'], '.4f')} -> {fmt(summary['final_loss'], '.4f')}, "
        f"{fmt(summary['total_wall_s'], '.0f')} s"
    )


@app.command("train-stage1")
def train_stage1_cmd(
    decoder: str = typer.Option(
        ..., "--decoder", help="Base decoder: a local directory (e.g. runs/decoder-small) or any HF causal LM name."
    ),
    out: _Path = typer.Option(
        _Path("runs/stage1"), "--out", help="Run directory (model, metrics.jsonl, checkpoints/)."
    ),
    encoder: str = typer.Option("default", help="Client encoder: 'default' (all-MiniLM-L6-v2) or an HF name/path."),
    data: _Optional[_List[str]] = typer.Option(
        None, "--data", help="General-domain source, repeatable: alpaca, lima, gsm8k:train (default: all three)."
    ),
    limit_per_source: _Optional[int] = typer.Option(None, help="At most this many records per source."),
    restore_fraction: float = typer.Option(
        0.0, help="Add 'restore the prompt' copies of this fraction of examples (see docs/ppft.md)."
    ),
    k: int = typer.Option(4, "--k", help="Pool k encoder tokens into one slot."),
    projection: str = typer.Option("linear", help="Projection P_psi: linear or mlp."),
    epochs: int = typer.Option(1, help="Passes over the data."),
    max_steps: _Optional[int] = typer.Option(None, help="Stop after this many optimizer steps."),
    batch_size: int = typer.Option(8, help="Examples per step."),
    lr: float = typer.Option(1e-3, help="Learning rate of projection + LoRA."),
    encoder_lr: float = typer.Option(5e-5, help="Learning rate of the encoder."),
    ema_decay: _Optional[float] = typer.Option(
        None,
        "--ema-decay",
        help="Keep an exponential moving average of the trained weights (this decay per step, e.g. 0.999) and save it "
        "as the run's weights; default: the last step's weights.",
    ),
    max_private_tokens: int = typer.Option(256, help="The client cuts private text to this many encoder tokens."),
    max_target_tokens: int = typer.Option(64, help="Cut targets to this many decoder tokens."),
    seed: int = typer.Option(0, help="Seed (init, dropout, data order)."),
    save_every: int = typer.Option(200, help="Checkpoint every N steps."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Continue from the newest checkpoint in --out."),
    cpu: bool = typer.Option(False, "--cpu", help="Force the CPU."),
) -> None:
    """Stage 1: align encoder + projection + LoRA decoder on general-domain data (no noise)."""
    from textfree.ppft.checks import DEFAULT_GENERAL_SOURCES
    from textfree.ppft.train_config import Stage1Config

    with spinner("loading ..."):  # torch and transformers: seconds
        # the config first, checked before torch: a bad setting is reported at once
        cfg = _ppft_run(
            Stage1Config,
            out=str(out),
            decoder=decoder,
            encoder=encoder,
            data=list(data or DEFAULT_GENERAL_SOURCES),
            limit_per_source=limit_per_source,
            restore_fraction=restore_fraction,
            k=k,
            projection=projection,
            epochs=epochs,
            max_steps=max_steps,
            batch_size=batch_size,
            lr=lr,
            encoder_lr=encoder_lr,
            max_private_tokens=max_private_tokens,
            max_target_tokens=max_target_tokens,
            ema_decay=ema_decay,
            seed=seed,
            save_every=save_every,
            resume=resume,
            cpu=cpu,
        )
        _ppft_setup()
        from textfree.ppft.train import train_stage1
    with spinner("loading the encoder, the decoder and the data ...", between="saving the model ..."):
        summary = _ppft_run(train_stage1, cfg)
    if is_main_process():  # under accelerate launch, once
        typer.echo(f"stage 1 done: {_stage_line(summary)}; model in {out}")


@app.command("train-stage2")
def train_stage2_cmd(
    init: _Path = typer.Option(..., "--from", help="The run to start from (a stage-1 run directory)."),
    dataset: str = typer.Option("pri-ddx", help="pri-ddx or pri-slja (its ppft_split train part), or a directory."),
    out: _Path = typer.Option(_Path("runs/stage2"), "--out", help="Run directory."),
    epsilon: float = typer.Option(75.0, "--epsilon", "-e", help="Client noise epsilon (L2-Laplace per unit distance)."),
    no_noise: bool = typer.Option(
        False, "--no-noise", help="Train on clean payloads (epsilon=None): the upper bound, NOT private."
    ),
    k: _Optional[int] = typer.Option(None, "--k", help="Pooling k (default: the init run's)."),
    mechanism: _Optional[str] = typer.Option(
        None, "--mechanism", help="Noise family: l2_laplace (default) or gaussian."
    ),
    noise_match: str = typer.Option(
        "budget",
        "--noise-match",
        help="Gaussian only: budget (same per-slot guarantee as L2-Laplace at --epsilon) or norm (same expected noise "
        "norm d/eps).",
    ),
    task: _Optional[_List[str]] = typer.Option(
        None, "--task", help="Training prompt format, repeatable: mcqa, open (default: both)."
    ),
    blind: bool = typer.Option(
        False, "--blind", help="The blind control: no private prefix at all (needs --no-noise)."
    ),
    epochs: int = typer.Option(3, help="Passes over the training payloads (fresh noise each)."),
    max_steps: _Optional[int] = typer.Option(None, help="Stop after this many optimizer steps."),
    batch_size: int = typer.Option(8, help="Payload rows per step."),
    lr: float = typer.Option(1e-3, help="Learning rate of projection + LoRA."),
    weight_decay: float = typer.Option(0.0, "--weight-decay", help="AdamW weight decay of projection + LoRA."),
    ema_decay: _Optional[float] = typer.Option(
        None,
        "--ema-decay",
        help="Keep an exponential moving average of the trained weights (this decay per step, e.g. 0.999) and save it "
        "as the run's weights; default: the last step's weights.",
    ),
    limit: _Optional[int] = typer.Option(None, help="Use only the first N training records."),
    max_private_tokens: _Optional[int] = typer.Option(
        None, help="Client truncation of private text in encoder tokens (default: the init run's)."
    ),
    summary_slots: _Optional[int] = typer.Option(
        None,
        "--summary-slots",
        help="Server-side summary vectors before the slots: unit-normalised means of the payload's slots in N groups "
        "(default: the init run's, 0 = PPFT's layout).",
    ),
    summary_only: _Optional[bool] = typer.Option(
        None,
        "--summary-only/--no-summary-only",
        help="Server side, beyond the paper, with --summary-slots: lay out the summary vectors in place of the slots "
        "(default: the init run's; off as PPFT).",
    ),
    count_vectors: _Optional[int] = typer.Option(
        None,
        "--count-vectors",
        help="Server side, beyond the paper: a learned vector per slot count 1..N before a row's slots (default: the "
        "init run's, 0 = PPFT's layout).",
    ),
    count_dropout: _Optional[float] = typer.Option(
        None,
        "--count-dropout",
        help="With --count-vectors: the training-only probability that a row's count vector is zeroed (default: the "
        "init run's, 0).",
    ),
    answer_head: bool = typer.Option(
        False,
        "--answer-head",
        help="Server side, beyond the paper: first train an answer head on fresh payloads of the training rows "
        "(classes: the distinct training targets by normalised text) and put its answer vector before a row's "
        "slots.",
    ),
    answer_head_epochs: int = typer.Option(
        100, "--answer-head-epochs", help="With --answer-head: passes over the training rows, fresh noise each."
    ),
    answer_head_standardize: bool = typer.Option(
        False,
        "--answer-head-standardize",
        help="With --answer-head: standardise the mean slot before the head's MLP (recommended at low eps; off: the "
        "head of the runs before 2026-11-25).",
    ),
    answer_head_hidden: int = typer.Option(
        256, "--answer-head-hidden", help="With --answer-head: width of the head's 2-layer MLP; 0: a linear head."
    ),
    answer_head_options: bool = typer.Option(
        False,
        "--answer-head-options",
        help="With --answer-head: on rows whose public text has an options block, weigh the class vectors over the "
        "classes it names only.",
    ),
    fixed_slots: _Optional[bool] = typer.Option(
        None,
        "--fixed-slots/--no-fixed-slots",
        help="The client pads every payload to ceil(max_private_tokens / k) slots, hiding the prompt's length "
        "(default: the init run's; off as PPFT).",
    ),
    center_mu: _Optional[float] = typer.Option(
        None,
        "--center-mu",
        help="Client side, beyond the paper: centre every unit slot on the training prompts' mean slot, estimated once "
        "with mu-GDP Gaussian noise at this mu, before the noise (default: the init run's centre, none as PPFT).",
    ),
    subspace_epochs: _Optional[int] = typer.Option(
        None,
        "--subspace-epochs",
        help="Client side, beyond the paper, with --center-mu: also project every centred slot onto the span of the "
        "training targets' mean payload slots, fitted by the server from this many passes of fresh payloads, "
        "and renormalise it before the noise (default: none).",
    ),
    repeat_mean: _Optional[bool] = typer.Option(
        None,
        "--repeat-mean/--no-repeat-mean",
        help="Client side, beyond the paper: send each prompt's unit mean slot (after centring / the subspace) in "
        "place of every one of its slots, before the noise (default: the init run's; off as PPFT).",
    ),
    slot_insert: _Optional[float] = typer.Option(
        None,
        "--slot-insert",
        help="Server side, training only, beyond the paper: add 0..ceil(f n) random unit slots at random positions to "
        "each training row of n slots (blurs the slot count; answers are never augmented).",
    ),
    slot_drop: _Optional[float] = typer.Option(
        None,
        "--slot-drop",
        help="Server side, training only, beyond the paper: drop each slot of a training row with this probability (at "
        "least one kept), before --slot-insert.",
    ),
    slot_augment_epochs: _Optional[int] = typer.Option(
        None, "--slot-augment-epochs", help="With --slot-insert / --slot-drop: augment only the first N epochs."
    ),
    prompt_variants: _Optional[float] = typer.Option(
        None,
        "--prompt-variants",
        help="Client side, training only, beyond the paper: per example and epoch, send a fresh rewrite of the "
        "training prompt with this probability (list items reordered and/or left out; Pri-DDX).",
    ),
    prompt_variant_drop: float = typer.Option(
        0.0,
        "--prompt-variant-drop",
        help="With --prompt-variants: leave out each list item of a rewrite with this probability (one per list kept).",
    ),
    prompt_variant_shuffle: bool = typer.Option(
        True,
        "--prompt-variant-shuffle/--no-prompt-variant-shuffle",
        help="With --prompt-variants: reorder the items of each list.",
    ),
    prompt_variant_rephrase: _Optional[float] = typer.Option(
        None,
        "--prompt-variant-rephrase",
        help="With --prompt-variants: say a rewrite in another sentence frame with this probability (a clinical note, "
        "a first-person account, the history left out; the prompt's own items only).",
    ),
    validation: _Optional[float] = typer.Option(
        None,
        "--validation",
        help="Model selection: hold back this share of the training rows' private-text groups and train on the rest; "
        "with --eval, score that validation part instead of the held-out one.",
    ),
    seed: int = typer.Option(0, help="Seed (dropout, data order, noise: experiments only)."),
    save_every: int = typer.Option(200, help="Checkpoint every N steps."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Continue from the newest checkpoint in --out."),
    evaluate: bool = typer.Option(
        False,
        "--eval/--no-eval",
        help="Afterwards, measure held-out accuracy at the training epsilon (writes eval.json).",
    ),
    cpu: bool = typer.Option(False, "--cpu", help="Force the CPU."),
) -> None:
    """Stage 2: text-free domain adaptation; the server part trains on privatized payloads only."""
    _require_run(init, "--from")
    from textfree.ppft.train_config import Stage2Config

    eps = None if no_noise else epsilon
    with spinner("loading ..."):  # torch and transformers: seconds
        # the config first, checked before torch: a bad setting is reported at once
        cfg = _ppft_run(
            Stage2Config,
            out=str(out),
            init=str(init),
            dataset=dataset,
            epsilon=eps,
            k=k,
            mechanism=mechanism,
            noise_match=noise_match,
            tasks=list(task or ("mcqa", "open")),
            blind=blind,
            epochs=epochs,
            max_steps=max_steps,
            batch_size=batch_size,
            lr=lr,
            weight_decay=weight_decay,
            ema_decay=ema_decay,
            limit=limit,
            max_private_tokens=max_private_tokens,
            summary_slots=summary_slots,
            summary_only=summary_only,
            count_vectors=count_vectors,
            count_dropout=count_dropout,
            answer_head=answer_head,
            answer_head_epochs=answer_head_epochs,
            answer_head_standardize=answer_head_standardize,
            answer_head_hidden=answer_head_hidden,
            answer_head_options=answer_head_options,
            fixed_slots=fixed_slots,
            center_mu=center_mu,
            subspace_epochs=subspace_epochs,
            repeat_mean=repeat_mean,
            slot_insert=slot_insert,
            slot_drop=slot_drop,
            slot_augment_epochs=slot_augment_epochs,
            prompt_variants=prompt_variants,
            prompt_variant_drop=prompt_variant_drop,
            prompt_variant_shuffle=prompt_variant_shuffle,
            prompt_variant_rephrase=prompt_variant_rephrase,
            validation=validation,
            seed=seed,
            save_every=save_every,
            resume=resume,
            cpu=cpu,
        )
        _ppft_setup()
        from textfree.ppft.train import train_stage2
    with spinner(
        f"loading {init} and the training data ...",
        between="preparing the next part (or saving the model) ...",
    ):
        summary = _ppft_run(train_stage2, cfg)
    if is_main_process():  # under accelerate launch, once
        typer.echo(f"stage 2 done: {_stage_line(summary)}; model in {out}")
    if evaluate:
        t = "blind_mcqa" if blind else "mcqa"
        result = _ppft_evaluate(
            out, dataset, eps, None, None, seed, 32, out / "eval.json", task=t, validation=validation
        )
        typer.echo(f"{result['part']} {t} accuracy {result['accuracy']:.4f} (n={result['n']}, epsilon={eps})")


def _prompt_file(path: _Path) -> list:
    """The records of a ``--prompts`` file (Pri-* layout, JSON Lines); one error line naming the flag if unreadable."""
    from textfree.data import load_privacyrestore

    if not path.is_file():
        _ppft_fail(f"--prompts: no such file {path}")
    return _ppft_run(load_privacyrestore, path)


def _ppft_evaluate(
    model: _Path,
    dataset: str,
    epsilon,
    k,
    limit,
    seed,
    max_new_tokens,
    out_file,
    *,
    task="mcqa",
    validation=None,
    prompts: _Optional[_Path] = None,
):
    """Score ``model`` on the held-out part, with ``validation`` > 0 on the validation part carved at that share, or
    on the records of the file ``prompts`` (the dataset's split still gives the label set and the majority class)."""
    if limit is not None and limit < 1:
        _ppft_fail(f"--limit must be >= 1, got {limit}")
    with err.status(f"loading the PPFT run {model} and {dataset} ..."):
        from textfree.atomic import write_json
        from textfree.data import ppft_split
        from textfree.ppft.evaluate import evaluate_qa, majority_baseline, task_labels
        from textfree.ppft.model import TextFreeLM

        lm = _ppft_run(TextFreeLM.load, model)
        split = _ppft_run(ppft_split, dataset, validation=validation or 0.0)
    part = "validation" if validation else "heldout"
    records = _prompt_file(prompts) if prompts is not None else split[part]
    records = records[:limit] if limit else records
    labels = task_labels(split["train"], split["validation"], split["heldout"], records)
    result = _ppft_run(
        evaluate_qa,
        lm,
        records,
        task=task,
        epsilon=epsilon,
        k=k,
        labels=labels,
        seed=seed,
        max_new_tokens=max_new_tokens,
        progress=True,
    )
    result["majority_baseline"] = majority_baseline(split["train"], records)
    result["dataset"], result["model"] = dataset, str(model)
    result["part"] = str(prompts) if prompts is not None else "held-out" if part == "heldout" else part
    if out_file is not None:
        write_json(out_file, result)
    return result


@app.command("evaluate")
def evaluate_cmd(
    model: _Path = typer.Option(..., "--model", help="A PPFT run directory."),
    dataset: str = typer.Option("pri-ddx", help="pri-ddx or pri-slja: scored on its ppft_split held-out part."),
    epsilon: float = typer.Option(75.0, "--epsilon", "-e", help="Client noise epsilon at test time."),
    no_noise: bool = typer.Option(False, "--no-noise", help="Clean payloads (NOT private)."),
    k: _Optional[int] = typer.Option(None, "--k", help="Pooling k (default: the model's)."),
    limit: _Optional[int] = typer.Option(None, help="Only the first N held-out records."),
    seed: int = typer.Option(0, help="Noise seed (experiments only)."),
    max_new_tokens: int = typer.Option(32, help="Generation length."),
    task: str = typer.Option(
        "mcqa",
        "--task",
        help="mcqa (4 options), open (no options), blind_mcqa or blind_open (no private prefix); mcqa_rank / "
        "blind_mcqa_rank: the 4-option prompts answered by ranking the options by likelihood; open_rank / "
        "blind_open_rank: the open prompts answered by ranking every label of the task; length_mcqa / "
        "length_open: random slots at the payload's count; open_head / mcqa_head: the open / 4-option payloads "
        "answered by the model's answer head alone (mcqa_head: the option it ranks highest).",
    ),
    out: _Optional[_Path] = typer.Option(
        None, "--out", help="Write the result (with every prediction) to this JSON file."
    ),
    prompts: _Optional[_Path] = typer.Option(
        None,
        "--prompts",
        help="Score these Pri-* layout JSON Lines records instead of the held-out part (e.g. the hand-written "
        "prompts of tests/fixtures/ppft/handwritten_ddx.jsonl); --dataset still gives the label set.",
    ),
) -> None:
    """Held-out accuracy: the client privatizes each prompt, the server answers from the payload."""
    _require_run(model, "--model")
    _ppft_setup(verbose=False)
    r = _ppft_evaluate(
        model, dataset, None if no_noise else epsilon, k, limit, seed, max_new_tokens, out, task=task, prompts=prompts
    )
    typer.echo(
        f"{dataset} {r['part']} {task} n={r['n']} epsilon={r['epsilon']} k={r['k']}: accuracy {r['accuracy']:.4f} "
        f"(exclusive {r['accuracy_exclusive']:.4f}; without answer leak {r['accuracy_no_leak']:.4f}, "
        f"n={r['n_no_leak']}); "
        f"majority baseline {r['majority_baseline']:.4f}"
    )


@app.command("ask")
def ask_cmd(
    prompt: str = typer.Argument(..., help="The PRIVATE prompt text: privatized locally, never sent."),
    model: _Path = typer.Option(..., "--model", help="A PPFT run directory (its encoder/ is the client)."),
    public: _Optional[str] = typer.Option(None, "--public", help="Public text sent in clear (e.g. the options block)."),
    epsilon: _Optional[float] = typer.Option(
        None, "--epsilon", "-e", help="Noise epsilon (default: the model's training epsilon)."
    ),
    no_noise: bool = typer.Option(False, "--no-noise", help="Clean payload (NOT private)."),
    k: _Optional[int] = typer.Option(None, "--k", help="Pooling k (default: the model's)."),
    seed: _Optional[int] = typer.Option(None, help="Experiments only: reproducible noise (NOT private)."),
    max_new_tokens: int = typer.Option(32, help="Generation length."),
) -> None:
    """The client privatizes PROMPT locally; the server part answers from the payload (+ --public)."""
    _require_run(model, "--model")
    if not prompt.strip():
        _ppft_fail("the prompt is empty")
    with err.status(f"loading the PPFT run {model} ..."):
        _ppft_setup(verbose=False)
        from textfree.ppft.model import TextFreeLM

        lm = _ppft_run(TextFreeLM.load, model)
    eps = None if no_noise else (epsilon if epsilon is not None else lm.config.epsilon)
    if eps is None and not no_noise:
        _ppft_fail(
            "this model was trained without noise: give --epsilon, or --no-noise for a clean (non-private) payload"
        )
    privatizer = _ppft_run(lm.privatizer, eps, k=k)  # a bad --epsilon or --k: one error line
    with err.status("privatizing the prompt here, answering from the payload ..."):
        payload = _ppft_run(privatizer.privatize, [prompt], seed=seed, public=None if public is None else [public])
        del prompt  # from here on only the payload exists, as on the server
        answer = _ppft_run(lm.server.answer, payload, max_new_tokens=max_new_tokens)[0]
    worst = payload.worst_case_loss()
    typer.echo(answer)
    typer.echo(
        f"privacy: {payload.lengths[0]} slot(s), epsilon {eps} per unit distance; worst-case loss for this prompt "
        f"{worst.epsilon:g} (metric)",
        err=True,
    )


@app.command("train")
def pipeline_cmd(
    out: _Path = typer.Option(
        _Path("runs/pipeline"),
        "--out",
        help="Root directory: decoder/, stage1/, stage2/, eval.json, pipeline.json (rerunning resumes and reuses "
        "finished steps).",
    ),
    dataset: str = typer.Option(
        "pri-ddx", help="Pri-* dataset of stage 2 and the evaluation (pri-ddx, pri-slja or a directory)."
    ),
    epsilon: float = typer.Option(
        28.0,
        "--epsilon",
        "-e",
        help="Client noise epsilon of stage 2 and the evaluation (28: width-matched to the paper's 75).",
    ),
    k: int = typer.Option(4, "--k", help="Pooling k."),
    encoder: str = typer.Option("default", help="Client encoder: 'default' (all-MiniLM-L6-v2) or an HF name/path."),
    preset: str = typer.Option("small", help="Decoder pretraining preset: tiny (smoke test), small, gpu."),
    pretrain_steps: _Optional[int] = typer.Option(None, help="Override the preset's pretraining steps."),
    pretrain_texts: _Optional[_Path] = typer.Option(
        None, help="Pretrain the decoder on this .txt/.jsonl/.json file instead of the shared-data corpus."
    ),
    stage1_max_steps: _Optional[int] = typer.Option(250, help="Stage-1 optimizer steps."),
    stage1_limit_per_source: _Optional[int] = typer.Option(1000, help="Stage 1: records per general source."),
    stage2_epochs: int = typer.Option(12, help="Stage-2 epochs (fresh noise each)."),
    stage2_max_steps: _Optional[int] = typer.Option(None, help="Stop stage 2 after this many steps."),
    stage2_limit: _Optional[int] = typer.Option(None, help="Stage 2 on the first N training records only."),
    task: _Optional[_List[str]] = typer.Option(
        None, "--task", help="Evaluation task, repeatable (default: mcqa and open)."
    ),
    eval_limit: _Optional[int] = typer.Option(None, help="Evaluate on the first N held-out records."),
    seed: int = typer.Option(0, help="Training seed; the evaluation noise seed is 0 (experiments only)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bars."),
) -> None:
    """Train PPFT end to end (the default pipeline): pretrain the decoder, stage 1, stage 2, evaluate; each step
    timed."""
    from textfree.ppft.pipeline import PipelineConfig, run_pipeline  # light: each step imports torch as it runs

    with spinner("loading ..."):  # torch and transformers: seconds
        # the config first, checked before torch: a bad setting is reported at once
        cfg = _ppft_run(
            PipelineConfig,
            out=str(out),
            dataset=dataset,
            epsilon=epsilon,
            k=k,
            encoder=encoder,
            preset=preset,
            pretrain_steps=pretrain_steps,
            pretrain_texts=str(pretrain_texts) if pretrain_texts else None,
            stage1_max_steps=stage1_max_steps,
            stage1_limit_per_source=stage1_limit_per_source,
            stage2_epochs=stage2_epochs,
            stage2_max_steps=stage2_max_steps,
            stage2_limit=stage2_limit,
            eval_tasks=list(task or ("mcqa", "open")),
            eval_limit=eval_limit,
            seed=seed,
            progress=progress,
        )
        _ppft_setup()
    with spinner("preparing the first step ...", between="preparing the next step ...", enabled=progress):
        result = _ppft_run(run_pipeline, cfg)
    for name, step in result["steps"].items():
        typer.echo(
            f"{name:9s} {step['wall_s']:8.1f} s{'  (reused: time recorded when it ran)' if step['reused'] else ''}  "
            f"{step['dir']}"
        )
    total = result["total_wall_s"]
    typer.echo(
        f"total     {total:8.1f} s ({total / 60:.1f} min{'' if result['measured_in_one_go'] else '; steps reused'})"
    )
    accuracy = ", ".join(f"{t} {a:.4f}" for t, a in result["accuracy"].items())
    typer.echo(f"held-out {dataset} (n={result['n_heldout']}, epsilon {epsilon:g}, k {k}): {accuracy}")


deprecated_alias(app, "pipeline", "train", pipeline_cmd, prefix="textfree ppft")


@app.command("report")
def report_cmd(
    results: _List[_Path] = typer.Argument(
        ..., help="Result JSON files of the ppft_* cells, or directories holding them (e.g. results/ppft)."
    ),
    out: _Path = typer.Option(
        _Path("docs/results/ppft.md"), "--out", help="The Markdown report to write (figures go to <out stem>/)."
    ),
) -> None:
    """Write PPFT's result tables (docs/results/ppft.md) and figures from result files; nothing is recomputed."""
    from textfree.ppft.report import write_report
    from textfree.results.report_command import run_report_command

    typer.echo(f"wrote {run_report_command(results, out, write_report, _ppft_fail)}")


@app.command("width-match")
def width_match_cmd(
    epsilon: float = typer.Option(75.0, "--epsilon", help="The reference eps (the paper's: 75)."),
    from_dim: int = typer.Option(1024, "--from-dim", help="The reference encoder width (ModernBERT-large: 1024)."),
    to_dim: int = typer.Option(384, "--to-dim", help="Our encoder width (all-MiniLM-L6-v2: 384)."),
    samples: int = typer.Option(50_000, "--samples", help="Exact draws of the privacy loss per row."),
    seed: int = typer.Option(0, "--seed", help="Seed of the measurement (no user data is noised here)."),
) -> None:
    """Which eps at our width matches the reference: by noise norm or by the slot's privacy loss (Gaussian DP mu)."""
    if samples < 1 or seed < 0:  # before the imports (torch): reported at once
        _ppft_fail(f"--samples must be >= 1 and --seed >= 0, got {samples} and {seed}")
    with err.status(f"drawing {samples} exact privacy losses per row ..."):
        from textfree.mechanisms.gdp import width_match_rows
        from textfree.rng import seeded_generator

        rows = _ppft_run(
            width_match_rows, epsilon, from_dim, to_dim, samples=samples, generator=seeded_generator(seed, warn=False)
        )
    typer.echo(
        "L2-Laplace on unit slots; loss between two antipodal slots (distance 2), "
        f"{samples} exact draws per row, seed {seed}."
    )
    typer.echo(
        "| setting | d | eps | noise norm d/eps | pure bound 2 eps | mu = 2 eps / sqrt(d) | best-test error Phi(-mu/2) "
        "| measured | mean loss mu^2/2 | measured |"
    )
    typer.echo("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        typer.echo(
            f"| {r['setting']} | {r['dim']} | {r['epsilon']:.2f} | {r['noise_norm']:.2f} | {r['pure_bound']:.1f} | "
            f"{r['mu']:.3f} | "
            f"{r['error_limit']:.4f} | {r['error_measured']:.4f} | {r['mean_loss_limit']:.2f} | "
            f"{r['mean_loss_measured']:.2f} |"
        )


# =====================================================================================================================
# Local decoder pretraining (textfree.lm.local)
# =====================================================================================================================
_LM_SAMPLE_PROMPTS = ("The patient", "Question: What is 2+2?\nAnswer:", "The court")


def _read_texts(path: _Path) -> _List[str]:
    """The documents of --texts (.json/.jsonl: their 'text' items; otherwise one per non-blank line); a file that is
    missing, not a file, unreadable or malformed is one error line naming it."""
    from textfree.lm.local.corpus import load_text_file

    if not path.is_file():
        _ppft_fail(f"--texts {str(path)!r} is not a file ({'a directory' if path.is_dir() else 'no such file'})")
    try:
        if path.suffix in (".json", ".jsonl"):
            return load_text_file(path)
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except UnicodeDecodeError as exc:
        _ppft_fail(f"--texts {str(path)!r} is not UTF-8 text (byte {exc.start})")
    except (OSError, ValueError) as exc:
        _ppft_fail(f"cannot read --texts {str(path)!r}: {exc}")


@app.command("pretrain-decoder")
def pretrain_decoder_cmd(
    preset: _Optional[str] = typer.Option(
        None, "--preset", help="tiny (tests, seconds), small (default; ~12 min on 2 CPU cores) or gpu."
    ),
    out: _Optional[_Path] = typer.Option(
        None, "--out", help="Output directory (default runs/decoder); rerunning with the same one resumes."
    ),
    config: _Optional[_Path] = typer.Option(
        None,
        "--config",
        help="YAML/JSON file of DecoderPretrainConfig fields (e.g. examples/cells/ppft_pretrain_small.yaml); flags "
        "override it.",
    ),
    minutes: _Optional[float] = typer.Option(
        None, "--minutes", help="Wall-clock budget; without --max-steps the step count is set from the measured speed."
    ),
    max_steps: _Optional[int] = typer.Option(
        None, "--max-steps", help="Optimizer steps (the cosine schedule spans them)."
    ),
    seed: _Optional[int] = typer.Option(None, "--seed", help="Seed of every random choice (default 0)."),
    threads: _Optional[int] = typer.Option(
        None, "--threads", help="torch CPU threads; use 1 when other jobs share a 2-core machine."
    ),
    data_dir: _Optional[_Path] = typer.Option(
        None, "--data-dir", help="Shared data directory (default: $TEXTFREE_DATA or ../shared/data)."
    ),
    extra_text: _Optional[_List[_Path]] = typer.Option(
        None,
        "--extra-text",
        help="Add in-domain PUBLIC text (.txt/.jsonl/.json), repeatable; evaluation data is refused.",
    ),
    texts: _Optional[_Path] = typer.Option(
        None,
        "--texts",
        help="Train on this file's documents only (.txt: one per line; .jsonl/.json: 'text'), not the shared corpus.",
    ),
    samples: bool = typer.Option(
        True, "--samples/--no-samples", help="Print greedy continuations of a few prompts at the end."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Pretrain the small local Llama decoder (byte-level BPE + LlamaForCausalLM) on the general-domain corpus."""
    from textfree.lm.local.config import DecoderPretrainConfig  # no torch: a bad setting is reported at once

    overrides = {
        "output_dir": None if out is None else str(out),
        "minutes": minutes,
        "max_steps": max_steps,
        "seed": seed,
        "num_threads": threads,
        "data_dir": None if data_dir is None else str(data_dir),
        "extra_text_files": [str(p) for p in extra_text] if extra_text else None,
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if minutes is not None and max_steps is None:
        overrides["max_steps"] = None  # time-budget mode: steps from the measured speed
    if config is not None:
        cfg = _ppft_run(DecoderPretrainConfig.from_file, config, preset=preset, **overrides)
    else:
        cfg = _ppft_run(DecoderPretrainConfig.from_preset, preset or "small", **overrides)
    documents = None if texts is None else _read_texts(texts)
    with spinner("loading ..."):  # torch and transformers: seconds
        _ppft_setup()
        from textfree.lm.local import pretrain_decoder

    with spinner("reading the corpus, training the tokenizer ...", between="saving the decoder ...", enabled=progress):
        result = _ppft_run(pretrain_decoder, cfg, texts=documents, progress=progress)
    from accelerate import PartialState

    if not PartialState().is_main_process:  # under accelerate launch / torchrun: one summary
        return
    import json as _json

    metrics = _json.loads((result / "metrics.json").read_text())
    typer.echo(
        f"decoder: {metrics['parameters']:,} parameters, {metrics['steps']} steps, {metrics['tokens_seen']:,} tokens "
        f"({metrics['epochs']:.2f} epochs) at {metrics['tokens_per_s']:.0f} tokens/s; train loss "
        f"{metrics['train_loss']:.3f}, "
        f"held-out loss {metrics['heldout_loss']:.3f} (ppl {metrics['heldout_ppl']:.1f}, from "
        f"{metrics['initial_heldout_loss']:.3f}); "
        f"saved in {result}"
    )
    if samples:
        with spinner("writing sample continuations ...", enabled=progress):
            from textfree.lm.generate import generate_text
            from textfree.lm.loading import load_decoder

            model, tok = load_decoder(result)
            texts = generate_text(model, tok, _LM_SAMPLE_PROMPTS, max_new_tokens=30)
        for prompt, text in zip(_LM_SAMPLE_PROMPTS, texts):
            typer.echo(f"  {prompt!r} -> {text!r}")


verbs_first(app, ("train", "evaluate", "report", "pretrain-decoder", "train-stage1", "train-stage2", "ask"))
