"""Metrics: pure functions, numpy arrays or torch tensors in, floats (or a float array) out.

Every function here is deterministic, has no side effects and is tested against hand-computed values in
``tests/test_metrics_*.py``. Experiment cell kinds compute their numbers with these functions only.
"""

from .basic import cosine_similarity_rows, mean_stderr, mse, token_recovery_rate
from .privacy import (
    attribute_recall,
    best_window_similarity,
    empirical_privacy,
    ksg_mutual_information,
    multilabel_prf,
    pii_recovery,
)
from .qa import accuracy, first_mentioned, mean_interval, open_answer_correct, seed_spread, welch_test
from .text import PRF, BleuScore, UnicodeTokenizer, corpus_bleu, corpus_rouge_l, normalized_tokens, rouge_l, score_gain

__all__ = [
    "PRF",
    "BleuScore",
    "UnicodeTokenizer",
    "accuracy",
    "attribute_recall",
    "best_window_similarity",
    "corpus_bleu",
    "corpus_rouge_l",
    "cosine_similarity_rows",
    "empirical_privacy",
    "first_mentioned",
    "ksg_mutual_information",
    "mean_stderr",
    "mse",
    "multilabel_prf",
    "normalized_tokens",
    "open_answer_correct",
    "pii_recovery",
    "rouge_l",
    "score_gain",
    "seed_spread",
    "mean_interval",
    "welch_test",
    "token_recovery_rate",
]
