"""Training SnD's denoiser on public text (Mai et al. 2023, §3.4 eq. 11-12, A.5.2-A.5.3).

The server owns the encoder and public text; it trains the denoiser the client later downloads:

1. the client's side of a public text: its token embeddings ``X`` (the encoder's own input-embedding table), noised
   and clipped (:func:`~textfree.snd.noise.privatize_tokens`: ``X~`` and the effective noise ``Z``);
2. the server's side: ``e_c = G(X)`` and ``e_n = G(X~)`` (:func:`~textfree.lm.embed.pooled_embeddings`, exactly what
   ``/v1/embed`` answers), the encoder frozen;
3. the loss ``MSE(D(e_n, X~, Z, eta), e_c)`` (eq. 12).

Every row draws its eta from ``etas`` and the denoiser reads ``log eta``: one model covers the range (the paper trains
one model per group of two etas). Noise is fresh every epoch; each batch's generator is seeded from (noise seed,
epoch, the batch's first example), so a resumed run redraws exactly the noise of the uninterrupted one. The loop is
:func:`textfree.training.loop.fit` (Accelerate, resumable checkpoints, progress bar). At the end the run directory
holds ``denoiser.safetensors`` (its config names the encoder, its weights' sha256 and the eta range) and
``summary.json`` with the validation figures per eta on held-out texts under a fixed noise seed: MSE and mean cosine
to ``e_c`` of ``e_n`` (no denoising: TokEmbPriv) and of ``e_d`` (SnD), and the noise-to-signal ratio.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from typing import Any, Callable, Sequence

import torch

from ..lm.embed import pooled_embeddings
from ..rng import seeded_generator
from ..training.loop import fit, param_groups
from ..training.runs import check_run_dir, prepare_run_dir, total_wall_s, write_summary
from .corpus import Corpus, build_corpus
from .denoiser import DENOISER_FILE, Denoiser
from .noise import privatize_tokens
from .train_config import DenoiserTrainConfig  # plain Python: checked before these heavy imports

__all__ = ["DenoiserTrainConfig", "train_denoiser", "validation_figures", "batch_noise_seed"]

log = logging.getLogger("textfree.snd")


def batch_noise_seed(noise_seed: int, *parts: Any) -> int:
    """A 63-bit generator seed for (``noise_seed``, ``parts``...): e.g. (epoch, the batch's first example index)."""
    key = ":".join(["snd-noise", str(noise_seed), *map(str, parts)])
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") >> 1


# --------------------------------------------------------------------------------------------------- the server side
class _Sides:
    """The encoder G (frozen, eval) and the client's embedding table of the same model."""

    def __init__(self, name_or_path: str, max_tokens: int, device: torch.device):
        from ..encoders.loading import load_hf_encoder
        from ..encoders.table import EmbeddingTableEncoder

        tokenizer, model, self.name, self.sha256 = load_hf_encoder(None if name_or_path == "default" else name_or_path)
        positions = getattr(model.config, "max_position_embeddings", None)
        if positions is not None and max_tokens > positions:
            raise ValueError(f"max_tokens {max_tokens} is above the encoder's {positions} positions")
        self.table = EmbeddingTableEncoder(
            model.get_input_embeddings().weight, tokenizer, name=self.name, sha256=self.sha256, max_length=max_tokens
        )
        self.model = model.eval().requires_grad_(False).to(device)
        self.clip_norm = self.table.max_norm()
        self.output_dim = int(model.config.hidden_size)


def _make_collate(sides: _Sides, cfg: DenoiserTrainConfig) -> Callable[[list], dict]:
    """The batch of (epoch, index, text) items: texts tokenized, noise drawn (eta per row), e_c and e_n computed."""
    etas = torch.tensor(cfg.etas, dtype=torch.float64)
    noise_seed = cfg.effective_noise_seed

    def collate(items: list) -> dict:
        epoch, first = items[0][0], items[0][1]
        gen = seeded_generator(batch_noise_seed(noise_seed, epoch, first), warn=False)
        enc = sides.table.encode([text for _, _, text in items])
        eta = etas[torch.randint(len(etas), (len(items),), generator=gen)]
        x_tilde, z = privatize_tokens(
            enc.hidden, enc.mask, eta, clip_norm=sides.clip_norm, clip=cfg.clip, generator=gen
        )
        # e_c in the same batch as e_n, never cached: a text's e_c from another batch (other padding) differs in the
        # last bits, and a resumed run would then not replay the uninterrupted one exactly
        e_c = pooled_embeddings(sides.model, enc.hidden, enc.mask).cpu()
        e_n = pooled_embeddings(sides.model, x_tilde, enc.mask).cpu()
        return {
            "e_n": e_n,
            "x_tilde": x_tilde,
            "z": z,
            "mask": enc.mask,
            "eta": eta.float(),
            "e_c": e_c,
        }

    return collate


def _loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """Eq. 12: the squared error of the denoised to the clean embedding (mean over rows and dimensions)."""
    e_d = model(batch["e_n"], batch["x_tilde"], batch["z"], batch["mask"], batch["eta"])
    return torch.nn.functional.mse_loss(e_d, batch["e_c"].float())


# --------------------------------------------------------------------------------------------------- validation
@torch.no_grad()
def validation_figures(
    denoiser: Denoiser | None,
    encoder: torch.nn.Module,
    table,
    texts: Sequence[str],
    etas: Sequence[float],
    *,
    noise_seed: int,
    clip: bool = True,
    clip_norm: float | None = None,
    batch_size: int = 64,
) -> dict[str, dict[str, float]]:
    """Per eta (keyed by ``f"{eta:g}"``), on ``texts`` with noise from a generator seeded from (``noise_seed``, eta):
    ``mse_noisy`` / ``cos_noisy`` of ``e_n`` to ``e_c`` (TokEmbPriv), ``mse_denoised`` / ``cos_denoised`` of ``e_d``
    (SnD; absent without ``denoiser``), ``noise_norm`` (the mean effective noise norm ``||z||`` after clipping),
    ``expected_noise_norm`` (``d / eta``, before clipping), ``token_norm`` (mean clean ``||x||``) and ``nsr``
    (``E||z|| / mean ||x||`` with ``E||z|| = d / eta``). MSE is the mean over rows and dimensions (the training
    loss); cosines are means over rows."""
    clip_norm = table.max_norm() if clip and clip_norm is None else clip_norm
    keys = [f"{float(eta):g}" for eta in etas]
    gens = {
        k: seeded_generator(batch_noise_seed(noise_seed, "validation", float(e)), warn=False)
        for k, e in zip(keys, etas)
    }
    rows: dict[str, dict[str, list[torch.Tensor]]] = {k: {"e_n": [], "e_d": []} for k in keys}
    z_norm = dict.fromkeys(keys, 0.0)
    clean, x_norm, n_tokens = [], 0.0, 0
    dev = next(denoiser.parameters()).device if denoiser is not None else None
    for start in range(0, len(texts), batch_size):
        enc = table.encode(list(texts[start : start + batch_size]))
        clean.append(pooled_embeddings(encoder, enc.hidden, enc.mask).cpu())  # e_c: once for every eta
        x_norm += float(enc.hidden[enc.mask].norm(dim=-1).sum())
        n_tokens += int(enc.mask.sum())
        for key, eta in zip(keys, etas):
            x_tilde, z = privatize_tokens(enc.hidden, enc.mask, float(eta), clip_norm=clip_norm, clip=clip,
                                          generator=gens[key])  # fmt: skip
            e_n = pooled_embeddings(encoder, x_tilde, enc.mask).cpu()
            rows[key]["e_n"].append(e_n)
            if denoiser is not None:
                inputs = (t.to(dev) for t in (e_n, x_tilde, z, enc.mask))
                rows[key]["e_d"].append(denoiser.denoise(*inputs, float(eta), batch_size=batch_size))
            z_norm[key] += float(z[enc.mask].norm(dim=-1).sum())
    e_c = torch.cat(clean)
    token_norm = x_norm / max(n_tokens, 1)
    out: dict[str, dict[str, float]] = {}
    for key, eta in zip(keys, etas):
        e_n = torch.cat(rows[key]["e_n"])
        figures = {
            "mse_noisy": float(((e_n - e_c) ** 2).mean()),
            "cos_noisy": float(torch.nn.functional.cosine_similarity(e_n, e_c, dim=-1).mean()),
            "noise_norm": z_norm[key] / max(n_tokens, 1),
            "expected_noise_norm": table.dim / float(eta),
            "token_norm": token_norm,
            "nsr": table.dim / float(eta) / max(token_norm, 1e-12),
        }
        if denoiser is not None:
            e_d = torch.cat(rows[key]["e_d"])
            figures["mse_denoised"] = float(((e_d - e_c) ** 2).mean())
            figures["cos_denoised"] = float(torch.nn.functional.cosine_similarity(e_d, e_c, dim=-1).mean())
        out[key] = figures
    return out


# --------------------------------------------------------------------------------------------------- the run
def train_denoiser(
    cfg: DenoiserTrainConfig,
    *,
    texts: Sequence[str] | Corpus | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> dict[str, Any]:
    """Train a denoiser (see the module docstring); returns the summary written to summary.json plus ``"model"``: the
    trained :class:`Denoiser`. ``texts`` replaces the public corpus (tests), or is the :class:`Corpus` itself (its
    ``train`` and ``val`` as given). With ``cfg.init`` the denoiser starts from that run's (its widths must be the
    encoder's; its card then names this encoder). The encoder and the corpus load before ``cfg.out`` is written: a run
    that cannot start leaves it as it was."""
    from ..accel import make_accelerator

    if not isinstance(cfg, DenoiserTrainConfig):
        raise TypeError(f"cfg must be a DenoiserTrainConfig, got {type(cfg).__name__}")
    init_fingerprint = check_run_dir(cfg, init=cfg.init)
    accelerator = make_accelerator(cpu=cfg.cpu)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    t0 = time.time()

    sides = _Sides(cfg.encoder, cfg.max_tokens, accelerator.device)
    if isinstance(texts, Corpus):
        corpus = texts
    else:
        corpus = build_corpus(
            cfg.sources, limit_per_source=cfg.limit_per_source, val_size=cfg.val_size, seed=cfg.seed, texts=texts
        )
    card = dict(encoder_id=sides.name, encoder_sha256=sides.sha256)
    if cfg.init is None:
        denoiser = Denoiser(cfg.denoiser_config(sides.table.dim, sides.output_dim, **card))
    else:
        denoiser = Denoiser.from_pretrained(cfg.init)
        widths = (denoiser.config.token_dim, denoiser.config.output_dim)
        if widths != (sides.table.dim, sides.output_dim) or cfg.max_tokens > denoiser.config.max_tokens:
            raise ValueError(
                f"init {cfg.init!r} denoises (token, output) widths {widths} up to {denoiser.config.max_tokens} "
                f"tokens; encoder {sides.name!r} has {(sides.table.dim, sides.output_dim)}, max_tokens "
                f"{cfg.max_tokens}"
            )
        denoiser.config = denoiser.config.replace(**card)
    run = prepare_run_dir(cfg, init=cfg.init, fingerprint=init_fingerprint)
    optimizer = torch.optim.AdamW(param_groups([(list(denoiser.parameters()), cfg.lr)], cfg.weight_decay))
    examples = corpus.train
    log.info(
        "SnD denoiser: %d training texts, etas %s, C = %.4g, %d parameters",
        len(examples),
        cfg.etas,
        sides.clip_norm,
        sum(p.numel() for p in denoiser.parameters()),
    )
    t_fit = time.time()
    summary = fit(
        cfg=cfg,
        model=denoiser,
        optimizer=optimizer,
        n_examples=len(examples),
        epoch_examples=lambda epoch: [(epoch, i, text) for i, text in enumerate(examples)],
        collate=_make_collate(sides, cfg),
        loss_fn=_loss,
        on_step=on_step,
        accelerator=accelerator,
    )
    fit_s = time.time() - t_fit
    denoiser = summary["model"]
    denoiser.eval()
    validation = validation_figures(
        denoiser,
        sides.model,
        sides.table,
        corpus.val,
        cfg.etas,
        noise_seed=cfg.effective_noise_seed,
        clip=cfg.clip,
        clip_norm=sides.clip_norm,
    )
    denoiser = denoiser.cpu()
    if accelerator.is_main_process:
        denoiser.save_pretrained(run)
    accelerator.wait_for_everyone()
    new_steps = summary["steps"] - summary["resumed_from_step"]
    extra = {
        "system": "snd",
        "encoder": sides.name,
        "encoder_sha256": sides.sha256,
        "clip_norm": sides.clip_norm,
        "etas": list(cfg.etas),
        "corpus": corpus.record(),
        "examples": len(examples),
        "denoiser_file": DENOISER_FILE,
        "denoiser_sha256": denoiser.sha256,
        "denoiser_parameters": sum(p.numel() for p in denoiser.parameters()),
        "validation": validation,
        "s_per_step": round(fit_s / new_steps, 4) if new_steps else None,
        "total_wall_s": total_wall_s(summary, t0),
    }
    data = write_summary(run, summary, extra)
    if accelerator.is_main_process:
        for eta, f in validation.items():
            log.info(
                "eta %s: NSR %.3g; MSE e_n %.4g -> e_d %.4g; cos e_n %.4f -> e_d %.4f",
                eta,
                f["nsr"],
                f["mse_noisy"],
                f["mse_denoised"],
                f["cos_noisy"],
                f["cos_denoised"],
            )
    return data | {"model": denoiser}
