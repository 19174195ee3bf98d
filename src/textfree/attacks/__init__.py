"""Attacks on released vectors, each with a declared threat model (:mod:`textfree.attacks.threat`).

* ``nearest_neighbour``: nearest vocabulary row by exact L2 and by cosine (:mod:`.nearest`).
* ``attribute_inference``: attribute classifiers on released slots, with prior and label references
  (:mod:`.attributes`).
* ``learned_inversion`` / ``restoration``: a decoder that regenerates prompts from PPFT payloads (:mod:`.learned`).
* ``slot_tokens``: a classifier of the tokens pooled into each PPFT slot, no decoder (:mod:`.slot_tokens`).
* ``substitution_identity`` / ``substitution_channel``: readers of T2T / PCT2T text (:mod:`.substitution`);
  ``substitution_learned``: a decoder trained to rewrite it (:mod:`.substitution_learned`, trained by
  :mod:`.substitution_training`, which is loaded only where it is imported: it needs transformers).
* ``ner``: a token classifier trained on clean annotated text, run on T2T / PCT2T text (:mod:`.ner`).
* ``beamclean``: beam search with a re-estimated surrogate noise model and a token prior (:mod:`.beamclean`,
  priors in :mod:`.priors`).

See docs/attacks.md.
"""

# The names below are loaded on first use (PEP 562 ``__getattr__``; the first use loads every attack module, which
# registers the attacks), so that ``import textfree.cli_attacks`` -- the ``textfree attacks`` command group, imported on
# every start of the CLI -- does not load torch.
_SOURCES = {
    **dict.fromkeys(
        [
            "ChannelInverter",
            "SUBSTITUTION_CHANNEL_REQUIRES",
            "substitution_channel_attack",
            "substitution_identity_attack",
            "word_recovery",
            "aligned_word_recovery",
        ],
        "substitution",
    ),
    **dict.fromkeys(
        ["SUBSTITUTION_LEARNED_REQUIRES", "SubstitutionInverter", "substitution_learned_attack"], "substitution_learned"
    ),
    **dict.fromkeys(
        [
            "SLOT_TOKENS_REQUIRES",
            "SlotTokenConfig",
            "SlotTokenInverter",
            "slot_targets",
            "train_slot_inverter",
            "slot_tokens_attack",
        ],
        "slot_tokens",
    ),
    **dict.fromkeys(
        [
            "LEARNED_INVERSION_REQUIRES",
            "RESTORATION_REQUIRES",
            "learned_inversion_attack",
            "reconstruct",
            "restoration_attack",
            "score_reconstructions",
            "medoid_text",
        ],
        "learned",
    ),
    **dict.fromkeys(
        [
            "AGE_EDGES",
            "ATTRIBUTE_REQUIRES",
            "AttributeAttackConfig",
            "AttributeClassifier",
            "AttributeSpec",
            "age_bucket",
            "attribute_inference_attack",
            "attribute_metric_names",
            "build_specs",
            "label_predictions",
            "length_predictions",
            "noisy_rows",
            "predict_attributes",
            "prior_predictions",
            "RELEASE_REQUIRES",
            "score_attributes",
            "train_attribute_attacker",
        ],
        "attributes",
    ),
    **dict.fromkeys(
        [
            "BEAMCLEAN_REQUIRES",
            "BeamCleanConfig",
            "BeamCleanResult",
            "DecodedSequence",
            "FAMILIES",
            "SurrogateNoise",
            "beamclean_attack",
            "beamclean_decode",
            "beamclean_requirements",
            "candidate_pool",
            "family_of",
            "log_bessel_iv",
            "oracle_noise",
            "vmf_kappa",
            "vmf_log_normalizer",
        ],
        "beamclean",
    ),
    **dict.fromkeys(
        [
            "METRICS",
            "NEAREST_REQUIRES",
            "NearestNeighbourInverter",
            "NearestNeighbourResult",
            "excluded_mask",
            "nearest_neighbour_attack",
            "nearest_token_ids",
            "vocab_topk",
        ],
        "nearest",
    ),
    **dict.fromkeys(
        ["NER_REQUIRES", "NerTagger", "NerTrainConfig", "ner_attack", "score_entities", "train_ner_tagger"], "ner"
    ),
    **dict.fromkeys(["BigramPrior", "CausalLMPrior", "TokenPrior", "UniformPrior", "surface_strings"], "priors"),
    **dict.fromkeys(
        [
            "AttackSpec",
            "CAPABILITIES",
            "NOISE_AWARE_REQUIRES",
            "NOISE_KNOWLEDGE",
            "TRAINING_TEXT_LEVELS",
            "ThreatModel",
            "ThreatModelError",
            "available_attacks",
            "check_grant",
            "get_attack",
            "missing_capabilities",
            "register_attack",
            "resolve_noise_knowledge",
            "run_attack",
        ],
        "threat",
    ),
}

__all__ = [
    "ChannelInverter",
    "SUBSTITUTION_CHANNEL_REQUIRES",
    "substitution_channel_attack",
    "substitution_identity_attack",
    "word_recovery",
    "aligned_word_recovery",
    "SUBSTITUTION_LEARNED_REQUIRES",
    "SubstitutionInverter",
    "substitution_learned_attack",
    "LEARNED_INVERSION_REQUIRES",
    "RESTORATION_REQUIRES",
    "learned_inversion_attack",
    "reconstruct",
    "restoration_attack",
    "score_reconstructions",
    "medoid_text",
    "SLOT_TOKENS_REQUIRES",
    "SlotTokenConfig",
    "SlotTokenInverter",
    "slot_targets",
    "train_slot_inverter",
    "slot_tokens_attack",
    "AGE_EDGES",
    "ATTRIBUTE_REQUIRES",
    "AttributeAttackConfig",
    "AttributeClassifier",
    "AttributeSpec",
    "age_bucket",
    "attribute_inference_attack",
    "attribute_metric_names",
    "build_specs",
    "label_predictions",
    "length_predictions",
    "noisy_rows",
    "predict_attributes",
    "prior_predictions",
    "RELEASE_REQUIRES",
    "score_attributes",
    "train_attribute_attacker",
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
    "NOISE_AWARE_REQUIRES",
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
    "log_bessel_iv",
    "vmf_kappa",
    "vmf_log_normalizer",
    "register_attack",
    "resolve_noise_knowledge",
    "run_attack",
    "surface_strings",
    "vocab_topk",
    "NER_REQUIRES",
    "NerTagger",
    "NerTrainConfig",
    "ner_attack",
    "score_entities",
    "train_ner_tagger",
]


def __getattr__(name: str):
    """Load the attack modules on first use of any public name (all of them: importing registers the attacks)."""
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    for public, module in _SOURCES.items():
        globals()[public] = getattr(importlib.import_module(f"{__name__}.{module}"), public)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
