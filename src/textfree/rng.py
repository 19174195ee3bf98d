"""Randomness for privacy noise.

Every sampler in textfree takes an explicit ``torch.Generator``. Two ways to get one:

* :func:`secure_generator` (production): a fresh generator per call, seeded with 64 bits from the
  operating system's entropy source (``os.urandom``). Nothing global and nothing fixed.
* :func:`seeded_generator` (experiments and tests): reproducible; it warns once per process, the way
  Opacus warns when secure randomness is off, because a seed known to anyone makes the noise removable.

Honest caveats, stated here and in the docs:

* torch's CPU generator is a Mersenne Twister. Seeding it from the OS per call means no two releases share
  a stream, but the generator itself is not a cryptographically secure PRNG; an attacker who could observe
  many outputs of one stream could in principle predict it. We draw a fresh seed for every release so one
  stream never produces more than one payload.
* Floating-point noise is not the real-valued mechanism (Mironov 2012, "On significance of the least
  significant bits for differential privacy"): the set of representable outputs depends on the input, so the
  formal guarantee holds for the idealised real-valued mechanism only. We sample in float64 and release in
  float32, which removes the low-order bits most exposed by that attack, but we do not claim the snapping
  mechanism's guarantee.
"""

from __future__ import annotations

import os
import warnings

import torch

__all__ = ["secure_generator", "seeded_generator", "resolve_generator", "InsecureRandomnessWarning"]


class InsecureRandomnessWarning(UserWarning):
    """Raised when privacy noise is drawn from a user-seeded (reproducible) generator."""


_warned = False


def secure_generator(device: str | torch.device = "cpu") -> torch.Generator:
    """A new generator seeded from 64 bits of OS entropy. Use one per release."""
    seed = int.from_bytes(os.urandom(8), "little")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def seeded_generator(seed: int, device: str | torch.device = "cpu", *, warn: bool = True) -> torch.Generator:
    """A reproducible generator for experiments. Never use it for real users' data."""
    global _warned
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}: {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if warn and not _warned:
        warnings.warn(
            "privacy noise is drawn from a seeded generator: the noise is reproducible by anyone who knows the "
            "seed. Use this for experiments only; production releases use textfree.rng.secure_generator().",
            InsecureRandomnessWarning,
            stacklevel=2,
        )
        _warned = True
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def resolve_generator(generator: torch.Generator | None = None, seed: int | None = None) -> torch.Generator:
    """The generator a release should use: the one given, else a seeded one, else a fresh secure one."""
    if generator is not None and seed is not None:
        raise ValueError("pass either generator or seed, not both")
    if generator is not None:
        return generator
    if seed is not None:
        return seeded_generator(seed)
    return secure_generator()
