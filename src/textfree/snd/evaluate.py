"""Evaluation of Split-N-Denoise (Mai et al. 2023, §4.1, §4.4.2-4.4.3, A.4, A.5.4, A.5.5, A.10, A.12): how useful the
embeddings a client ends up with are, per privacy level eta, for SnD and its baselines and ablations.

Pipelines (:data:`PIPELINES`; each turns a text into one sentence embedding, the server's mean-pooled last hidden
state, :func:`textfree.lm.embed.pooled_embeddings`):

* ``clean``: no noise (the paper's eta = infinity row);
* ``tokembpriv``: L2-Laplace d_chi noise on every real token embedding, clipped to C (:func:`.noise.privatize_tokens`),
  no denoising: what the server returns. (The paper's TokEmbPriv baseline, A.5.5, does not clip; ``no_clip`` without
  a denoiser is not offered, clipping only helps the baseline.)
* ``snd``: the server's answer to the clipped noisy tokens, denoised by a client-side denoiser that reads X~ and Z;
* ``text2text`` (A.5.5): each noisy token (unclipped noise, as the paper's baseline) replaced by the nearest row of the
  embedding table (L2), and the clean embedding of that token sequence;
* ``pct2t`` (A.5.5's RAPT row): the text privatized word by word on the client with RAPT's PCT2T (only nouns,
  verbs, pronouns and prepositions, each within its category, :mod:`textfree.substitution`; the word table is the
  mean sub-token embedding of the same model), then the clean embedding of the privatized text;
* ``server_denoiser`` (A.12, Proposition 3.4's limit): a denoiser trained without Z (``use_noise=False``), which the
  server itself could run; it is given zeros for Z so nothing of the noise reaches it;
* ablations: ``no_clip`` (unclipped noise, a denoiser trained on unclipped noise, ``clip=False``), ``snd_no_noise``
  (a denoiser trained without Z: the same computation as ``server_denoiser``, reported as an ablation) and
  ``snd_no_tokens`` (a denoiser trained without X~).

Every real position is noised, special tokens ([CLS], [SEP]) included, as :func:`.noise.privatize_tokens` does and
the denoiser is trained. A denoising pipeline takes a :class:`~.denoiser.Denoiser` object; :func:`check_denoiser`
refuses one whose settings do not fit the pipeline.

Downstream evaluation (A.4): the probe trains on the pipeline's embeddings of the task's training split and is tested
on the pipeline's embeddings of its test split (noise on both sides, each text its own draw). Single-sentence tasks
(CoLA, SST-2) embed the sentence; pair tasks (MRPC, RTE, QQP) embed each sentence and concatenate the two (A.5.4).
Splits (:data:`TASK_SPLITS`): GLUE dev is the test split where its labels exist (SST-2, CoLA, RTE); MRPC's is the
labelled MSRP test file (GLUE's MRPC dev is carved out of MSRP train by an id list this project does not hold); QQP is
a 23,497-row subset of GLUE dev, split here by :func:`qqp_is_test` (sha256 of the pair id: about 20% test).

The probe (A.5.4) is a two-layer ReLU MLP with hidden width = input width, on features standardised with the training
split's mean and standard deviation, trained with AdamW from a fixed seed; it early-stops on a validation slice cut
from the TRAINING split only. It reports accuracy and ROC AUC (:func:`roc_auc`). Similarity (A.10): MSE (mean over
dimensions) and cosine of the pipeline's embedding to the clean one, mean over the test texts.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ..data.tasks import PAIR_TASKS, TASK_SPLITS, TASKS, TaskData, load_task, qqp_is_test
from ..lm.embed import pooled_embeddings
from .denoiser import Denoiser
from .noise import check_eta, privatize_tokens

__all__ = [
    "PIPELINES",
    "DENOISING_PIPELINES",
    "TASKS",
    "PAIR_TASKS",
    "TASK_SPLITS",
    "TaskData",
    "ProbeConfig",
    "Probe",
    "check_denoiser",
    "check_pipeline",
    "tokenize",
    "nearest_tokens",
    "embed_texts",
    "embed_task_texts",
    "expected_noise_norm",
    "noise_to_signal",
    "qqp_is_test",
    "load_task",
    "train_probe",
    "evaluate_probe",
    "roc_auc",
    "similarity",
]

#: Pipeline name -> (adds noise, clips the noisy tokens, runs a denoiser).
_PIPELINE_SPECS = {
    "clean": (False, False, False),
    "tokembpriv": (True, True, False),
    "snd": (True, True, True),
    "text2text": (True, False, False),
    "pct2t": (True, False, False),
    "server_denoiser": (True, True, True),
    "no_clip": (True, False, True),
    "snd_no_noise": (True, True, True),
    "snd_no_tokens": (True, True, True),
}
PIPELINES = tuple(_PIPELINE_SPECS)
DENOISING_PIPELINES = tuple(name for name, spec in _PIPELINE_SPECS.items() if spec[2])
#: The denoiser settings each denoising pipeline needs (``DenoiserConfig`` field -> value).
_DENOISER_NEEDS = {
    "snd": {"use_tokens": True, "use_noise": True, "clip": True},
    "server_denoiser": {"use_noise": False, "clip": True},
    "no_clip": {"use_tokens": True, "use_noise": True, "clip": False},
    "snd_no_noise": {"use_tokens": True, "use_noise": False, "clip": True},
    "snd_no_tokens": {"use_tokens": False, "use_noise": True, "clip": True},
}


# ------------------------------------------------------------------------------------------------ pipelines
def check_pipeline(pipeline: str) -> str:
    """``pipeline`` when it is a known pipeline name; ``ValueError`` listing them otherwise."""
    if pipeline not in _PIPELINE_SPECS:
        raise ValueError(f"unknown pipeline {pipeline!r}; known: {list(PIPELINES)}")
    return pipeline


def check_denoiser(
    pipeline: str,
    denoiser: Denoiser | None,
    *,
    token_dim: int | None = None,
    output_dim: int | None = None,
    max_tokens: int | None = None,
) -> None:
    """``ValueError`` unless ``denoiser`` fits ``pipeline`` (present exactly for a denoising pipeline, trained with
    its settings, see the module docstring) and, where given, the table width, the server's width and the sequence
    length."""
    check_pipeline(pipeline)
    if pipeline not in DENOISING_PIPELINES:
        if denoiser is not None:
            raise ValueError(f"pipeline {pipeline!r} runs no denoiser; pass denoiser=None")
        return
    if not isinstance(denoiser, Denoiser):
        raise ValueError(f"pipeline {pipeline!r} needs a Denoiser, got {type(denoiser).__name__}")
    cfg = denoiser.config
    for name, value in _DENOISER_NEEDS[pipeline].items():
        if getattr(cfg, name) != value:
            raise ValueError(
                f"pipeline {pipeline!r} needs a denoiser trained with {name}={value}; this one has {name}="
                f"{getattr(cfg, name)} (settings needed: {_DENOISER_NEEDS[pipeline]})"
            )
    if token_dim is not None and cfg.token_dim != token_dim:
        raise ValueError(f"the denoiser reads {cfg.token_dim}-wide tokens; the embedding table is {token_dim} wide")
    if output_dim is not None and cfg.output_dim != output_dim:
        raise ValueError(f"the denoiser reads a {cfg.output_dim}-wide output; the server's is {output_dim} wide")
    if max_tokens is not None and max_tokens > cfg.max_tokens:
        raise ValueError(f"max_tokens {max_tokens} is over the denoiser's {cfg.max_tokens}")


def tokenize(tokenizer: Any, texts: Sequence[str], max_tokens: int) -> list[list[int]]:
    """Token ids of each text with the tokenizer's special tokens, at most ``max_tokens`` in all."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 2:
        raise ValueError(f"max_tokens must be an integer >= 2, got {max_tokens!r}")
    enc = tokenizer(list(texts), truncation=True, max_length=max_tokens, add_special_tokens=True)
    return [list(ids) for ids in enc["input_ids"]]


