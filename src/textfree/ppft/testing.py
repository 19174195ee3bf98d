"""Tiny PPFT runs to serve: for tests, demos and benchmarks (seconds on a CPU, random weights).

* :func:`make_tiny_run` writes a loadable PPFT run directory with a tiny random decoder;
  :func:`make_demo_run` also makes its tiny encoder (benchmarks, the load test).

Importing this module registers the served system ``"ppft"`` (:mod:`textfree.ppft.service`), so an app built from
these runs can load them.
"""

from __future__ import annotations

from pathlib import Path

from . import service as _service  # noqa: F401  (registers "ppft" with the server)

__all__ = ["RUN_SIZES", "make_demo_run", "make_tiny_run"]

# decoder shapes of make_demo_run: "small" is the shape of the locally pretrained decoder (docs/decoder.md)
RUN_SIZES = {
    "tiny": {"hidden": 32, "layers": 2, "heads": 2},
    "small": {"hidden": 256, "layers": 6, "heads": 4, "intermediate": 688},
}


def make_tiny_run(out_dir, encoder_dir, *, k: int = 4, epsilon: float | None = 75.0, seed: int = 0, **decoder) -> Path:
    """A PPFT run directory (``out_dir/run``) of ``encoder_dir`` + a tiny random Llama decoder (``out_dir/decoder``;
    ``decoder`` overrides its shape: hidden, layers, heads, intermediate, as ``make_tiny_decoder_dir`` takes them).

    Untrained: its card states ``epsilon`` (default 75) and stage ``stage2`` as if it had been adapted, so a client
    has a default epsilon. For tests, demos and benchmarks only."""
    from ..lm.loading import make_tiny_decoder_dir
    from .model import TextFreeLM

    out = Path(out_dir)
    decoder = make_tiny_decoder_dir(out / "decoder", **{"hidden": 32, "layers": 2, "heads": 2, **decoder}, seed=seed)
    lm = TextFreeLM.build(decoder, encoder=encoder_dir, k=k, seed=seed)
    lm.server.config = lm.config.replace(epsilon=epsilon, stage="stage2")
    return lm.save(out / "run")


def make_demo_run(out_dir, size: str = "tiny", *, seed: int = 0) -> Path:
    """A tiny random encoder (``out_dir/encoder``) and a run of it with a random decoder of ``RUN_SIZES[size]``."""
    from ..encoders import make_tiny_encoder_dir

    if size not in RUN_SIZES:
        raise ValueError(f"size must be one of {sorted(RUN_SIZES)}, got {size!r}")
    encoder = make_tiny_encoder_dir(Path(out_dir) / "encoder", hidden=32, layers=2, heads=2, seed=seed)
    return make_tiny_run(out_dir, encoder, seed=seed, **RUN_SIZES[size])
