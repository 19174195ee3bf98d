"""Metrics: pure functions, numpy arrays or torch tensors in, floats (or a float array) out.

Every function here is deterministic, has no side effects and is tested against hand-computed values in
``tests/test_metrics_*.py``. Experiment cell kinds compute their numbers with these functions only.
"""

from .basic import cosine_similarity_rows, mean_stderr, mse, token_recovery_rate
from .qa import accuracy, first_mentioned, open_answer_correct, seed_spread

__all__ = [
    "accuracy",
    "cosine_similarity_rows",
    "first_mentioned",
    "mean_stderr",
    "mse",
    "open_answer_correct",
    "seed_spread",
    "token_recovery_rate",
]