def nearest_tokens(vectors: torch.Tensor, table: torch.Tensor, *, chunk: int = 1024) -> torch.Tensor:
    """Index of the L2-nearest row of ``table`` [V, d] for each of ``vectors`` [..., d] (Text2Text's step, A.5.5):
    the attack suite's exact nearest-neighbour search."""
    from ..attacks.nearest import nearest_token_ids

    return nearest_token_ids(vectors.to(torch.float32), table, metric="l2", chunk_size=chunk)


def expected_noise_norm(eta: float, d: int) -> float:
    """E||z|| of d-dimensional L2-Laplace noise at ``eta`` (radius Gamma(d, 1/eta)): ``d / eta``."""
    return d / check_eta(eta)


def noise_to_signal(eta: float | None, d: int, mean_token_norm: float) -> float:
    """``E||z|| / mean ||x||``: the noise's expected norm (before clipping) over the mean norm of the clean token
    embeddings; 0 without noise (``eta`` None)."""
    if not mean_token_norm > 0:
        raise ValueError(f"mean_token_norm must be > 0, got {mean_token_norm!r}")
    return 0.0 if eta is None else expected_noise_norm(eta, d) / mean_token_norm


@torch.no_grad()
def embed_texts(
    texts: Sequence[str],
    *,
    pipeline: str,
    eta: float | None,
    table_encoder: Any,
    server_model: torch.nn.Module,
    denoiser: Denoiser | None = None,
    generator: torch.Generator | None,
    batch_size: int = 64,
    max_tokens: int = 128,
    return_clean: bool = True,
    stats: dict | None = None,
    text_mechanism: Any = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(embeddings [N, out], clean [N, out])``: each text's embedding through ``pipeline`` at ``eta``, and its clean
    embedding (None with ``return_clean=False``), float32 on the CPU, in the order of ``texts``.

    ``table_encoder`` is the client's :class:`~textfree.encoders.EmbeddingTableEncoder` (its tokenizer, table and
    ``max_norm()`` = C), ``server_model`` the rest of the encoder (run by :func:`pooled_embeddings`). Texts are cut to
    ``max_tokens`` tokens (special tokens included) and run ``batch_size`` at a time, shortest first (less padding);
    noise is drawn from ``generator`` (required for a noisy pipeline) in that order, so the same generator state gives
    the same embeddings. ``stats``, when a dict, is filled with ``n_tokens`` (real tokens), ``token_norm_sum`` (of
    ||x||) and ``noise_norm_sum`` (of the effective ||z||, after clipping) summed over the texts. ``text_mechanism``:
    the :class:`~textfree.substitution.TextToText` PCT2T mechanism of pipeline ``pct2t`` (its eta is replaced by
    ``eta``); ``stats`` then also gets ``words_privatized`` and ``words_replaced``.
    """
    check_pipeline(pipeline)
    if pipeline == "pct2t":
        return _embed_pct2t(
            texts, eta=eta, text_mechanism=text_mechanism, generator=generator, table_encoder=table_encoder,
            server_model=server_model, batch_size=batch_size, max_tokens=max_tokens, return_clean=return_clean,
            stats=stats,
        )  # fmt: skip
    if text_mechanism is not None:
        raise ValueError(f"pipeline {pipeline!r} privatizes no text; pass text_mechanism=None")
    add_noise, clip, denoise = _PIPELINE_SPECS[pipeline]
    if add_noise:
        check_eta(eta)
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"pipeline {pipeline!r} draws noise: pass a torch.Generator, got {generator!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    table = table_encoder.table.detach().float()
    width = _output_width(server_model)
    check_denoiser(pipeline, denoiser, token_dim=table.shape[1], output_dim=width or None, max_tokens=max_tokens)
    ids = tokenize(table_encoder.tokenizer, texts, max_tokens)
    pad = table_encoder.tokenizer.pad_token_id or 0
    order = sorted(range(len(ids)), key=lambda i: (len(ids[i]), i))
    c = table_encoder.max_norm() if clip else None
    out, clean_out = [None] * len(ids), [None] * len(ids)
    counts = {"n_tokens": 0, "token_norm_sum": 0.0, "noise_norm_sum": 0.0}
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        n = max(len(ids[i]) for i in rows)
        batch_ids = torch.tensor([ids[i] + [pad] * (n - len(ids[i])) for i in rows], dtype=torch.long)
        mask = torch.tensor([[j < len(ids[i]) for j in range(n)] for i in rows], dtype=torch.bool)
        x = table[batch_ids] * mask.unsqueeze(-1)
        clean = pooled_embeddings(server_model, x, mask).float().cpu() if return_clean or not add_noise else None
        counts["n_tokens"] += int(mask.sum())
        counts["token_norm_sum"] += float(x.norm(dim=-1)[mask].double().sum())
        if not add_noise:
            emb = clean
        else:
            x_tilde, z = privatize_tokens(x, mask, eta, clip_norm=c, clip=clip, generator=generator)
            counts["noise_norm_sum"] += float(z.norm(dim=-1)[mask].double().sum())
            if pipeline == "text2text":
                swapped = torch.where(mask, nearest_tokens(x_tilde, table), batch_ids)
                emb = pooled_embeddings(server_model, table[swapped] * mask.unsqueeze(-1), mask).float().cpu()
            else:
                emb = pooled_embeddings(server_model, x_tilde, mask).float().cpu()
                if denoise:
                    if not denoiser.config.use_noise:  # a server-side denoiser: nothing of Z reaches it
                        z = torch.zeros_like(z)
                    emb = denoiser.denoise(emb, x_tilde, z, mask, eta, batch_size=len(rows))
        for k, i in enumerate(rows):
            out[i] = emb[k]
            if clean is not None:
                clean_out[i] = clean[k]
    if stats is not None:
        stats.update(counts)
    embeddings = torch.stack(out) if out else torch.zeros(0, width)
    if not return_clean:
        return embeddings, None
    return embeddings, torch.stack(clean_out) if clean_out else torch.zeros(0, width)


def _embed_pct2t(
    texts: Sequence[str], *, eta: float, text_mechanism: Any, generator: Any, stats: dict | None, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Pipeline ``pct2t``: the texts privatized by ``text_mechanism`` at ``eta``, then embedded as clean text."""
    from ..substitution import TextToText

    check_eta(eta)
    if not isinstance(text_mechanism, TextToText) or not text_mechanism.is_pct2t:
        raise ValueError(f"pipeline 'pct2t' needs a PCT2T TextToText as text_mechanism, got {text_mechanism!r}")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"pipeline 'pct2t' draws noise: pass a torch.Generator, got {generator!r}")
    private = text_mechanism.with_eta(eta).privatize_detailed(list(texts), generator=generator)
    return_clean = kwargs.pop("return_clean")
    emb, _ = embed_texts(private.texts, pipeline="clean", eta=None, generator=None, return_clean=False, stats=stats,
                         **kwargs)  # fmt: skip
    clean = embed_texts(texts, pipeline="clean", eta=None, generator=None, return_clean=False, **kwargs)[0]
    if stats is not None:
        stats["words_privatized"] = stats.get("words_privatized", 0) + private.n_substituted
        stats["words_replaced"] = stats.get("words_replaced", 0) + private.n_replaced
    return emb, clean if return_clean else None


