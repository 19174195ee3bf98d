"""BeamClean (Kale et al. 2025, "BeamClean: Language Aware Embedding Reconstruction"): beam search over the
vocabulary with a surrogate noise model re-estimated as decoding proceeds, and a language-model prior.

At step t each beam b (a token path w_1..w_{t-1}) is extended by a candidate w scored by

    score(b, w) = score(b) + log pi_theta(y_t | x(w)) + lambda * log p(w | w_1..w_{t-1}),

where y_t is the observed noisy embedding, x(w) the clean table row of w, pi_theta the surrogate noise density
(:class:`~textfree.attacks.surrogate.SurrogateNoise`) and p the prior (:mod:`textfree.attacks.priors`;
``lambda = prior_weight``, 1 in the
paper). The B best extensions survive. Candidates are the M tokens with the highest noise likelihood for y_t
(the same list for every beam: the noise term does not depend on the beam), found by a chunked pass over the
vocabulary (:func:`textfree.attacks.nearest.vocab_topk`); their statistics are then recomputed exactly in float64.

Re-estimation (our reading of Algorithm 1, with closed forms instead of gradient steps): after step t, theta
maximises the marginal likelihood of y_1..y_t over the current beams,

    L(theta) = log sum_b exp(lambda * log p(path_b)) * prod_{s<=t} pi_theta(y_s | x(w_{b,s})),

by ``em_iters`` EM iterations warm-started from the previous theta: the E-step computes the beams' posterior
weights gamma_b (softmax of the beam scores under the current theta), the M-step the weighted closed-form MLE
given the residuals r_{b,s} = y_s - x(w_{b,s}) - mu:

* Gaussian:   sigma^2 = sum_b gamma_b sum_s ||r_{b,s}||^2 / (t d)
* L1-Laplace: b       = sum_b gamma_b sum_s ||r_{b,s}||_1 / (t d)
* L2-Laplace: s       = sum_b gamma_b sum_s ||r_{b,s}||_2 / (t d)   (radius ~ Gamma(d, s), so E||r|| = d s)

* von Mises-Fisher (``"vmf"``, direction only): the observation's direction y/||y|| around the candidate's
  direction x/||x|| with concentration kappa (``scale`` = 1/kappa); the statistic is ||y^ - x^||^2 = 2 - 2 cos, so
  the weighted mean cosine R is its sufficient statistic and kappa solves A_d(kappa) = R, A_d = I_{d/2} / I_{d/2-1}
  (Banerjee et al. 2005's closed-form start, then Newton steps). The norm of y is ignored: that is the point
  against clipping (SnD), which maps every noisy vector onto the sphere of radius C, so an L2 surrogate reads
  its norm as noise and nearest neighbour by L2 collapses, while the direction still carries the token.

With ``estimate_mean`` the mean mu is first set to the weighted mean residual (the exact MLE for the Gaussian,
a moment estimate for the Laplace families), then the scale given mu. Every beam's score is recomputed under
the new theta. Scales are floored at ``min_scale`` (a noiseless payload would otherwise drive them to 0).
Before step 1 theta starts from ``init`` or, by default, from the nearest-neighbour residuals of the whole
observed sequence (the attacker has all of it; an underestimate when the noise is large).

Oracle noise (``noise="oracle"``) fixes theta to the mechanism's true parameter and never re-estimates; it needs
``knows_parameters`` in the threat model, and the result says ``noise_knowledge="oracle"``. BeamClean's public
sweeps decode that way by default; we never do it silently.

Cost per step: one chunked pass over the vocabulary (V x d, or batched over all positions when mu is fixed),
B prefixes through the prior, B x M candidate scores, and O(B t d) for the re-estimation.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import torch

from ..metrics.basic import token_recovery_rate
from .nearest import excluded_mask, vocab_topk
from .priors import TokenPrior
from .surrogate import (  # re-exported: the surrogate noise model is part of BeamClean's API
    FAMILIES,
    SurrogateNoise,
    _statistic,
    family_of,
    log_bessel_iv,
    oracle_noise,
    vmf_kappa,
    vmf_log_normalizer,
)
from .threat import ThreatModel, check_grant, register_attack, resolve_noise_knowledge

__all__ = [
    "FAMILIES",
    "BEAMCLEAN_REQUIRES",
    "SurrogateNoise",
    "BeamCleanConfig",
    "DecodedSequence",
    "BeamCleanResult",
    "oracle_noise",
    "log_bessel_iv",
    "vmf_kappa",
    "vmf_log_normalizer",
    "family_of",
    "beamclean_requirements",
    "candidate_pool",
    "beamclean_decode",
    "beamclean_attack",
]

#: Base requirement: the payload and the embedding table (more with a trained prior, ``family="auto"`` or oracle noise).
BEAMCLEAN_REQUIRES = ThreatModel(embedding_table=True)


def _check_int(owner: str, name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{owner}: {name} must be an int >= {low}, got {value!r}")


@dataclass(frozen=True)
class BeamCleanConfig:
    """Search settings. ``candidates`` (M) >= ``beam_width`` (B) is not required but usual."""

    beam_width: int = 10
    candidates: int = 64
    chunk_size: int = 8192
    em_iters: int = 3
    estimate_mean: bool = False
    prior_weight: float = 1.0
    min_scale: float = 1e-8
    excluded_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name, low in (("beam_width", 1), ("candidates", 1), ("chunk_size", 1), ("em_iters", 1)):
            _check_int("BeamCleanConfig", name, getattr(self, name), low)
        if not isinstance(self.estimate_mean, bool):
            raise ValueError(f"BeamCleanConfig: estimate_mean must be true or false, got {self.estimate_mean!r}")
        for name in ("prior_weight", "min_scale"):
            value = getattr(self, name)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            if not ok or value < 0 or (name == "min_scale" and value == 0):
                raise ValueError(
                    f"BeamCleanConfig: {name} must be a finite number {'>' if name == 'min_scale' else '>='} 0, got "
                    f"{value!r}"
                )
        object.__setattr__(self, "excluded_ids", tuple(int(i) for i in self.excluded_ids))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "excluded_ids": list(self.excluded_ids)}


def candidate_pool(
    queries: torch.Tensor,
    table: torch.Tensor,
    family: str,
    m: int,
    *,
    chunk_size: int = 8192,
    excluded: torch.Tensor | None = None,
    table_sqnorm: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``m`` rows of ``table`` nearest each query under the family's distance, and that exact statistic.

    ``queries`` [n, d] are the observations minus the noise mean. Selection is a float32 pass over the vocabulary in
    chunks (L2: ||x||^2 - 2 q.x, one matmul per chunk; L1: cdist); the returned statistics [n, m] (squared L2,
    L1 or L2 distance) are recomputed in float64 by direct differences. Returns (ids [n, m], stats [n, m]).
    """
    q32 = queries.to(torch.float32)
    if family == "l1_laplace":
        score = lambda q, block, rows: -torch.cdist(q, block, p=1.0)  # noqa: E731
    else:
        sq = table.to(torch.float32).square().sum(dim=1) if table_sqnorm is None else table_sqnorm
        score = lambda q, block, rows: torch.addmm(sq[rows], q, block.T, alpha=-2.0).neg_()  # noqa: E731

    _, ids = vocab_topk(q32, table.to(torch.float32), m, score, chunk_size=chunk_size, excluded=excluded)
    residual = queries.to(torch.float64)[:, None, :] - table.to(torch.float64)[ids]
    return ids, _statistic(family, residual)


