"""Slot centring: spend a unit slot's norm on what tells prompts apart, at an unchanged per-slot guarantee.

MiniLM's pooled unit slots share a large common direction: on Pri-SLJA the mean unit slot has norm 0.63 and two
random slots have cosine 0.40, so two slots lie about 1.1 apart where unit vectors can lie 2 apart. The noise does
not care what the slots mean; a test between two slots at distance delta has power set by mu = eps * delta / sqrt(d)
(:mod:`textfree.mechanisms.gdp`). Subtracting a centre c and renormalising, ``unit(unit(v) - c)``, before the noise
moves typical slots apart (cosine ~0, distance ~1.4 with c the domain's mean slot) while every slot stays a unit
vector: the mechanism, its worst case 2*eps per slot and its worst-case mu are the same. The payload carries more of
what differs between prompts, for the server and for an attacker alike (the report measures both).

The centre must not itself leak a training prompt. :class:`PrivateMean` estimates it from the client's own prompts
with the Gaussian mechanism: each prompt contributes one vector of norm <= 1 (the mean of its unit slots), so
replacing one prompt moves the mean of n by at most 2 / n, and noise N(0, sigma^2 I) with sigma = 2 / (n mu) makes
the estimate mu-GDP with respect to any one prompt (Dong, Roth & Su 2019). The centre is then public: it ships with
the model, and every later use of it is post-processing.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

from .base import PrivacyLoss, check_positive, check_probability
from .gaussian import analytic_epsilon

__all__ = ["PrivateMean", "center_sha256", "center_slots", "check_center", "prompt_mean_slots"]

_NORM_SLACK = 1e-4  # float32 rounding of unit-slot means


def center_sha256(center: torch.Tensor) -> str:
    """sha256 of the centre as little-endian float32 bytes: how payload headers and model cards name it."""
    # a 2-D centre + subspace map hashes its rows in order (its bytes are longer than any centre of the same width)
    return hashlib.sha256(
        center.detach().to("cpu", torch.float32).contiguous().numpy().astype("<f4").tobytes()
    ).hexdigest()


def check_center(center: object, dim: int | None = None) -> torch.Tensor:
    """A client slot map is a finite float tensor: the centre [d], or the centre followed by the orthonormal rows of a
    public subspace [1 + m, d] with 1 <= m < d (:mod:`textfree.mechanisms.subspace`), of width ``dim`` when given;
    returns it as CPU float32."""
    if not isinstance(center, torch.Tensor) or center.dim() not in (1, 2) or not center.is_floating_point():
        raise ValueError(
            f"a slot centre must be a 1-D float tensor (or a 2-D centre + subspace map), got {center!r}"[:200]
        )
    width = center.shape[-1]
    if dim is not None and width != dim:
        raise ValueError(f"the slot centre has width {width}, the slots have width {dim}")
    if not torch.isfinite(center).all():
        raise ValueError("the slot centre has non-finite values")
    center = center.detach().to("cpu", torch.float32)
    if center.dim() == 2:
        from .subspace import check_basis

        check_basis(center[1:], width)  # its rows after the centre: 1 <= m < d orthonormal rows
    return center


def center_slots(unit_slots: torch.Tensor, center: torch.Tensor) -> torch.Tensor:
    """The centring map: ``unit(slot - center)`` for each unit slot [..., d] (the centre cast to the slots' device and
    dtype). Every output is a unit vector again (a slot equal to the centre maps to zero, norm <= 1 all the same).
    A 2-D map [1 + m, d] then projects the centred slot onto its subspace and renormalises:
    ``unit(B^T B unit(slot - c))`` (:func:`textfree.mechanisms.subspace.project_slots`)."""
    from .transforms import l2_normalize

    if center.shape[-1] != unit_slots.shape[-1]:
        raise ValueError(f"the slot centre has width {center.shape[-1]}, the slots have width {unit_slots.shape[-1]}")
    center = center.to(unit_slots.device, unit_slots.dtype)
    if center.dim() == 1:
        return l2_normalize(unit_slots - center)
    from .subspace import project_slots

    return project_slots(l2_normalize(unit_slots - center[0]), center[1:])


def prompt_mean_slots(slots: list[torch.Tensor]) -> torch.Tensor:
    """One vector per prompt: the mean of its unit slots [n_slots, d] (norm <= 1), stacked to [n_prompts, d]."""
    if not slots:
        raise ValueError("prompt_mean_slots needs at least one prompt")
    empty = [i for i, s in enumerate(slots) if s.dim() != 2 or s.shape[0] == 0]
    if empty:
        raise ValueError(f"prompt {empty[0]} has no slots (each prompt needs a [n_slots, d] tensor with n_slots >= 1)")
    return torch.stack([s.to(torch.float64).mean(dim=0) for s in slots])


@dataclass(frozen=True)
class PrivateMean:
    """The mean of n rows of norm <= 1, released with Gaussian noise so that it is ``mu``-GDP per row.

    ``sample(rows, *, generator)``: rows [n, d] -> mean + N(0, sigma^2 I), sigma = 2 / (n mu) (replace-one
    sensitivity 2 / n). ``privacy_loss(d_in)``: the (epsilon, ``delta``)-DP guarantee when ``d_in`` rows differ
    (group privacy: mu * d_in), by the exact Gaussian conversion.
    """

    mu: float
    delta: float = 1e-6

    def __post_init__(self) -> None:
        check_positive("PrivateMean", "mu", self.mu)
        check_probability(
            "PrivateMean", "delta", self.delta
        )  # 0 < delta < 1: a Gaussian release has no pure-DP guarantee

    def sigma(self, n: int) -> float:
        """The per-coordinate noise scale for a mean of ``n`` rows."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"PrivateMean: n must be an integer >= 1, got {n!r}")
        return 2.0 / (n * self.mu)

    def sample(self, rows: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        if generator is None:
            raise ValueError("PrivateMean.sample needs a generator (use textfree.rng.secure_generator())")
        if rows.dim() != 2 or rows.shape[0] < 1:
            raise ValueError(f"PrivateMean.sample takes rows [n, d] with n >= 1, got shape {tuple(rows.shape)}")
        norms = rows.to(torch.float64).norm(dim=-1)
        if not torch.isfinite(norms).all() or float(norms.max()) > 1.0 + _NORM_SLACK:
            raise ValueError(
                "PrivateMean.sample: every row must have norm <= 1 (its sensitivity assumes it), got "
                f"{float(norms.max()):.6g}"
            )
        n, d = rows.shape
        noise = torch.randn(d, generator=generator, dtype=torch.float64, device=generator.device) * self.sigma(n)
        return rows.to(torch.float64).mean(dim=0) + noise.to(rows.device)

    def privacy_loss(self, d_in: float = 1) -> PrivacyLoss:
        """(epsilon, delta)-DP for ``d_in`` differing rows: a mu*d_in-GDP release is the Gaussian mechanism with
        sensitivity/sigma = mu * d_in, whose exact epsilon at ``delta`` is :func:`analytic_epsilon`."""
        if isinstance(d_in, bool) or not isinstance(d_in, (int, float)) or not d_in >= 0 or math.isinf(d_in):
            raise ValueError(f"PrivateMean.privacy_loss: d_in must be a finite number >= 0, got {d_in!r}")
        if d_in == 0:
            return PrivacyLoss(0.0, 0.0, "approx")
        return PrivacyLoss(analytic_epsilon(1.0, self.delta, self.mu * d_in), self.delta, "approx")