def _output_width(model: torch.nn.Module) -> int:
    config = getattr(model, "config", None)
    return int(getattr(config, "hidden_size", 0) or 0)


def embed_task_texts(
    texts: Sequence[tuple[str, ...]], **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """Features for a task's examples (each a tuple of one or two sentences): every sentence is embedded by
    :func:`embed_texts` (``kwargs``) and a pair's two embeddings are concatenated (A.5.4).

    Returns ``(features [N, parts * out], clean features or None, per-sentence embeddings [N * parts, out],
    per-sentence clean embeddings or None)``; the per-sentence rows are the first sentences, then the second ones."""
    parts = {len(t) for t in texts}
    if len(parts) > 1:
        raise ValueError(f"every example must have the same number of sentences, got {sorted(parts)}")
    k = parts.pop() if parts else 1
    flat = [t[j] for j in range(k) for t in texts]
    emb, clean = embed_texts(flat, **kwargs)
    n = len(texts)

    def join(e: torch.Tensor | None) -> torch.Tensor | None:
        return None if e is None else torch.cat([e[j * n : (j + 1) * n] for j in range(k)], dim=1)

    return join(emb), join(clean), emb, clean


def similarity(embeddings: torch.Tensor, clean: torch.Tensor) -> dict[str, float]:
    """A.10: ``mse`` (mean over dimensions of the squared difference, then over rows) and ``cos`` (cosine, mean over
    rows) of ``embeddings`` to ``clean`` ([N, out] each)."""
    if embeddings.shape != clean.shape or embeddings.dim() != 2 or embeddings.shape[0] == 0:
        raise ValueError(f"similarity needs two equal, non-empty [N, d] shapes, got {tuple(embeddings.shape)} and "
                         f"{tuple(clean.shape)}")  # fmt: skip
    a, b = embeddings.double(), clean.double()
    cos = torch.nn.functional.cosine_similarity(a, b, dim=1, eps=1e-12)
    return {"mse": float(((a - b) ** 2).mean()), "cos": float(cos.mean())}


# ------------------------------------------------------------------------------------------------------ tasks
# ------------------------------------------------------------------------------------------------------ probe
@dataclass(frozen=True)
class ProbeConfig:
    """The downstream classifier's training (A.5.4 fixes only the architecture; the rest is this project's)."""

    epochs: int = 30
    lr: float = 1e-3
    weight_decay: float = 0.01
    batch_size: int = 64
    val_fraction: float = 0.1  # of the TRAINING split, for early stopping; none below 10 training examples
    patience: int = 5  # epochs without a lower validation loss before stopping


class Probe(torch.nn.Module):
    """Two fully connected layers with a ReLU between them, hidden width = input width (A.5.4), on features
    standardised with the training split's mean and standard deviation."""

    def __init__(self, dim: int, n_classes: int, mean: torch.Tensor, std: torch.Tensor):
        super().__init__()
        self.register_buffer("mean", mean.float())
        self.register_buffer("std", std.float())
        self.net = torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.ReLU(), torch.nn.Linear(dim, n_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x.float() - self.mean) / self.std)


