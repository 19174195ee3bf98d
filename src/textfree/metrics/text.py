"""Text-overlap metrics for reconstructions: ROUGE-L (via ``rouge-score``) and corpus BLEU, Unicode-aware.

Both score an attacker's reconstruction against the original text. They share one tokenizer,
:func:`normalized_tokens`, which on ASCII text gives exactly the tokens of ``rouge-score``'s default tokenizer
(lower-case, every run of characters other than ``[a-z0-9]`` is a separator) but keeps non-ASCII words: ``"café"``
stays ``"café"`` and each Chinese or Japanese character is a token of its own, where ``rouge-score`` would drop them
all.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, NamedTuple, Sequence

from ..data.normalize import normalize_answer

__all__ = [
    "PRF",
    "BleuScore",
    "UnicodeTokenizer",
    "corpus_bleu",
    "corpus_rouge_l",
    "normalized_tokens",
    "rouge_l",
    "score_gain",
    "split_cjk",
]

# Scripts written without spaces between words, split into one token per character (as BLEU/ROUGE tooling for
# Chinese and Japanese does): CJK ideographs (unified, extension A, compatibility, extensions B and later), hiragana,
# katakana (with phonetic extensions). Hangul is written with spaces and keeps its words.
_CJK_RE = re.compile(
    "([\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff])"
)


class PRF(NamedTuple):
    """Precision, recall and their harmonic mean F1 (each in [0, 1])."""

    precision: float
    recall: float
    f1: float


def split_cjk(text: str) -> str:
    """``text`` with a space on both sides of every CJK ideograph, hiragana and katakana character."""
    return _CJK_RE.sub(r" \1 ", text)


def _is_word_char(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LNM"  # letters, numbers, combining marks (é in NFD, Devanagari signs)


def normalized_tokens(text: str, *, keep_symbols: bool = False) -> list[str]:
    """Word tokens of ``text`` after :func:`~textfree.data.normalize.normalize_answer`, Unicode-aware.

    Steps: ``normalize_answer`` (NFKC, casefold, punctuation -> space); then, unless ``keep_symbols``, every character
    that is not a letter, digit or combining mark (symbols such as ``+ $ %``) -> space; then every CJK character is
    its own token (:func:`split_cjk`); then split on whitespace. On ASCII input with ``keep_symbols=False`` this is
    exactly ``rouge-score``'s default tokenizer (without stemming).

    >>> normalized_tokens("Café au-lait, 2 €!")
    ['café', 'au', 'lait', '2']
    >>> normalized_tokens("我住在北京 now")
    ['我', '住', '在', '北', '京', 'now']
    """
    text = normalize_answer(text)
    if not keep_symbols:
        text = "".join(ch if _is_word_char(ch) else " " for ch in text)
    return split_cjk(text).split()


@lru_cache(maxsize=1)
def _porter():
    from nltk.stem import porter  # the stemmer rouge-score's DefaultTokenizer uses

    return porter.PorterStemmer()


class UnicodeTokenizer:
    """A ``rouge-score`` tokenizer object (it has ``tokenize(text)``) built on :func:`normalized_tokens`.

    With ``use_stemmer`` ASCII tokens longer than 3 characters are Porter-stemmed, as ``rouge-score`` does with
    ``use_stemmer=True``; non-ASCII tokens are never stemmed (the Porter stemmer is for English).
    """

    def __init__(self, use_stemmer: bool = False):
        self.use_stemmer = bool(use_stemmer)

    def tokenize(self, text: str) -> list[str]:
        tokens = normalized_tokens(text)
        if self.use_stemmer:
            stem = _porter().stem
            tokens = [stem(t) if len(t) > 3 and t.isascii() else t for t in tokens]
        return tokens


@lru_cache(maxsize=2)
def _rouge_l_scorer(use_stemmer: bool):
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], tokenizer=UnicodeTokenizer(use_stemmer))


def _check_str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}: {value!r}")
    return value


def _check_pairs(predictions: Sequence[str], references: Sequence[object], what: str) -> None:
    if isinstance(predictions, str) or isinstance(references, str):
        raise ValueError(f"{what}: predictions and references must be sequences of texts, not a single string")
    if len(predictions) != len(references):
        raise ValueError(
            f"{what}: predictions and references must have the same length, "
            f"got {len(predictions)} and {len(references)}"
        )
    if len(predictions) == 0:
        raise ValueError(f"{what}: no pairs to score (empty corpus)")


def rouge_l(prediction: str, reference: str, *, use_stemmer: bool = False) -> PRF:
    """ROUGE-L of a reconstruction against its reference, as ``rouge-score`` computes it, non-ASCII words kept.

    With ``L = LCS(prediction tokens, reference tokens)`` (longest common subsequence, Lin 2004):
    ``precision = L / |prediction|``, ``recall = L / |reference|``, ``f1 = 2PR / (P + R)``; all 0 when either side has
    no tokens or ``L = 0``. Tokens: :class:`UnicodeTokenizer` (equal to ``rouge-score``'s default on ASCII text).

    >>> rouge_l("the cat sat on the mat", "the cat lay on the mat")  # LCS "the cat on the mat" = 5 of 6
    PRF(precision=0.8333333333333334, recall=0.8333333333333334, f1=0.8333333333333334)
    """
    _check_str(prediction, "rouge_l: prediction")
    _check_str(reference, "rouge_l: reference")
    score = _rouge_l_scorer(bool(use_stemmer)).score(reference, prediction)["rougeL"]  # score(target, prediction)
    return PRF(score.precision, score.recall, score.fmeasure)


def corpus_rouge_l(predictions: Sequence[str], references: Sequence[str], *, use_stemmer: bool = False) -> PRF:
    """Mean over pairs of :func:`rouge_l` precision, recall and F1 (the F1 is the mean of per-pair F1s)."""
    _check_pairs(predictions, references, "corpus_rouge_l")
    scores = [rouge_l(p, r, use_stemmer=use_stemmer) for p, r in zip(predictions, references)]
    n = len(scores)
    return PRF(*(math.fsum(column) / n for column in zip(*scores)))


def score_gain(score: float, reference: float) -> float:
    """How much of the room above a no-input reference a score takes: ``(score - reference) / (1 - reference)``.

    For a [0, 1] score such as ROUGE-L F1, where ``reference`` is what one constant guess (no input at all) scores on
    the same texts: 0 means no better than the guess, 1 a perfect score, negative worse than the guess. On templated
    prompts (Pri-DDX: one constant guess scores 0.638) raw ROUGE-L mostly measures the template; this reads the part
    of it the input gave. On free text the reference is near 0 and the gain near the score itself.

    >>> score_gain(0.75, 0.5)
    0.5
    """
    for name, v in (("score", score), ("reference", reference)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
            raise ValueError(f"score_gain: {name} must be a number in [0, 1], got {v!r}")
    if reference == 1.0:
        raise ValueError("score_gain: reference is 1.0, a perfect score without input; no room above it to measure")
    return (score - reference) / (1.0 - reference)


# ------------------------------------------------------------------------------------------------------- BLEU
_SMOOTHINGS = ("none", "epsilon", "add1")


@dataclass(frozen=True)
class BleuScore:
    """Corpus BLEU with its parts: ``score = brevity_penalty * exp(mean(log precisions))``."""

    score: float
    precisions: tuple[float, ...]  # smoothed modified n-gram precisions p_1 .. p_N
    brevity_penalty: float
    hypothesis_length: int  # c: total hypothesis tokens
    reference_length: int  # r: total effective reference tokens


def _ngrams(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def _closest_length(hyp_len: int, ref_lens: Sequence[int]) -> int:
    """The reference length closest to the hypothesis length; the shorter one on a tie (Papineni; NLTK, sacrebleu)."""
    return min(ref_lens, key=lambda r: (abs(r - hyp_len), r))


def _as_reference_list(refs: object, i: int) -> list[str]:
    if isinstance(refs, str):
        return [refs]
    refs = list(refs)  # type: ignore[call-overload]
    if not refs:
        raise ValueError(f"corpus_bleu: hypothesis {i} has no reference")
    return [_check_str(r, f"corpus_bleu: reference of hypothesis {i}") for r in refs]


def _smoothed_precisions(matches: list[int], totals: list[int], smoothing: str, epsilon: float) -> list[float]:
    out = []
    for n, (m, t) in enumerate(zip(matches, totals), start=1):
        t = max(t, 1)  # no n-gram of this order anywhere: precision 0 / 1 (as NLTK)
        if smoothing == "epsilon" and m == 0:
            out.append(epsilon / t)
        elif smoothing == "add1" and n > 1:
            out.append((m + 1) / (t + 1))
        else:
            out.append(m / t)
    return out


def corpus_bleu(
    hypotheses: Sequence[str],
    references: Sequence[str | Sequence[str]],
    *,
    max_n: int = 4,
    smoothing: str = "none",
    epsilon: float = 0.1,
    tokenizer: Callable[[str], list[str]] = normalized_tokens,
) -> BleuScore:
    """Corpus BLEU-``max_n`` with brevity penalty (Papineni et al. 2002), uniform weights, pure Python.

    ``references[i]`` is one reference string or a sequence of reference strings for ``hypotheses[i]``.
    For each order n, ``p_n = sum_i sum_g min(count_hyp_i(g), max_ref count_ref_i(g)) / sum_i (|hyp_i| - n + 1)``
    (clipped n-gram matches over all hypothesis n-grams, pooled over the corpus; a zero denominator counts as 1).
    ``c`` = total hypothesis length, ``r`` = sum of the reference lengths closest to each hypothesis length (the
    shorter on a tie); ``BP = 1`` if ``c > r`` else ``exp(1 - r / c)`` (0 when ``c = 0``).
    ``BLEU = BP * exp(sum_n log(p_n) / max_n)``.

    ``smoothing`` (Chen & Cherry 2014, as NLTK's ``SmoothingFunction``):

    * ``"none"``: BLEU is 0 as soon as one order has no match;
    * ``"epsilon"`` (method 1): a zero match count becomes ``epsilon`` (0.1 by default);
    * ``"add1"`` (method 2, Lin & Och 2004): ``p_n = (m_n + 1) / (t_n + 1)`` for n >= 2; p_1 stays unsmoothed.

    Whatever the smoothing, BLEU is 0 when no unigram matches. The n-gram totals are pooled as in Papineni and
    sacrebleu; NLTK's ``corpus_bleu`` instead counts at least one n-gram per sentence, so it differs when a hypothesis
    is shorter than ``max_n`` tokens (and agrees otherwise). Tokens come from ``tokenizer`` (default
    :func:`normalized_tokens`: lower-cased words, punctuation dropped, so scores are not comparable with sacrebleu's
    punctuation-keeping ``13a`` tokenisation).
    """
    _check_pairs(hypotheses, references, "corpus_bleu")
    if isinstance(max_n, bool) or not isinstance(max_n, int) or max_n < 1:
        raise ValueError(f"corpus_bleu: max_n must be a positive integer, got {max_n!r}")
    if smoothing not in _SMOOTHINGS:
        raise ValueError(f"corpus_bleu: smoothing must be one of {_SMOOTHINGS}, got {smoothing!r}")
    if not (epsilon > 0):
        raise ValueError(f"corpus_bleu: epsilon must be > 0, got {epsilon!r}")
    matches, totals = [0] * max_n, [0] * max_n
    hyp_total = ref_total = 0
    for i, (hyp, refs) in enumerate(zip(hypotheses, references)):
        hyp_tokens = tokenizer(_check_str(hyp, f"corpus_bleu: hypothesis {i}"))
        ref_tokens = [tokenizer(r) for r in _as_reference_list(refs, i)]
        hyp_total += len(hyp_tokens)
        ref_total += _closest_length(len(hyp_tokens), [len(r) for r in ref_tokens])
        for n in range(1, max_n + 1):
            hyp_counts = _ngrams(hyp_tokens, n)
            max_ref: Counter = Counter()
            for r in ref_tokens:
                max_ref |= _ngrams(r, n)  # element-wise maximum of the counts
            matches[n - 1] += sum(min(c, max_ref[g]) for g, c in hyp_counts.items())
            totals[n - 1] += max(len(hyp_tokens) - n + 1, 0)
    precisions = _smoothed_precisions(matches, totals, smoothing, epsilon)
    if hyp_total == 0:
        bp = 0.0
    else:
        bp = 1.0 if hyp_total > ref_total else math.exp(1.0 - ref_total / hyp_total)
    if matches[0] == 0 or min(precisions) == 0.0:
        score = 0.0
    else:
        score = bp * math.exp(math.fsum(math.log(p) for p in precisions) / max_n)
    return BleuScore(score, tuple(precisions), bp, hyp_total, ref_total)
