"""SnD after the server updates its model (Mai et al. 2023, §4.4.4 and Table 10 in A.8).

The server fine-tunes its encoder G a little (:func:`update_encoder`: full fine-tuning with a sequence-classification
head, one epoch, on the first N SST-2 training sentences in a seeded order). The denoiser the clients hold was trained
for the old G; :func:`finetune_denoiser` continues its training for the new one on N public texts (one epoch, the
same machinery as :func:`~textfree.snd.train.train_denoiser`, started from the old run with ``init``), and
:func:`model_update_grid` measures, for base-update sizes x denoiser-update sizes, the denoised and the undenoised
``e_n``'s MSE and cosine to the clean embedding ``e_c`` of the UPDATED encoder (:func:`update_figures`) on held-out
public texts at the given etas. Size 0 means "no update": the old encoder, the stale denoiser unchanged.

**The client's token-embedding table.** SnD splits the model after its token-embedding layer: the client privatizes
rows of that table, and the server runs the rest. Fine-tuning updates the input embeddings too, and the paper does
not say what the client then uses. Here the update freezes the word-embedding table by default
(``freeze_embeddings=True``; position and token-type embeddings and the embedding LayerNorm run on the server and do
train): the client's table, its clipping bound C and so the privacy of what it sends stay exactly as they were, and no
client must download anything for the server's update to take effect, so the experiment isolates what it asks about
(the server's part changed under a stale denoiser). With ``freeze_embeddings=False`` the client uses the updated
model's table (it downloads the new table with the new model card); either way :func:`update_figures` reads the
table from the updated model's directory, which equals the old table when it was frozen.

The updated encoder is saved as a plain Hugging Face encoder (the base model without the classification head, and the
tokenizer) that everything else loads by path; ``train_config.json`` and ``summary.json`` beside it say how it was
made. A finished run with the same settings, made from the same encoder (weights' sha256), is reused.
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from ..training.checkpoint import CHECKPOINTS_DIR
from ..training.config import LoopConfig, _check_int
from ..training.runs import SUMMARY, TRAIN_CONFIG, finished_run
from .denoiser import Denoiser

__all__ = [
    "EncoderUpdateConfig",
    "sst2_order",
    "update_encoder",
    "finetune_denoiser",
    "update_figures",
    "model_update_grid",
    "base_run_settings",
    "public_split",
]

log = logging.getLogger("textfree.snd")

#: Settings that may differ between two runs that are otherwise the same (see :func:`finished_run`).
_VOLATILE = {"resume", "progress", "cpu", "log_every", "save_every", "out"}


def _check_samples(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    return value


def _sha(path: str) -> str | None:
    from ..encoders.loading import resolve_encoder_path, weights_sha256

    return weights_sha256(resolve_encoder_path(None if path == "default" else path))


def _reuse(out: Path, config: dict[str, Any], **expected: Any) -> dict[str, Any] | None:
    """The summary of the finished run in ``out`` when it was made with ``config`` and its summary records
    ``expected`` (e.g. the sha256 of the encoder it started from); else None."""
    from ..atomic import read_json

    if not finished_run(out, config, _VOLATILE):
        return None
    summary = read_json(out / SUMMARY)
    if any(summary.get(k) != v for k, v in expected.items()):
        return None
    return summary


def _init_fingerprint(run: str | Path) -> str | None:
    """The fingerprint of the run that ``run`` started from, as its train_config.json records it."""
    from ..atomic import read_json

    return read_json(Path(run) / TRAIN_CONFIG).get("init_fingerprint")


# --------------------------------------------------------------------------------------------------- the encoder
@dataclass(kw_only=True)
class EncoderUpdateConfig(LoopConfig):
    """The server's model update: one epoch of full fine-tuning of ``encoder`` on ``samples`` SST-2 sentences."""

    encoder: str = field(metadata={"help": "The encoder before the update: 'default' (all-MiniLM-L6-v2) or a path."})
    samples: int = field(metadata={"help": "SST-2 training sentences (the first ones of a seeded order)."})
    lr: float = field(default=2e-5, metadata={"help": "Peak learning rate (AdamW)."})
    batch_size: int = field(default=32, metadata={"help": "Sentences per optimizer step."})
    warmup_steps: int = field(default=0, metadata={"help": "Linear warm-up steps."})
    max_tokens: int = field(default=64, metadata={"help": "Cut every sentence to this many tokens."})
    freeze_embeddings: bool = field(
        default=True,
        metadata={"help": "Keep the word-embedding table (the client's) as it was (see the module docstring)."},
    )
    save_every: int = field(default=10**9, metadata={"help": "Checkpoint every this many steps (and at the end)."})
    progress: bool = field(default=False, metadata={"help": "Show a progress bar."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.encoder, str) or not self.encoder.strip():
            raise ValueError(f"encoder must be a model name or path, got {self.encoder!r}")
        _check_int("samples", self.samples, 1)
        _check_int("max_tokens", self.max_tokens, 2)
        if not isinstance(self.freeze_embeddings, bool):
            raise ValueError(f"freeze_embeddings must be true or false, got {self.freeze_embeddings!r}")


def sst2_order(seed: int, records: Sequence[Any] | None = None) -> list[tuple[str, int]]:
    """(sentence, label) of every SST-2 training record (or of ``records``) in the order seeded by ``seed``: the
    first N of it are an update of size N, so a smaller update's sentences are among a larger one's."""
    from ..data import load_sst2

    rows = [(r.text, int(r.label)) for r in (load_sst2(split="train") if records is None else records)]
    random.Random(f"snd-update-sst2:{seed}").shuffle(rows)
    return rows


def update_encoder(
    encoder: str,
    sst2_samples: int,
    *,
    out: str | Path,
    seed: int,
    records: Sequence[Any] | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """Fine-tune ``encoder`` on ``sst2_samples`` SST-2 training sentences (one epoch, full fine-tuning with a fresh
    two-label sequence-classification head; ``settings``: further :class:`EncoderUpdateConfig` fields) and save the
    updated encoder into ``out`` (see the module docstring). Returns the summary, with ``"path"``: the directory to
    load the updated encoder from. ``sst2_samples`` 0: no update, ``"path"`` is ``encoder`` and nothing is written.
    ``records`` (objects with ``text`` and ``label``) replace the SST-2 training split (tests)."""
    from ..accel import make_accelerator
    from ..lm.adapters import AdapterSettings, apply_adapter
    from ..lm.loading import load_encoder
    from ..training.loop import fit, param_groups
    from ..training.runs import check_run_dir, prepare_run_dir, total_wall_s, write_summary

    _check_samples("sst2_samples", sst2_samples)
    _check_int("seed", seed, 0)
    if sst2_samples == 0:
        return {"path": encoder, "samples": 0, "steps": 0, "encoder_sha256": _sha(encoder)}
    cfg = EncoderUpdateConfig(out=str(out), encoder=encoder, samples=sst2_samples, seed=seed, **settings)
    base_sha = _sha(encoder)
    run = Path(cfg.out)
    if (done := _reuse(run, cfg.to_dict(), base_encoder_sha256=base_sha)) is not None:
        log.info("encoder update: reusing the finished run in %s", run)
        return done | {"path": str(run)}
    check_run_dir(cfg)
    rows = sst2_order(seed, records)
    if len(rows) < sst2_samples:
        raise ValueError(f"sst2_samples {sst2_samples} is above the {len(rows)} SST-2 training sentences")
    rows = rows[:sst2_samples]
    accelerator = make_accelerator(cpu=cfg.cpu)
    random.seed(seed)
    torch.manual_seed(seed)  # the classification head's initialisation and dropout
    t0 = time.time()
    model, tokenizer = load_encoder(encoder, head="sequence", num_labels=2)
    model = apply_adapter(model, AdapterSettings(method="full"), "SEQ_CLS")
    if cfg.freeze_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(param_groups([(trainable, cfg.lr)], cfg.weight_decay))
    run = prepare_run_dir(cfg)

    def collate(items: list[tuple[str, int]]) -> dict[str, torch.Tensor]:
        enc = tokenizer([t for t, _ in items], padding=True, truncation=True, max_length=cfg.max_tokens,
                        return_tensors="pt")  # fmt: skip
        return dict(enc) | {"labels": torch.tensor([y for _, y in items])}

    summary = fit(
        cfg=cfg,
        model=model,
        optimizer=optimizer,
        n_examples=len(rows),
        epoch_examples=lambda epoch: rows,
        collate=collate,
        loss_fn=lambda m, batch: m(**batch).loss,
        accelerator=accelerator,
    )
    model = summary["model"].cpu().eval()
    if accelerator.is_main_process:
        model.base_model.save_pretrained(run)  # the served encoder: the base model, without the head
        tokenizer.save_pretrained(run)
        shutil.rmtree(run / CHECKPOINTS_DIR, ignore_errors=True)
    accelerator.wait_for_everyone()
    extra = {
        "system": "snd-model-update",
        "base_encoder": encoder,
        "base_encoder_sha256": base_sha,
        "samples": sst2_samples,
        "encoder_sha256": _sha(str(run)),
        "trainable_parameters": sum(p.numel() for p in trainable),
        "total_wall_s": total_wall_s(summary, t0),
    }
    data = write_summary(run, summary, extra)
    log.info("encoder update on %d SST-2 sentences: %d steps, final loss %s", sst2_samples, data["steps"],
             data["final_loss"])  # fmt: skip
    return data | {"path": str(run)}


# --------------------------------------------------------------------------------------------------- the denoiser
def base_run_settings(denoiser_run: str | Path) -> dict[str, Any]:
    """The training config of the denoiser run ``denoiser_run`` (its train_config.json), or {} when it has none (a
    bare denoiser file or directory): what a fine-tuning keeps (etas, max_tokens, corpus, batch size, noise seed)."""
    from ..atomic import read_json

    path = Path(denoiser_run) / TRAIN_CONFIG
    return dict(read_json(path).get("config", {})) if path.is_file() else {}


def public_split(denoiser_run: str | Path, *, val_size: int, texts: Sequence[str] | None = None):
    """The base run's public corpus rebuilt (its sources, sample and seed): (training texts, the first ``val_size``
    of its held-out texts; no more than it held out). The denoiser never trained on the held-out ones; a fine-tuning
    draws from the training ones (the public mix). ``texts`` replace the corpus (tests)."""
    from .corpus import CORPUS_SOURCES, build_corpus

    _check_int("val_size", val_size, 1)
    base = base_run_settings(denoiser_run)
    if base and val_size > base["val_size"]:
        raise ValueError(f"val_size {val_size} is above the {base['val_size']} texts {str(denoiser_run)!r} held out")
    corpus = build_corpus(
        base.get("sources", list(CORPUS_SOURCES)),
        limit_per_source=base.get("limit_per_source", 5000),
        val_size=base.get("val_size", val_size),
        seed=base.get("seed", 0),
        texts=texts,
    )
    return corpus.train, corpus.val[:val_size]


def finetune_denoiser(
    denoiser_run: str | Path,
    encoder_path: str,
    samples: int,
    *,
    out: str | Path,
    seed: int,
    pool: Sequence[str],
    val_texts: Sequence[str],
    lr: float = 1e-4,
    batch_size: int | None = None,
    cpu: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Continue the training of the denoiser in ``denoiser_run`` for the encoder at ``encoder_path``: one epoch on
    the first ``samples`` texts of ``pool`` in the order seeded by ``seed`` (:func:`train_denoiser` with ``init``; the
    etas, max_tokens, clipping, batch size and noise seed of the base run). ``val_texts``: the run's validation texts.
    Returns the run's summary plus ``"model"`` (the fine-tuned :class:`Denoiser`); a finished run in ``out`` with the
    same settings, encoder and base denoiser is reused. ``samples`` 0: the stale denoiser unchanged, nothing written
    (``"model"`` is it, ``"steps"`` 0)."""
    from ..training.runs import run_fingerprint
    from .corpus import Corpus
    from .train import DenoiserTrainConfig, train_denoiser

    _check_samples("samples", samples)
    _check_int("seed", seed, 0)
    stale = Denoiser.from_pretrained(denoiser_run)
    if samples == 0:
        return {"model": stale, "samples": 0, "steps": 0, "run": str(denoiser_run), "denoiser_sha256": stale.sha256}
    pool = list(pool)
    if len(pool) < samples:
        raise ValueError(f"samples {samples} is above the {len(pool)} public texts to draw from")
    order = list(range(len(pool)))
    random.Random(f"snd-update-denoiser:{seed}").shuffle(order)
    chosen = [pool[i] for i in order[:samples]]
    base = base_run_settings(denoiser_run)
    c = stale.config
    etas = base.get("etas") or sorted({c.eta_min or 100.0, c.eta_max or 100.0})
    cfg = DenoiserTrainConfig(
        out=str(out),
        encoder=encoder_path,
        init=str(denoiser_run),
        etas=list(etas),
        max_tokens=min(base.get("max_tokens", 64), c.max_tokens),
        clip=c.clip,
        use_noise=c.use_noise,
        use_tokens=c.use_tokens,
        val_size=len(val_texts),
        epochs=1,
        batch_size=batch_size or base.get("batch_size", 32),
        lr=lr,
        warmup_steps=0,
        seed=seed,
        noise_seed=base.get("noise_seed"),
        save_every=10**9,
        cpu=cpu,
        progress=progress,
    )
    expected = {"encoder_sha256": _sha(encoder_path), "examples": samples}
    done = _reuse(Path(cfg.out), cfg.to_dict(), **expected)
    if done is not None and _init_fingerprint(cfg.out) == run_fingerprint(denoiser_run):
        log.info("denoiser fine-tuning: reusing the finished run in %s", cfg.out)
        return done | {"model": Denoiser.from_pretrained(cfg.out)}
    corpus = Corpus(train=chosen, val=list(val_texts), counts={"public": samples})
    result = train_denoiser(cfg, texts=corpus)
    shutil.rmtree(Path(cfg.out) / CHECKPOINTS_DIR, ignore_errors=True)
    return result


# --------------------------------------------------------------------------------------------------- the figures
def load_server(encoder_path: str, max_tokens: int):
    """(the client's table, the server's model) of the encoder at ``encoder_path`` (both from its directory)."""
    from ..encoders import EmbeddingTableEncoder
    from ..encoders.loading import load_hf_encoder

    name = None if encoder_path == "default" else encoder_path
    tokenizer, model, ident, sha = load_hf_encoder(name)
    table = EmbeddingTableEncoder(model.get_input_embeddings().weight, tokenizer, name=ident, sha256=sha,
                                  max_length=max_tokens)  # fmt: skip
    return table, model.eval()


def update_figures(
    denoiser: Denoiser,
    server: tuple[Any, torch.nn.Module],
    val_texts: Sequence[str],
    etas: Sequence[float],
    *,
    noise_seed: int,
) -> dict[str, dict[str, float]]:
    """Per eta (``f"{eta:g}"``): ``mse_denoised`` / ``cos_denoised`` of the denoised and ``mse_noisy`` / ``cos_noisy``
    of the undenoised ``e_n`` to ``e_c``, all of ``server`` (the UPDATED encoder's table and model,
    :func:`load_server`), on ``val_texts`` with noise seeded by ``noise_seed`` (the same noise for every denoiser)."""
    from .train import validation_figures

    table, model = server
    return validation_figures(denoiser, model, table, val_texts, etas, noise_seed=noise_seed,
                              clip=denoiser.config.clip)  # fmt: skip


def model_update_grid(
    encoder: str,
    denoiser_run: str | Path,
    base_samples: Sequence[int],
    denoiser_samples: Sequence[int],
    etas: Sequence[float],
    *,
    work_dir: str | Path,
    val_size: int = 256,
    seed: int = 0,
    noise_seed: int | None = None,
    records: Sequence[Any] | None = None,
    texts: Sequence[str] | None = None,
    encoder_settings: dict[str, Any] | None = None,
    denoiser_lr: float = 1e-4,
    cpu: bool = False,
) -> list[dict[str, Any]]:
    """Table 10 as validation figures: for every base-update size (SST-2 sentences the encoder is fine-tuned on) and
    denoiser-update size (public texts the stale denoiser is fine-tuned on), the :func:`update_figures` at ``etas``.
    Updated encoders go to ``work_dir/encoder-b{N}-s{seed}``, fine-tuned denoisers to
    ``work_dir/denoiser-b{N}-d{M}-s{seed}`` (finished ones are reused). ``records`` / ``texts`` replace SST-2's
    training split / the public corpus (tests). One row per (base, denoiser, eta), with the sizes, the figures, the
    encoder's and denoiser's sha256 and ``seconds`` (the row's share: the updates it needed first, then its figures)."""
    for name, sizes in (("base_samples", base_samples), ("denoiser_samples", denoiser_samples)):
        if isinstance(sizes, (str, bytes)) or not isinstance(sizes, (list, tuple)) or not sizes:
            raise ValueError(f"{name} must be a non-empty list of integers >= 0, got {sizes!r}")
        for value in sizes:
            _check_samples(f"every entry of {name}", value)
    work = Path(work_dir)
    noise_seed = seed if noise_seed is None else noise_seed
    pool, val = public_split(denoiser_run, val_size=val_size, texts=texts)
    max_tokens = Denoiser.from_pretrained(denoiser_run).config.max_tokens
    max_tokens = min(max_tokens, base_run_settings(denoiser_run).get("max_tokens", max_tokens))
    rows = []
    for b in base_samples:
        t0 = time.perf_counter()
        updated = update_encoder(encoder, b, out=work / f"encoder-b{b}-s{seed}", seed=seed, records=records,
                                 **({"cpu": cpu} | (encoder_settings or {})))  # fmt: skip
        server = load_server(updated["path"], max_tokens)
        for m in denoiser_samples:
            den = finetune_denoiser(denoiser_run, updated["path"], m, out=work / f"denoiser-b{b}-d{m}-s{seed}",
                                    seed=seed, pool=pool, val_texts=val, lr=denoiser_lr, cpu=cpu)  # fmt: skip
            model = den["model"].eval()
            figures = update_figures(model, server, val, etas, noise_seed=noise_seed)
            seconds = (time.perf_counter() - t0) / len(etas)
            t0 = time.perf_counter()
            for eta in etas:
                f = figures[f"{float(eta):g}"]
                rows.append(
                    {
                        "base_samples": b,
                        "denoiser_samples": m,
                        "eta": float(eta),
                        **{k: f[k] for k in ("mse_denoised", "cos_denoised", "mse_noisy", "cos_noisy")},
                        "encoder_sha256": updated.get("encoder_sha256"),
                        "denoiser_sha256": model.sha256,
                        "seconds": seconds,
                    }
                )
    return rows
