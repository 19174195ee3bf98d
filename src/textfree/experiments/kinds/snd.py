"""Cell kind ``snd_downstream``: Split-N-Denoise's utility per privacy level eta (Mai et al. 2023, Tables 1-3, 5, 11;
A.4, A.10, A.12), for SnD, its baselines and its ablations (:mod:`textfree.snd.evaluate`).

For one grid point and seed: embed the task's training and test examples through ``params.pipeline`` at
``params.eta`` (noise from a generator seeded with the seed; pairs: each sentence embedded, the two concatenated),
train the two-layer probe on the training embeddings (early stopping on a slice of the training split only) and test
it on the test embeddings, both noisy (A.4). The examples are the same for every point and seed (drawn once with
``params.data_seed``), so points differ by their settings and the noise, not by the data.

The cell names no ``dataset``, ``texts`` or ``mechanism``: the task is ``params.task`` (GLUE, read from
``$TEXTFREE_DATA/glue``; splits in :data:`textfree.snd.evaluate.TASK_SPLITS`) and the noise is SnD's own, L2-Laplace
at ``eta`` clipped to the table's largest row norm C. ``encoder`` is both the client's table and the server's model.
Runs on the CPU.

Metrics:

* ``acc``, ``auc``: the probe's accuracy and ROC AUC on the test split.
* ``mse``, ``cos``: MSE and cosine of each test sentence's embedding to its clean one, mean over the test sentences
  (A.10; a pair contributes both sentences).
* ``noise_to_signal``: ``E||z|| / mean ||x||`` = ``(d / eta) / mean ||x||`` over the real tokens of the evaluated
  sentences (0 for ``clean``); also logged for every eta. ``effective_noise_to_signal``: mean ||x~ - x|| / mean ||x||
  of the noise actually added (after clipping, where the pipeline clips).
* ``mi_kl``: SnD's Kozachenko-Leonenko estimate of I(X; X + Z) (A.6 eq. 22,
  :func:`~textfree.metrics.privacy.kl_mutual_information`, k = 1) on ``params.mi_samples`` token embeddings of the
  test sentences and fresh unclipped noise (clipping cannot raise it); NaN for ``clean``. In d = 384 with a few
  thousand samples it is a rough estimate: compare it only between points of equal N and d.
* ``n_train``, ``n_test``: examples used; ``seconds``: wall time of the point.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import torch

from ...results.cell import CellError
from ...rng import seeded_generator
from ..registry import RunContext, register_cell_kind

__all__ = ["snd_downstream", "SND_METRICS", "SND_PARAMS"]

SND_METRICS = (
    "acc",
    "auc",
    "mse",
    "cos",
    "noise_to_signal",
    "effective_noise_to_signal",
    "mi_kl",
    "n_train",
    "n_test",
    "seconds",
)

SND_PARAMS = {
    "task": "GLUE task: cola, sst2, mrpc, rte or qqp (required)",
    "pipeline": "clean, tokembpriv, snd, text2text, pct2t, server_denoiser, no_clip, snd_no_noise or snd_no_tokens "
    "(required)",
    "eta": "privacy level eta > 0 (required except for clean; usually a grid: params.eta: [50, 100, 500])",
    "denoiser": "path of a denoiser run (directory with denoiser.safetensors) for a denoising pipeline, else absent",
    "denoiser_sha256": "the denoiser file's expected sha256 (optional)",
    "train_limit": "training examples used (integer >= 2 or null for all; default 2000)",
    "test_limit": "test examples used (integer >= 2 or null for all; default 1000)",
    "batch_size": "sentences per server batch (default 64)",
    "max_tokens": "tokens per sentence, special tokens included (default 128)",
    "data_seed": "seed of the training / test subsample, the same for every point and seed (default 0)",
    "mi_samples": "token embeddings for mi_kl (integer >= 10; default 2000)",
    "probe_epochs": "the probe's largest number of epochs (default 30)",
}

_DEFAULTS = {
    "train_limit": 2000,
    "test_limit": 1000,
    "batch_size": 64,
    "max_tokens": 128,
    "data_seed": 0,
    "mi_samples": 2000,
    "probe_epochs": 30,
}


def _is_int(value: Any, low: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= low


def _check_params(params: dict) -> tuple[str, str] | None:
    """(parameter, problem) for the first invalid parameter of one point, or None."""
    from ...snd.evaluate import DENOISING_PIPELINES, PIPELINES, TASKS

    task, pipeline = params.get("task"), params.get("pipeline")
    if task not in TASKS:
        return "task", f"task must be one of {list(TASKS)}, got {task!r}"
    if pipeline not in PIPELINES:
        return "pipeline", f"pipeline must be one of {list(PIPELINES)}, got {pipeline!r}"
    eta = params.get("eta")
    if pipeline != "clean" or eta is not None:
        ok = not isinstance(eta, bool) and isinstance(eta, (int, float)) and math.isfinite(eta) and eta > 0
        if not ok:
            return "eta", f"eta must be a finite number > 0 for pipeline {pipeline!r}, got {eta!r}"
    denoiser = params.get("denoiser")
    if pipeline in DENOISING_PIPELINES:
        if not isinstance(denoiser, str) or not denoiser.strip():
            return "denoiser", f"pipeline {pipeline!r} needs `denoiser`: the path of a denoiser run, got {denoiser!r}"
    elif denoiser is not None or params.get("denoiser_sha256") is not None:
        return "denoiser", f"pipeline {pipeline!r} runs no denoiser; remove `denoiser` (and `denoiser_sha256`)"
    sha = params.get("denoiser_sha256")
    if sha is not None and (not isinstance(sha, str) or len(sha) != 64):
        return "denoiser_sha256", f"denoiser_sha256 must be 64 hex digits or null, got {sha!r}"
    for name, low in (("train_limit", 2), ("test_limit", 2)):
        value = params.get(name, _DEFAULTS[name])
        if value is not None and not _is_int(value, low):
            return name, f"{name} must be an integer >= {low} or null, got {value!r}"
    for name, low in (("batch_size", 1), ("max_tokens", 2), ("data_seed", 0), ("mi_samples", 10), ("probe_epochs", 1)):
        value = params.get(name, _DEFAULTS[name])
        if not _is_int(value, low):
            return name, f"{name} must be an integer >= {low}, got {value!r}"
    return None


def validate_own_inputs(
    cell: Any, points: list[dict], *, why: str, limit_hint: str, check: Callable[[dict], tuple[str, str] | None]
) -> None:
    """The SnD kinds' cell checks: no `dataset`/`texts`/`mechanism` (``why``: what the kind reads instead), no
    `limit` (``limit_hint``), and every grid point's params through ``check`` (a CellError naming the field)."""
    for name in ("dataset", "texts", "mechanism"):
        if getattr(cell, name) is not None:
            raise CellError(f"the {cell.kind} kind {why}; remove `{name}`", field=name)
    if cell.limit is not None:
        raise CellError(f"use {limit_hint} instead of `limit`", field="limit")
    for point in points:
        problem = check(cell.resolve(point).params)
        if problem:
            name, message = problem
            raise CellError(message, field=f"grid.params.{name}" if f"params.{name}" in point else f"params.{name}")


