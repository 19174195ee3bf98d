"""Cell kind ``snd_model_update``: SnD's denoiser after the server updated its encoder (Mai et al. 2023, §4.4.4,
Table 10 in A.8), as validation figures (:mod:`textfree.snd.update`).

For one grid point and seed: fine-tune the cell's ``encoder`` (the server's, before the update) for one epoch on
``params.base_samples`` SST-2 training sentences (0: no update), fine-tune the stale denoiser ``params.denoiser`` for
one epoch on ``params.denoiser_samples`` public texts for the updated encoder (0: the stale denoiser unchanged), and
measure on ``params.val_size`` held-out public texts of the denoiser's own corpus, at ``params.eta``, the MSE and
cosine of the denoised and of the undenoised ``e_n`` to the clean embedding of the UPDATED encoder. The seed orders
the SST-2 and the public texts, initialises the classification head and draws the noise (the same noise for every
(base, denoiser) pair of one seed: the figures are paired). The word-embedding table is frozen during the update by
default (``params.freeze_embeddings``), so the client's table stays valid; see :mod:`textfree.snd.update`.

Updated encoders and fine-tuned denoisers are written under ``params.out`` (``encoder-b{N}-s{seed}``,
``denoiser-b{N}-d{M}-s{seed}``) and reused by later points and runs with the same settings. The cell names no
``dataset``, ``texts``, ``mechanism`` or ``limit``.

Metrics: ``mse_denoised``, ``cos_denoised`` (SnD), ``mse_noisy``, ``cos_noisy`` (no denoiser: TokEmbPriv), ``seconds``
(wall time of the point, the updates it ran included; a point that reuses them counts only its figures).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from ..registry import RunContext, register_cell_kind
from .snd import validate_own_inputs

__all__ = ["snd_model_update", "UPDATE_METRICS", "UPDATE_PARAMS"]

UPDATE_METRICS = ("mse_denoised", "cos_denoised", "mse_noisy", "cos_noisy", "seconds")

UPDATE_PARAMS = {
    "denoiser": "path of the denoiser run trained for the cell's encoder (directory with denoiser.safetensors)",
    "base_samples": "SST-2 training sentences the encoder is fine-tuned on (integer >= 0; 0: no update; a grid)",
    "denoiser_samples": "public texts the stale denoiser is fine-tuned on (integer >= 0; 0: unchanged; a grid)",
    "eta": "privacy level eta > 0 (a grid)",
    "val_size": "held-out public texts the figures are measured on (integer >= 1; default 256)",
    "out": "directory of the updated encoders and fine-tuned denoisers (default runs/snd-update)",
    "encoder_lr": "peak learning rate of the encoder update (default 2e-5)",
    "encoder_batch_size": "sentences per step of the encoder update (default 32)",
    "freeze_embeddings": "keep the client's word-embedding table during the update (default true)",
    "denoiser_lr": "peak learning rate of the denoiser fine-tuning (default 1e-4)",
}

_DEFAULTS = {
    "val_size": 256,
    "out": "runs/snd-update",
    "encoder_lr": 2e-5,
    "encoder_batch_size": 32,
    "freeze_embeddings": True,
    "denoiser_lr": 1e-4,
}


def _is_int(value: Any, low: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= low


def _is_positive(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _param(params: dict, name: str) -> Any:
    return params.get(name, _DEFAULTS.get(name))


def _check_params(params: dict) -> tuple[str, str] | None:
    """(parameter, problem) for the first invalid parameter of one point, or None."""
    denoiser = params.get("denoiser")
    if not isinstance(denoiser, str) or not denoiser.strip():
        return "denoiser", f"denoiser must be the path of a denoiser run, got {denoiser!r}"
    for name in ("base_samples", "denoiser_samples"):
        if not _is_int(params.get(name), 0):
            return name, f"{name} must be an integer >= 0, got {params.get(name)!r}"
    if not _is_positive(params.get("eta")):
        return "eta", f"eta must be a finite number > 0, got {params.get('eta')!r}"
    for name, low in (("val_size", 1), ("encoder_batch_size", 1)):
        if not _is_int(_param(params, name), low):
            return name, f"{name} must be an integer >= {low}, got {_param(params, name)!r}"
    for name in ("encoder_lr", "denoiser_lr"):
        if not _is_positive(_param(params, name)):
            return name, f"{name} must be a finite number > 0, got {_param(params, name)!r}"
    if not isinstance(_param(params, "freeze_embeddings"), bool):
        return "freeze_embeddings", f"freeze_embeddings must be true or false, got {params['freeze_embeddings']!r}"
    out = _param(params, "out")
    if not isinstance(out, str) or not out.strip():
        return "out", f"out must be a directory path, got {out!r}"
    return None


def _validate(cell: Any, points: list[dict]) -> None:
    validate_own_inputs(
        cell,
        points,
        why="trains on SST-2 and public text and draws SnD's own noise at params.eta",
        limit_hint="params.val_size",
        check=_check_params,
    )


@register_cell_kind(
    "snd_model_update",
    metrics=UPDATE_METRICS,
    params=UPDATE_PARAMS,
    validate=_validate,
    help="SnD after a model update: the stale and the fine-tuned denoiser's MSE/cosine to the updated encoder.",
    takes_attack=False,
)
def snd_model_update(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    """The denoised and undenoised MSE / cosine to the updated encoder's clean embedding for one point and seed."""
    from ...snd import update as up

    started = time.perf_counter()
    params = cell.resolve(point).params
    problem = _check_params(params)
    if problem:
        raise ValueError(f"params.{problem[0]}: {problem[1]}")
    run, work = params["denoiser"], Path(_param(params, "out"))
    base, extra, eta = params["base_samples"], params["denoiser_samples"], float(params["eta"])
    val_size = _param(params, "val_size")
    texts = context.cached(("snd_update_public", run, val_size), lambda: up.public_split(run, val_size=val_size))
    pool, val = texts
    max_tokens = context.cached(("snd_update_max_tokens", run), lambda: _max_tokens(run))
    settings = {
        "lr": float(_param(params, "encoder_lr")),
        "batch_size": _param(params, "encoder_batch_size"),
        "freeze_embeddings": _param(params, "freeze_embeddings"),
    }
    updated = context.cached(
        ("snd_update_encoder", cell.encoder, base, seed, tuple(sorted(settings.items())), str(work)),
        lambda: up.update_encoder(cell.encoder, base, out=work / f"encoder-b{base}-s{seed}", seed=seed, **settings),
    )
    server = context.cached(("snd_update_server", updated["path"]), lambda: up.load_server(updated["path"], max_tokens))
    lr = float(_param(params, "denoiser_lr"))
    denoiser = context.cached(
        ("snd_update_denoiser", run, updated["path"], extra, seed, lr),
        lambda: up.finetune_denoiser(run, updated["path"], extra, out=work / f"denoiser-b{base}-d{extra}-s{seed}",
                                     seed=seed, pool=pool, val_texts=val, lr=lr)["model"].eval(),
    )  # fmt: skip
    if updated.get("encoder_sha256"):
        context.record("encoder_sha256", updated["encoder_sha256"])
    context.record("denoiser_sha256", denoiser.sha256)
    figures = up.update_figures(denoiser, server, val, [eta], noise_seed=seed)[f"{eta:g}"]
    return {k: figures[k] for k in UPDATE_METRICS[:4]} | {"seconds": time.perf_counter() - started}


def _max_tokens(run: str) -> int:
    from ...snd.denoiser import Denoiser
    from ...snd.update import base_run_settings

    limit = Denoiser.from_pretrained(run).config.max_tokens
    return min(limit, base_run_settings(run).get("max_tokens", limit))
