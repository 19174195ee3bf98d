"""Black-box word inversion of T2T / PCT2T text (RAPT IV-A1's MLP and autoencoder attacks, on a text release).

The attacker sees the released words. It represents each released word by its vector in the public embedding table
the mechanism substitutes over (``mechanism.table``), runs the public mechanism itself (same table, eta and
part-of-speech rule: ``knows_mechanism`` + ``knows_parameters``) over its own in-domain text (``training_text:
in_domain``), afresh every epoch, and trains on the (released word's vector, original word) pairs, the classes of
:mod:`.blackbox`:

* ``substitution_mlp``: :class:`~.blackbox.MLPTokenInverter`, released word's vector -> original word, a classifier
  over the ``vocab_size`` most frequent in-table words of the attacker's text (a word outside them is a miss);
* ``substitution_autoencoder``: :class:`~.blackbox.Denoiser`, released word's vector -> original word's vector,
  trained by mean squared error; its output is mapped to the nearest table word (cosine, as the Denoiser does).
  :func:`vector_mse` gives the MSE of its outputs against the original words' vectors beside that of the raw
  released vectors (what it removes).

A released word outside the table has no vector: the mechanism released it verbatim (``oov="keep"``), which the
attacker knows, so it is guessed as itself. Scores: :func:`~.substitution.aligned_word_recovery` of the guesses, as
for the other readers. :func:`~.blackbox.train_blackbox` does not fit here: it draws words context-free, while PCT2T's
candidates depend on each word's part of speech in context, so the pairs come from runs of the mechanism over whole
texts (:func:`released_rows`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .blackbox import Denoiser, MLPTokenInverter, public_vocab
from .substitution import SUBSTITUTION_CHANNEL_REQUIRES
from .threat import ThreatModel, check_grant, register_attack

__all__ = [
    "SUBSTITUTION_BLACKBOX_REQUIRES",
    "WORD_INVERTERS",
    "WordBlackBoxConfig",
    "released_rows",
    "train_word_inverter",
    "invert_words",
    "vector_mse",
    "substitution_mlp_attack",
    "substitution_autoencoder_attack",
]

#: The same threat as the channel inverter: in-domain text, the mechanism and its parameter.
SUBSTITUTION_BLACKBOX_REQUIRES = SUBSTITUTION_CHANNEL_REQUIRES
WORD_INVERTERS = ("mlp", "autoencoder")
_CHUNK = 1024  # released words inverted at once


@dataclass(frozen=True)
class WordBlackBoxConfig:
    """Training of the black-box word inverters: each epoch is one fresh run of the mechanism over the texts."""

    vocab_size: int = 4096  # the attacker's most frequent in-table words the MLP can output
    hidden: int = 256
    epochs: int = 8
    batch_size: int = 256
    lr: float = 2e-3

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden", "epochs", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"WordBlackBoxConfig.{name} must be an integer >= 1, got {v!r}")
        lr = self.lr
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not (lr > 0 and math.isfinite(lr)):
            raise ValueError(f"WordBlackBoxConfig.lr must be a finite number > 0, got {lr!r}")


def _rows(table: Any, words: Sequence[Sequence[str]]) -> torch.Tensor:
    """Table rows of every word, texts concatenated (-1 for a word outside the table; case folded)."""
    return table.lookup([w for text in words for w in text])


def released_rows(mechanism: Any, texts: Sequence[str], *, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """(released rows, original rows) of one run of ``mechanism`` over ``texts``: one table row per word, texts
    concatenated, -1 for a word outside the table (T2T keeps the word count, so the two align)."""
    from ..substitution.text import split_text

    if not isinstance(generator, torch.Generator):
        raise TypeError(f"released_rows: generator must be a torch.Generator, got {type(generator).__name__}")
    result = mechanism.privatize_detailed(list(texts), generator=generator)
    original = [split_text(t)[1::2] for t in texts]
    return _rows(mechanism.table, result.output_words), _rows(mechanism.table, original)


def _new_model(kind: str, table: Any, vocab: torch.Tensor, hidden: int, seed: int) -> MLPTokenInverter | Denoiser:
    vectors = table.vectors.to(torch.float32)
    with torch.random.fork_rng(devices=[]):  # seeded initialisation without touching the global generator
        torch.manual_seed(seed)
        if kind == "mlp":
            return MLPTokenInverter(table.dim, hidden, vocab)
        return Denoiser(table.dim, hidden, torch.arange(len(vectors)), vectors)


def _epoch_pairs(kind: str, released: torch.Tensor, original: torch.Tensor, classes: torch.Tensor):
    """(inputs: released rows, targets: class indices for the MLP, original rows for the autoencoder)."""
    keep = (released >= 0) & (original >= 0)
    released, original = released[keep], original[keep]
    if kind == "autoencoder":
        return released, original
    target = classes[original]
    return released[target >= 0], target[target >= 0]


def train_word_inverter(
    kind: str,
    mechanism: Any,
    texts: Sequence[str],
    config: WordBlackBoxConfig = WordBlackBoxConfig(),
    *,
    generator: torch.Generator,
) -> MLPTokenInverter | Denoiser:
    """Train ``kind`` ("mlp" or "autoencoder") on ``config.epochs`` fresh runs of ``mechanism`` over ``texts``."""
    if kind not in WORD_INVERTERS:
        raise ValueError(f"kind must be one of {list(WORD_INVERTERS)}, got {kind!r}")
    if not isinstance(config, WordBlackBoxConfig):
        raise TypeError(f"config must be a WordBlackBoxConfig, got {type(config).__name__}")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    table = mechanism.table
    from ..substitution.text import split_text

    original = _rows(table, [split_text(t)[1::2] for t in texts])
    vocab, _ = public_vocab(original[original >= 0], config.vocab_size)
    classes = torch.full((len(table),), -1, dtype=torch.int64)
    classes[vocab] = torch.arange(len(vocab))
    model = _new_model(kind, table, vocab, config.hidden, int(torch.randint(0, 2**62, (1,), generator=generator)))
    vectors = table.vectors.to(torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr)
    model.train()
    for _ in range(config.epochs):
        inputs, targets = _epoch_pairs(kind, *released_rows(mechanism, texts, generator=generator), classes)
        order = torch.randperm(len(inputs), generator=generator)
        for start in range(0, len(order), config.batch_size):
            idx = order[start : start + config.batch_size]
            out = model(vectors[inputs[idx]])
            if kind == "mlp":
                loss = torch.nn.functional.cross_entropy(out, targets[idx])
            else:
                loss = torch.nn.functional.mse_loss(out, vectors[targets[idx]])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    return model


def invert_words(
    model: MLPTokenInverter | Denoiser, table: Any, output_words: Sequence[Sequence[str]]
) -> list[list[str]]:
    """The model's guess of every released word (a table word); a word outside the table is kept as released."""
    rows = _rows(table, output_words)
    guess = list(w for text in output_words for w in text)
    inside = torch.nonzero(rows >= 0).flatten()
    for chunk in inside.split(_CHUNK):  # the autoencoder scores every table word: bounded memory
        for i, row in zip(chunk.tolist(), model.invert(table.vectors[rows[chunk]]).tolist()):
            guess[i] = table.words[row]
    out, start = [], 0
    for text in output_words:
        out.append(guess[start : start + len(text)])
        start += len(text)
    return out