@dataclass
class DecodedSequence:
    """One decoded sequence: the best path, its score, and the noise estimate after each step."""

    ids: torch.Tensor
    score: float
    noise: SurrogateNoise
    scale_history: list[float] = field(default_factory=list)


def beamclean_decode(
    noisy: torch.Tensor,
    table: torch.Tensor,
    prior: TokenPrior,
    family: str,
    config: BeamCleanConfig = BeamCleanConfig(),
    *,
    fixed_noise: SurrogateNoise | None = None,
    init: SurrogateNoise | None = None,
) -> DecodedSequence:
    """Decode one sequence ``noisy`` [T, d] against ``table`` [V, d] (no threat-model check: see
    :func:`beamclean_attack`).

    ``fixed_noise``: decode with this noise model and never re-estimate (oracle mode). Otherwise theta starts from
    ``init`` (or the nearest-neighbour residuals of ``noisy``) and is re-estimated after every step.
    """
    if family not in FAMILIES:
        raise ValueError(f"beamclean_decode: family must be one of {FAMILIES}, got {family!r}")
    if noisy.dim() != 2 or table.dim() != 2 or noisy.shape[1] != table.shape[1]:
        raise ValueError(
            f"beamclean_decode: need noisy [T, d] and table [V, d], got {tuple(noisy.shape)} and {tuple(table.shape)}"
        )
    if prior.vocab_size != table.shape[0]:
        raise ValueError(f"beamclean_decode: the prior has {prior.vocab_size} tokens, the table {table.shape[0]}")
    for given in (fixed_noise, init):
        if given is not None and given.family != family:
            raise ValueError(f"beamclean_decode: noise family {given.family!r} does not match family {family!r}")
    t_len, d = noisy.shape
    v = table.shape[0]
    excluded = excluded_mask(config.excluded_ids, v)
    m = min(config.candidates, v - (int(excluded.sum()) if excluded is not None else 0))
    y = noisy.detach().cpu().to(torch.float64)
    table64 = table.detach().cpu().to(torch.float64)
    if family == "vmf":  # directions only: unit observations and rows (a zero row stays zero, far from every y^)
        if config.estimate_mean:
            raise ValueError("beamclean_decode: estimate_mean does not apply to the vmf family")
        y, table64 = _unit_rows(y), _unit_rows(table64)
    table32 = table64.to(torch.float32)
    sqnorm = table32.square().sum(dim=1)
    if t_len == 0:
        return DecodedSequence(
            torch.empty(0, dtype=torch.int64), 0.0, fixed_noise or init or SurrogateNoise(family, 1.0)
        )

    def pool(rows: torch.Tensor, mean: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        q = rows if mean is None else rows - mean
        return candidate_pool(
            q, table32, family, m, chunk_size=config.chunk_size, excluded=excluded, table_sqnorm=sqnorm
        )

    estimating = fixed_noise is None
    if fixed_noise is not None:
        noise = fixed_noise
    elif init is not None:
        noise = init
    else:
        nn_ids, _ = pool(y, None)
        noise = SurrogateNoise.fit(family, (y - table64[nn_ids[:, 0]])[None], min_scale=config.min_scale)
    mean_moves = estimating and config.estimate_mean
    all_ids, all_stats = (None, None) if mean_moves else pool(y, noise.mean)

    paths = torch.empty(1, 0, dtype=torch.int64)
    residuals = torch.empty(1, 0, d, dtype=torch.float64)
    prior_total = torch.zeros(1, dtype=torch.float64)
    noise_total = torch.zeros(1, dtype=torch.float64)
    history: list[float] = []
    lam = float(config.prior_weight)
    for t in range(t_len):
        if mean_moves:
            cand, stats = pool(y[t : t + 1], noise.mean)
            cand, stats = cand[0], stats[0]
        else:
            cand, stats = all_ids[t], all_stats[t]
        noise_ll = noise.log_prob_from_statistic(stats, d)  # [M]
        prior_lp = (
            prior.log_probs(paths.tolist())[:, cand] if lam else torch.zeros(len(paths), len(cand), dtype=torch.float64)
        )
        scores = (prior_total + noise_total)[:, None] + noise_ll[None, :] + lam * prior_lp
        top = scores.flatten().topk(min(config.beam_width, scores.numel()))
        b_idx, c_idx = top.indices // len(cand), top.indices % len(cand)
        new_tok = cand[c_idx]
        paths = torch.cat([paths[b_idx], new_tok[:, None]], dim=1)
        residuals = torch.cat([residuals[b_idx], (y[t] - table64[new_tok])[:, None, :]], dim=1)
        prior_total = prior_total[b_idx] + lam * prior_lp[b_idx, c_idx]
        if estimating:
            for _ in range(config.em_iters):
                path_ll = noise.log_prob(residuals).sum(dim=1)
                weights = torch.softmax(prior_total + path_ll, dim=0)
                noise = SurrogateNoise.fit(
                    family,
                    residuals,
                    weights,
                    estimate_mean=config.estimate_mean,
                    mean=noise.mean,
                    min_scale=config.min_scale,
                )
            noise_total = noise.log_prob(residuals).sum(dim=1)
        else:
            noise_total = noise_total[b_idx] + noise_ll[c_idx]
        history.append(noise.scale)
    best = int(torch.argmax(prior_total + noise_total))
    return DecodedSequence(paths[best].clone(), float(prior_total[best] + noise_total[best]), noise, history)


def _unit_rows(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)


def beamclean_requirements(prior: TokenPrior, *, noise: str = "estimated", family: str = "auto") -> ThreatModel:
    """What a BeamClean run needs: the table; the prior's training text; the mechanism for ``family="auto"``;
    its parameters for ``noise="oracle"``."""
    req = BEAMCLEAN_REQUIRES.union(ThreatModel(training_text=getattr(prior, "training_text", None)))
    if family == "auto" or noise == "oracle":
        req = req.union(ThreatModel(knows_mechanism=True, knows_parameters=noise == "oracle"))
    return req


@dataclass(frozen=True)
class BeamCleanResult:
    """Decoded ids per sequence, the noise each ended with, and how the noise was known (``noise_knowledge``)."""

    ids: list[torch.Tensor]
    noise: list[SurrogateNoise]
    scale_history: list[list[float]]
    noise_knowledge: str
    family: str
    recovery: float | None
    threat: dict[str, Any]
    requires: dict[str, Any]
    config: dict[str, Any]
    attack: str = "beamclean"

    def to_dict(self) -> dict[str, Any]:
        """The numbers, as plain data (ids and per-step histories left out)."""
        scales = [n.scale for n in self.noise]
        return {
            "attack": self.attack,
            "noise_knowledge": self.noise_knowledge,
            "family": self.family,
            "recovery": self.recovery,
            "final_scale_mean": sum(scales) / len(scales) if scales else None,
            "threat": self.threat,
            "requires": self.requires,
            "config": self.config,
        }


def _as_sequences(noisy: torch.Tensor | Sequence[torch.Tensor], mask: torch.Tensor | None) -> list[torch.Tensor]:
    if isinstance(noisy, torch.Tensor):
        if noisy.dim() == 2:
            if mask is not None:
                raise ValueError("a mask goes with a batch [N, T, d], not a single sequence [T, d]")
            return [noisy]
        if noisy.dim() != 3:
            raise ValueError(f"noisy must be [T, d], [N, T, d] or a list of [T_i, d], got {tuple(noisy.shape)}")
        if mask is None:
            return list(noisy)
        if mask.shape != noisy.shape[:2]:
            raise ValueError(f"mask must be {tuple(noisy.shape[:2])}, got {tuple(mask.shape)}")
        return [row[m.bool()] for row, m in zip(noisy, mask)]
    if mask is not None:
        raise ValueError("a mask goes with a batch tensor [N, T, d], not a list of sequences")
    return list(noisy)


@register_attack(
    "beamclean",
    requires=BEAMCLEAN_REQUIRES,
    description="beam search with re-estimated surrogate noise and an LM prior",
)
def beamclean_attack(
    noisy: torch.Tensor | Sequence[torch.Tensor],
    table: torch.Tensor,
    prior: TokenPrior,
    *,
    threat: ThreatModel,
    noise: str = "estimated",
    family: str = "auto",
    mechanism: Any = None,
    config: BeamCleanConfig = BeamCleanConfig(),
    mask: torch.Tensor | None = None,
    true_ids: torch.Tensor | Sequence[torch.Tensor] | None = None,
    init: SurrogateNoise | None = None,
) -> BeamCleanResult:
    """Run BeamClean on each sequence of ``noisy`` ([T, d], [N, T, d] with ``mask`` [N, T], or a list of [T_i, d]).

    ``noise="estimated"`` (default) re-estimates theta; ``"oracle"`` uses ``mechanism``'s true parameter and needs
    ``knows_parameters``. ``family="auto"`` takes the surrogate family from ``mechanism`` (needs
    ``knows_mechanism``); an explicit family is the attacker's own guess and needs nothing. ``true_ids`` (same
    layout as ``noisy`` without d; padded positions are dropped with ``mask``) gives ``recovery``.
    """
    requires = beamclean_requirements(prior, noise=noise, family=family)
    check_grant("beamclean", requires, threat)
    knowledge = resolve_noise_knowledge("beamclean", noise, threat)
    if (family == "auto" or knowledge == "oracle") and mechanism is None:
        raise ValueError(f"beamclean: family={family!r} with noise={noise!r} needs the mechanism")
    fam = family_of(mechanism) if family == "auto" else family
    if fam not in FAMILIES:
        raise ValueError(f"beamclean: family must be 'auto' or one of {FAMILIES}, got {family!r}")
    fixed = oracle_noise(mechanism, fam) if knowledge == "oracle" else None
    if fixed is not None and init is not None:
        raise ValueError("beamclean: init is meaningless with oracle noise")
    sequences = _as_sequences(noisy, mask)
    decoded = [beamclean_decode(seq, table, prior, fam, config, fixed_noise=fixed, init=init) for seq in sequences]
    recovery = None
    if true_ids is not None:
        gold = _as_sequences(
            true_ids[..., None] if isinstance(true_ids, torch.Tensor) else [g[:, None] for g in true_ids], mask
        )
        if [len(g) for g in gold] != [len(s) for s in sequences]:
            raise ValueError("true_ids must have one id per observed vector")
        pred = torch.cat([s.ids for s in decoded]) if decoded else torch.empty(0, dtype=torch.int64)
        recovery = token_recovery_rate(pred, torch.cat([g[:, 0] for g in gold]) if gold else pred)
    return BeamCleanResult(
        ids=[s.ids for s in decoded],
        noise=[s.noise for s in decoded],
        scale_history=[s.scale_history for s in decoded],
        noise_knowledge=knowledge,
        family=fam,
        recovery=recovery,
        threat=threat.to_dict(),
        requires=requires.to_dict(),
        config=config.to_dict(),
    )