def train_probe(
    features: torch.Tensor, labels: Sequence[int], *, generator: torch.Generator, config: ProbeConfig = ProbeConfig()
) -> Probe:
    """A :class:`Probe` trained with AdamW on ``features`` [N, d] and integer ``labels`` (0 .. C-1); the
    initialisation, the validation slice and the batch order come from ``generator``. Early stopping keeps the
    weights of the epoch with the lowest loss on the validation slice (a ``val_fraction`` of the training rows)."""
    x = torch.as_tensor(features).float().cpu()
    y = torch.as_tensor(list(labels), dtype=torch.long)
    if x.dim() != 2 or x.shape[0] != y.shape[0] or x.shape[0] < 2:
        raise ValueError(f"train_probe needs features [N >= 2, d] and N labels, got {tuple(x.shape)}, {len(y)}")
    if int(y.min()) < 0:
        raise ValueError("labels must be integers >= 0")
    n_classes = max(2, int(y.max()) + 1)
    perm = torch.randperm(x.shape[0], generator=generator)
    n_val = int(round(config.val_fraction * x.shape[0])) if x.shape[0] >= 10 else 0
    val, fit = perm[:n_val], perm[n_val:]
    mean, std = x[fit].mean(dim=0), x[fit].std(dim=0, unbiased=False).clamp_min(1e-6)
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # the layers' own initialisation reads the global generator
        probe = Probe(x.shape[1], n_classes, mean, std)
    opt = torch.optim.AdamW(probe.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    loss_fn = torch.nn.CrossEntropyLoss()
    best, best_state, waited = math.inf, None, 0
    for _ in range(config.epochs):
        probe.train()
        order = fit[torch.randperm(fit.shape[0], generator=generator)]
        for i in range(0, order.shape[0], config.batch_size):
            rows = order[i : i + config.batch_size]
            opt.zero_grad()
            loss_fn(probe(x[rows]), y[rows]).backward()
            opt.step()
        if n_val == 0:
            continue
        probe.eval()
        with torch.no_grad():
            val_loss = float(loss_fn(probe(x[val]), y[val]))
        if val_loss < best - 1e-6:
            best, best_state, waited = val_loss, copy.deepcopy(probe.state_dict()), 0
        else:
            waited += 1
            if waited >= config.patience:
                break
    if best_state is not None:
        probe.load_state_dict(best_state)
    return probe.eval()


@torch.no_grad()
def evaluate_probe(probe: Probe, features: torch.Tensor, labels: Sequence[int]) -> dict[str, float]:
    """``acc`` and (two classes) ``auc`` of ``probe`` on ``features`` [N, d] with ``labels``; AUC is NaN for more
    than two classes or a test set with one class only."""
    y = np.asarray(list(labels), dtype=np.int64)
    logits = probe(torch.as_tensor(features).float().cpu())
    if logits.shape[0] != y.shape[0] or y.shape[0] == 0:
        raise ValueError(f"evaluate_probe: {logits.shape[0]} rows and {y.shape[0]} labels")
    acc = float((logits.argmax(dim=1).numpy() == y).mean())
    auc = math.nan
    if logits.shape[1] == 2 and len(set(y.tolist())) == 2:
        auc = roc_auc(torch.softmax(logits.double(), dim=1)[:, 1].numpy(), y)
    return {"acc": acc, "auc": auc}


def roc_auc(scores: Any, labels: Any) -> float:
    """Area under the ROC curve of ``scores`` for 0/1 ``labels``: the probability that a random positive scores above
    a random negative, ties counting one half (Mann-Whitney U / (n_pos n_neg), with mid-ranks)."""
    from scipy.stats import rankdata

    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1)
    if s.shape != y.shape or not np.isfinite(s).all():
        raise ValueError(f"roc_auc needs finite scores and labels of one shape, got {s.shape} and {y.shape}")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("roc_auc: labels must be 0 or 1")
    n_pos, n_neg = int((y == 1).sum()), int((y == 0).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"roc_auc needs both classes, got {n_pos} positives and {n_neg} negatives")
    ranks = rankdata(s)  # average ranks for ties, 1-based
    return float((ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