def _validate(cell: Any, points: list[dict]) -> None:
    validate_own_inputs(
        cell,
        points,
        why="reads its task from params.task and draws SnD's own noise at params.eta",
        limit_hint="params.train_limit and params.test_limit",
        check=_check_params,
    )


def _param(params: dict, name: str) -> Any:
    return params.get(name, _DEFAULTS.get(name))


def _models(cell: Any, context: RunContext) -> tuple[Any, torch.nn.Module]:
    """The client's embedding table and the server's model, both of ``cell.encoder``, loaded once per run."""

    def load():
        from ...encoders import EmbeddingTableEncoder
        from ...encoders.loading import load_hf_encoder

        name = None if cell.encoder == "default" else cell.encoder
        table = EmbeddingTableEncoder.from_pretrained(name)
        _, model, _, _ = load_hf_encoder(name)
        return table, model.eval()

    return context.cached("snd_models", load)


def _pct2t(cell: Any, context: RunContext) -> Any:
    """RAPT's PCT2T (default categories, TextBlob tagger) over the word table of ``cell.encoder``, built once."""

    def build():
        from ...substitution.cli_support import build_t2t

        return build_t2t(table=cell.encoder, eta=1.0, pos="default")

    return context.cached("snd_pct2t", build)


def _denoiser(params: dict, context: RunContext) -> Any:
    from ...snd.denoiser import Denoiser

    path, sha = params.get("denoiser"), params.get("denoiser_sha256")
    if path is None:
        return None
    denoiser = context.cached(("snd_denoiser", path, sha), lambda: Denoiser.from_pretrained(path, expected_sha256=sha))
    context.record("denoiser_sha256", denoiser.sha256)
    return denoiser


