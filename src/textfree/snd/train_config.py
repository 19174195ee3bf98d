"""The settings of a denoiser training run (:class:`DenoiserTrainConfig`), saved as JSON beside the run.

Plain Python, no torch: ``textfree snd train`` (and a cell) builds and checks the config before the heavy imports of
:mod:`.train`, which trains with it and re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..training.config import LoopConfig, _check_int, _check_optional_int
from .corpus import CORPUS_SOURCES, PUBLIC_SOURCES
from .noise import check_eta

if TYPE_CHECKING:
    from .denoiser import DenoiserConfig

__all__ = ["DenoiserTrainConfig"]


@dataclass(kw_only=True)
class DenoiserTrainConfig(LoopConfig):
    """A denoiser training run: the loop's settings, the encoder, the noise levels, the corpus and the denoiser."""

    batch_size: int = field(default=32, metadata={"help": "Texts per optimizer step and process."})
    lr: float = field(default=3e-4, metadata={"help": "Peak learning rate of the denoiser (AdamW)."})
    warmup_steps: int = field(default=50, metadata={"help": "Linear warm-up steps."})
    encoder: str = field(
        default="default",
        metadata={"help": "The served encoder G: 'default' (all-MiniLM-L6-v2, offline) or an HF name/path."},
    )
    etas: list[float] = field(
        default_factory=lambda: [50.0, 100.0, 500.0],
        metadata={"help": "Noise levels (d_chi eta); every training row draws one, the denoiser reads log eta."},
    )
    max_tokens: int = field(default=64, metadata={"help": "Cut every text to this many tokens (special ones too)."})
    sources: list[str] = field(
        default_factory=lambda: list(CORPUS_SOURCES),
        metadata={"help": f"Public corpus sources, a subset of {', '.join(PUBLIC_SOURCES)}."},
    )
    limit_per_source: int | None = field(
        default=5000, metadata={"help": "A seeded sample of at most this many texts per source (null: all)."}
    )
    val_size: int = field(default=256, metadata={"help": "Held-out validation texts (seeded)."})
    noise_seed: int | None = field(
        default=None, metadata={"help": "Seeds the training and validation noise (null: seed)."}
    )
    d_model: int | None = field(
        default=None, metadata={"help": "Denoiser width (Table 8's d_model; null: the encoder's width)."}
    )
    d_ff: int | None = field(
        default=None, metadata={"help": "Denoiser feed-forward width (Table 8's d_ff; null: the encoder's width)."}
    )
    d_kv: int = field(default=240, metadata={"help": "Width of each attention head (Table 8's d_kv)."})
    n_head: int = field(default=6, metadata={"help": "Attention heads (Table 8's n_head)."})
    n_layers: int = field(default=3, metadata={"help": "Denoiser blocks (Table 8's L; DistilBERT's row: 3)."})
    dropout: float = field(default=0.0, metadata={"help": "Dropout in the denoiser."})
    use_noise: bool = field(default=True, metadata={"help": "The denoiser reads the noise Z (False: ablation)."})
    use_tokens: bool = field(
        default=True, metadata={"help": "The denoiser reads the noisy tokens X~ (False: ablation)."}
    )
    clip: bool = field(
        default=True, metadata={"help": "Clip noisy token embeddings to the largest clean norm C (SnD eq. 3)."}
    )
    init: str | None = field(
        default=None,
        metadata={
            "help": "A denoiser run (directory with denoiser.safetensors) to continue training from, e.g. for an "
            "updated encoder (SnD 4.4.4); its architecture replaces d_model .. use_tokens. Null: a fresh denoiser."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.encoder, str) or not self.encoder.strip():
            raise ValueError(f"encoder must be a model name or path, got {self.encoder!r}")
        if isinstance(self.etas, (str, bytes)) or not isinstance(self.etas, (list, tuple)) or not self.etas:
            raise ValueError(f"etas must be a non-empty list of numbers > 0, got {self.etas!r}")
        self.etas = [check_eta(e, "every entry of etas") for e in self.etas]
        if len(set(self.etas)) != len(self.etas):
            raise ValueError(f"etas must be distinct, got {self.etas}")
        _check_int("max_tokens", self.max_tokens, 2)
        if isinstance(self.sources, str) or not isinstance(self.sources, (list, tuple)) or not self.sources:
            raise ValueError(f"sources must be a non-empty list of {', '.join(PUBLIC_SOURCES)}, got {self.sources!r}")
        if bad := [s for s in self.sources if s not in PUBLIC_SOURCES]:
            raise ValueError(f"sources {bad} refused: a denoiser trains on {', '.join(PUBLIC_SOURCES)} only")
        self.sources = list(self.sources)
        _check_optional_int("limit_per_source", self.limit_per_source, 1)
        _check_int("val_size", self.val_size, 1)
        _check_optional_int("noise_seed", self.noise_seed, 0)
        _check_int("seed", self.seed, 0)
        _check_optional_int("d_model", self.d_model, 1)
        _check_optional_int("d_ff", self.d_ff, 1)
        for name in ("d_kv", "n_head", "n_layers"):
            _check_int(name, getattr(self, name), 1)
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be a number in [0, 1), got {self.dropout!r}")
        for name in ("use_noise", "use_tokens", "clip"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.init is not None and (not isinstance(self.init, str) or not self.init.strip()):
            raise ValueError(f"init must be the path of a denoiser run or null, got {self.init!r}")

    @property
    def effective_noise_seed(self) -> int:
        return self.seed if self.noise_seed is None else self.noise_seed

    def denoiser_config(self, token_dim: int, output_dim: int, **card: Any) -> DenoiserConfig:
        """The denoiser's config for an encoder of these widths (Table 8's DistilBERT row at the encoder's width)."""
        from .denoiser import DenoiserConfig

        return DenoiserConfig(
            token_dim=token_dim,
            output_dim=output_dim,
            d_model=self.d_model or output_dim,
            d_ff=self.d_ff or output_dim,
            d_kv=self.d_kv,
            n_head=self.n_head,
            n_layers=self.n_layers,
            dropout=float(self.dropout),
            max_tokens=self.max_tokens,
            use_tokens=self.use_tokens,
            use_noise=self.use_noise,
            eta_input=True,
            eta_min=min(self.etas),
            eta_max=max(self.etas),
            clip=self.clip,
            **card,
        )