def vector_mse(
    model: Denoiser, table: Any, original_words: Sequence[Sequence[str]], output_words: Sequence[Sequence[str]]
) -> tuple[float, float]:
    """(MSE of the denoised released vectors, MSE of the raw released vectors) against the original words' vectors,
    per coordinate, over the words whose released and original words are both in the table (NaN if none)."""
    released, original = _rows(table, output_words), _rows(table, original_words)
    if len(released) != len(original):
        raise ValueError(f"{len(original)} original words but {len(released)} released (T2T keeps the word count)")
    keep = (released >= 0) & (original >= 0)
    if not bool(keep.any()):
        return math.nan, math.nan
    vectors = table.vectors.to(torch.float32)
    noisy, clean = vectors[released[keep]], vectors[original[keep]]
    with torch.no_grad():
        denoised = model(noisy)
    mse = torch.nn.functional.mse_loss
    return float(mse(denoised, clean)), float(mse(noisy, clean))


@register_attack(
    "substitution_mlp",
    requires=SUBSTITUTION_BLACKBOX_REQUIRES,
    description="RAPT IV-A1 on text: an MLP from each released word's table vector to the original word",
)
def substitution_mlp_attack(
    output_words: Sequence[Sequence[str]], model: MLPTokenInverter, table: Any, *, threat: ThreatModel
) -> list[list[str]]:
    check_grant("substitution_mlp", SUBSTITUTION_BLACKBOX_REQUIRES, threat)
    return invert_words(model, table, output_words)


@register_attack(
    "substitution_autoencoder",
    requires=SUBSTITUTION_BLACKBOX_REQUIRES,
    description="RAPT IV-A1 on text: a denoiser of each released word's table vector, mapped to the nearest word",
)
def substitution_autoencoder_attack(
    output_words: Sequence[Sequence[str]], model: Denoiser, table: Any, *, threat: ThreatModel
) -> list[list[str]]:
    check_grant("substitution_autoencoder", SUBSTITUTION_BLACKBOX_REQUIRES, threat)
    return invert_words(model, table, output_words)