@register_cell_kind(
    "snd_downstream",
    metrics=SND_METRICS,
    params=SND_PARAMS,
    validate=_validate,
    help="SnD downstream utility (probe ACC/AUC), similarity to clean, noise-to-signal and KL MI per eta.",
    takes_attack=False,
)
def snd_downstream(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    """Probe accuracy/AUC, similarity to clean, noise-to-signal and KL mutual information for one point and seed."""
    from ...metrics.privacy import kl_mutual_information
    from ...snd import evaluate as ev
    from ...snd.noise import privatize_tokens

    started = time.perf_counter()
    params = cell.resolve(point).params
    problem = _check_params(params)
    if problem:
        raise ValueError(f"params.{problem[0]}: {problem[1]}")
    task, pipeline = params["task"], params["pipeline"]
    eta = None if pipeline == "clean" else float(params["eta"])
    train_limit, test_limit = _param(params, "train_limit"), _param(params, "test_limit")
    data_seed, max_tokens = _param(params, "data_seed"), _param(params, "max_tokens")
    table_encoder, server = _models(cell, context)
    denoiser = _denoiser(params, context)
    data = context.cached(
        ("snd_task", task, train_limit, test_limit, data_seed),
        lambda: ev.load_task(task, train_limit=train_limit, test_limit=test_limit,
                             generator=seeded_generator(data_seed, warn=False)),
    )  # fmt: skip
    generator = seeded_generator(seed, warn=False)  # experiments only: the seed is recorded with the results
    common = dict(pipeline=pipeline, eta=eta, table_encoder=table_encoder, server_model=server, denoiser=denoiser,
                  generator=generator, batch_size=_param(params, "batch_size"), max_tokens=max_tokens)  # fmt: skip
    if pipeline == "pct2t":
        common["text_mechanism"] = _pct2t(cell, context)
    train_stats, test_stats = {}, {}
    train_x, _, _, _ = ev.embed_task_texts(data.train_texts, return_clean=False, stats=train_stats, **common)
    test_x, _, test_sent, test_clean = ev.embed_task_texts(data.test_texts, stats=test_stats, **common)
    probe = ev.train_probe(
        train_x,
        data.train_labels,
        generator=seeded_generator(seed, warn=False),
        config=ev.ProbeConfig(epochs=_param(params, "probe_epochs")),
    )
    scores = ev.evaluate_probe(probe, test_x, data.test_labels)
    sim = ev.similarity(test_sent, test_clean)

    n_tokens = train_stats["n_tokens"] + test_stats["n_tokens"]
    mean_norm = (train_stats["token_norm_sum"] + test_stats["token_norm_sum"]) / n_tokens
    d = table_encoder.dim
    nsr = ev.noise_to_signal(eta, d, mean_norm)
    effective = (train_stats["noise_norm_sum"] + test_stats["noise_norm_sum"]) / n_tokens / mean_norm
    if pipeline == "pct2t":  # word-level noise: no token noise reaches the server; log the words' replacement rate
        words = train_stats["words_privatized"] + test_stats["words_privatized"]
        replaced = train_stats["words_replaced"] + test_stats["words_replaced"]
        context.logger.info("snd_downstream %s pct2t eta=%s: %d of %d privatized words replaced (%.3f)",
                            task, eta, replaced, words, replaced / max(words, 1))  # fmt: skip
        effective = math.nan
    context.logger.info(
        "snd_downstream %s %s eta=%s: noise_to_signal E||z||/mean||x|| = %.4g (d=%d, mean||x||=%.4g), effective %.4g",
        task, pipeline, eta, nsr, d, mean_norm, effective,
    )  # fmt: skip
    mi = math.nan
    if eta is not None and pipeline != "pct2t":  # token-level MI; PCT2T's noise is on words
        tokens = context.cached(
            ("snd_mi_tokens", task, train_limit, test_limit, data_seed, max_tokens, _param(params, "mi_samples")),
            lambda: _token_sample(data, table_encoder, max_tokens, _param(params, "mi_samples"), data_seed),
        )
        x_tilde, z = privatize_tokens(
            tokens.unsqueeze(0), torch.ones(1, tokens.shape[0], dtype=torch.bool), eta,
            clip_norm=None, clip=False, generator=generator,
        )  # fmt: skip
        mi = kl_mutual_information(x_tilde[0].double().numpy(), z[0].double().numpy(), k=1)
    return {
        "acc": scores["acc"],
        "auc": scores["auc"],
        "mse": sim["mse"],
        "cos": sim["cos"],
        "noise_to_signal": nsr,
        "effective_noise_to_signal": effective,
        "mi_kl": mi,
        "n_train": float(len(data.train_texts)),
        "n_test": float(len(data.test_texts)),
        "seconds": time.perf_counter() - started,
    }


def _token_sample(data: Any, table_encoder: Any, max_tokens: int, n: int, seed: int) -> torch.Tensor:
    """Up to ``n`` token embeddings [n, d], drawn uniformly (``seed``) from the real tokens of the test sentences."""
    from ...snd.evaluate import tokenize

    sentences = [s for example in data.test_texts for s in example]
    ids = torch.tensor([i for seq in tokenize(table_encoder.tokenizer, sentences, max_tokens) for i in seq])
    pick = torch.randperm(ids.shape[0], generator=seeded_generator(seed, warn=False))[:n]
    return table_encoder.table.detach().float()[ids[pick]]
