"""Black-box token inversion (RAPT IV-A1): an MLP token classifier and a denoising autoencoder, both noise-aware.

The attacker has no embedding table. It queries the client's embedding layer on public text (``encoder_queries``:
the clean vector of each public token it submits), runs the public mechanism on those vectors itself
(``knows_mechanism`` + ``knows_parameters``), and trains on the pairs, fresh noise every epoch:

* :class:`MLPTokenInverter`: noisy vector -> token id, a 2-hidden-layer MLP over the ``vocab_size`` most frequent
  public tokens (a token outside them cannot be recovered and counts as a miss);
* :class:`Denoiser` (the autoencoder): noisy vector -> clean vector, trained by mean squared error; its output is
  mapped to the nearest queried vector (cosine). ``mse`` of the denoised vectors against the clean ones is reported
  beside the raw noisy vectors' (what the autoencoder removes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .threat import ThreatModel, check_grant, register_attack

__all__ = [
    "BLACKBOX_REQUIRES",
    "BlackBoxConfig",
    "MLPTokenInverter",
    "Denoiser",
    "public_vocab",
    "train_blackbox",
    "blackbox_attack",
    "BlackBoxResult",
]

BLACKBOX_REQUIRES = ThreatModel(
    encoder_queries=True, training_text="public", knows_mechanism=True, knows_parameters=True
)


@dataclass(frozen=True)
class BlackBoxConfig:
    """Training of the black-box inverters."""

    vocab_size: int = 4096  # the most frequent public tokens the MLP can output (and the autoencoder maps onto)
    samples: int = 50_000  # public token occurrences per epoch (drawn with their frequencies)
    hidden: int = 256
    epochs: int = 4
    batch_size: int = 256
    lr: float = 2e-3

    def __post_init__(self) -> None:
        for name in ("vocab_size", "samples", "hidden", "epochs", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"BlackBoxConfig.{name} must be an integer >= 1, got {v!r}")
        if (
            isinstance(self.lr, bool)
            or not isinstance(self.lr, (int, float))
            or not (self.lr > 0 and math.isfinite(self.lr))
        ):
            raise ValueError(f"BlackBoxConfig.lr must be a finite number > 0, got {self.lr!r}")


def _mlp(d_in: int, hidden: int, d_out: int) -> torch.nn.Sequential:
    return torch.nn.Sequential(
        torch.nn.Linear(d_in, hidden),
        torch.nn.GELU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.GELU(),
        torch.nn.Linear(hidden, d_out),
    )


class MLPTokenInverter(torch.nn.Module):
    def __init__(self, dim: int, hidden: int, vocab: torch.Tensor):
        super().__init__()
        self.register_buffer("vocab", vocab.clone())
        self.net = _mlp(dim, hidden, len(vocab))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    @torch.no_grad()
    def invert(self, noisy: torch.Tensor) -> torch.Tensor:
        return self.vocab[self(noisy.to(torch.float32)).argmax(-1)]


class Denoiser(torch.nn.Module):
    def __init__(self, dim: int, hidden: int, vocab: torch.Tensor, queried: torch.Tensor):
        super().__init__()
        self.register_buffer("vocab", vocab.clone())
        self.register_buffer("queried", torch.nn.functional.normalize(queried.to(torch.float32), dim=-1))
        self.net = _mlp(dim, hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.net(x)  # predicts the correction: starts as the identity

    @torch.no_grad()
    def invert(self, noisy: torch.Tensor) -> torch.Tensor:
        out = torch.nn.functional.normalize(self(noisy.to(torch.float32)), dim=-1)
        return self.vocab[(out @ self.queried.T).argmax(-1)]


def public_vocab(
    public_ids: torch.Tensor, vocab_size: int, excluded: Sequence[int] = ()
) -> tuple[torch.Tensor, torch.Tensor]:
    """(vocab: the ``vocab_size`` most frequent public token ids, most frequent first; their frequencies)."""
    ids = public_ids.flatten().to(torch.int64)
    if ids.numel() == 0:
        raise ValueError("no public tokens to train on")
    counts = torch.bincount(ids)
    excluded = torch.as_tensor(list(excluded), dtype=torch.int64)
    counts[excluded[excluded < len(counts)]] = 0  # an excluded id beyond the counted ones never occurred
    order = torch.argsort(counts, descending=True, stable=True)
    vocab = order[: min(vocab_size, int((counts > 0).sum()))]
    return vocab, counts[vocab].to(torch.float64)


def train_blackbox(
    kind: str,
    clean_of: Any,
    vocab: torch.Tensor,
    freq: torch.Tensor,
    mechanism: Any,
    config: BlackBoxConfig,
    *,
    generator: torch.Generator,
) -> MLPTokenInverter | Denoiser:
    """Train ``kind`` ("mlp" or "autoencoder") on queried public tokens noised by ``mechanism``.

    ``clean_of(ids) -> [n, d]`` is the attacker's query access (the clean vectors of the tokens it submits)."""
    if kind not in ("mlp", "autoencoder"):
        raise ValueError(f"kind must be 'mlp' or 'autoencoder', got {kind!r}")
    # Its own few lines of loop rather than textfree.training.fit: it trains in memory in seconds, writes no run
    # directory or checkpoint, and draws its batches and noise from one generator in the order every committed
    # attack figure was made with (fit's seeded data order would redraw them all).
    queried = clean_of(vocab).to(torch.float32)
    torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
    model = (
        MLPTokenInverter(queried.shape[1], config.hidden, vocab)
        if kind == "mlp"
        else Denoiser(queried.shape[1], config.hidden, vocab, queried)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr)
    model.train()
    for _ in range(config.epochs):
        rows = torch.multinomial(freq, config.samples, replacement=True, generator=generator)
        noisy = mechanism.sample(queried[rows].to(torch.float64), generator=generator).to(torch.float32)
        for start in range(0, config.samples, config.batch_size):
            idx = slice(start, start + config.batch_size)
            if kind == "mlp":
                loss = torch.nn.functional.cross_entropy(model(noisy[idx]), rows[idx])
            else:
                loss = torch.nn.functional.mse_loss(model(noisy[idx]), queried[rows[idx]])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    return model


@dataclass
class BlackBoxResult:
    ids: torch.Tensor  # guessed token ids, one per noisy vector
    mse: float | None  # autoencoder: mean squared error of the denoised vectors against the clean ones
    noisy_mse: float | None  # the same for the raw noisy vectors


@register_attack(
    "blackbox",
    requires=BLACKBOX_REQUIRES,
    description="RAPT IV-A1: noise-aware MLP token classifier / denoising autoencoder from encoder queries",
)
def blackbox_attack(
    model: MLPTokenInverter | Denoiser, noisy: torch.Tensor, *, threat: ThreatModel, clean: torch.Tensor | None = None
) -> BlackBoxResult:
    """Invert ``noisy`` [n, d]; with ``clean`` (scoring only) also the MSE figures of the autoencoder."""
    check_grant("blackbox", BLACKBOX_REQUIRES, threat)
    ids = model.invert(noisy)
    mse = noisy_mse = None
    if clean is not None and isinstance(model, Denoiser):
        with torch.no_grad():
            mse = float(torch.nn.functional.mse_loss(model(noisy.to(torch.float32)), clean.to(torch.float32)))
        noisy_mse = float(torch.nn.functional.mse_loss(noisy.to(torch.float32), clean.to(torch.float32)))
    return BlackBoxResult(ids, mse, noisy_mse)
