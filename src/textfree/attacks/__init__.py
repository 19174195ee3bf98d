"""Attacks on released vectors, each with a declared threat model (:mod:`textfree.attacks.threat`).

* ``nearest_neighbour``: nearest vocabulary row by exact L2 and by cosine (:mod:`.nearest`).
* ``beamclean``: beam search with a re-estimated surrogate noise model and a token prior (:mod:`.beamclean`,
  priors in :mod:`.priors`).

See docs/attacks.md.
"""

from .beamclean import (
    BEAMCLEAN_REQUIRES,
    FAMILIES,
    BeamCleanConfig,
    BeamCleanResult,
    DecodedSequence,
    SurrogateNoise,
    beamclean_attack,
    beamclean_decode,
    beamclean_requirements,
    candidate_pool,
    family_of,
    oracle_noise,
)
from .nearest import (
    METRICS,
    NEAREST_REQUIRES,
    NearestNeighbourInverter,
    NearestNeighbourResult,
    excluded_mask,
    nearest_neighbour_attack,
    nearest_token_ids,
    vocab_topk,
)
from .priors import BigramPrior, CausalLMPrior, TokenPrior, UniformPrior, surface_strings
from .threat import (
    CAPABILITIES,
    NOISE_KNOWLEDGE,
    TRAINING_TEXT_LEVELS,
    AttackSpec,
    ThreatModel,
    ThreatModelError,
    available_attacks,
    check_grant,
    get_attack,
    missing_capabilities,
    register_attack,
    resolve_noise_knowledge,
    run_attack,
)

__all__ = [
    "AttackSpec",
    "BEAMCLEAN_REQUIRES",
    "BeamCleanConfig",
    "BeamCleanResult",
    "BigramPrior",
    "CAPABILITIES",
    "CausalLMPrior",
    "DecodedSequence",
    "FAMILIES",
    "METRICS",
    "NEAREST_REQUIRES",
    "NOISE_KNOWLEDGE",
    "NearestNeighbourInverter",
    "NearestNeighbourResult",
    "SurrogateNoise",
    "TRAINING_TEXT_LEVELS",
    "ThreatModel",
    "ThreatModelError",
    "TokenPrior",
    "UniformPrior",
    "available_attacks",
    "beamclean_attack",
    "beamclean_decode",
    "beamclean_requirements",
    "candidate_pool",
    "check_grant",
    "excluded_mask",
    "family_of",
    "get_attack",
    "missing_capabilities",
    "nearest_neighbour_attack",
    "nearest_token_ids",
    "oracle_noise",
    "register_attack",
    "resolve_noise_knowledge",
    "run_attack",
    "surface_strings",
    "vocab_topk",
]
