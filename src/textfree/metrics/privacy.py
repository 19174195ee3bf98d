"""Leakage metrics: attribute recall, multi-label P/R/F1, PII recovery, empirical privacy, kNN mutual information
(Kraskov et al.'s KSG estimator and SnD's Kozachenko-Leonenko one).

Strings are compared after :func:`textfree.metrics.text.normalized_tokens` with ``keep_symbols=True``:
``normalize_answer`` (NFKC, casefold, punctuation -> space), every CJK character its own token, split on whitespace.
"Contained" means the tokens of a gold string occur as a contiguous run of the text's tokens, so matches respect word
boundaries (``"pain"`` is not found in ``"painful"``) and work for Chinese or Japanese text written without spaces.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from difflib import SequenceMatcher
from typing import Any

import numpy as np
from scipy.spatial import cKDTree
from scipy.special import digamma

from .basic import _as_array
from .text import PRF, normalized_tokens

__all__ = [
    "attribute_recall",
    "best_window_similarity",
    "empirical_privacy",
    "kl_mutual_information",
    "ksg_mutual_information",
    "multilabel_prf",
    "pii_recovery",
]

Tokens = tuple[str, ...]


def _tokens(text: str) -> Tokens:
    return tuple(normalized_tokens(text, keep_symbols=True))


def _contains(haystack: Tokens, needle: Tokens) -> bool:
    """True if ``needle`` (non-empty) occurs as a contiguous run of ``haystack``."""
    m = len(needle)
    return any(haystack[i : i + m] == needle for i in range(len(haystack) - m + 1))


def _unit_set(units: Sequence[str], what: str) -> list[Tokens]:
    """Normalised, de-duplicated token tuples of ``units`` (first occurrence order); empty ones are an error."""
    if isinstance(units, str):
        raise ValueError(f"{what} must be a sequence of strings, not the single string {units!r}")
    out: dict[Tokens, None] = {}
    for u in units:
        if not isinstance(u, str):
            raise ValueError(f"{what} must contain strings, got {type(u).__name__}: {u!r}")
        toks = _tokens(u)
        if not toks:
            raise ValueError(f"{what}: {u!r} is empty after normalisation")
        out[toks] = None
    return list(out)


def _check_records(a: Sequence[Any], b: Sequence[Any], names: str, what: str) -> None:
    if len(a) != len(b):
        raise ValueError(f"{what}: {names} must have the same number of records, got {len(a)} and {len(b)}")
    if len(a) == 0:
        raise ValueError(f"{what}: no records")


def _micro_macro(hits: Sequence[int], totals: Sequence[int]) -> dict[str, float]:
    """micro = sum(hits) / sum(totals); macro = mean of hits/total over records with total > 0; NaN if none."""
    counted = [(h, t) for h, t in zip(hits, totals) if t > 0]
    if not counted:
        return {"micro": math.nan, "macro": math.nan}
    micro = sum(h for h, _ in counted) / sum(t for _, t in counted)
    macro = math.fsum(h / t for h, t in counted) / len(counted)
    return {"micro": micro, "macro": macro}


# -------------------------------------------------------------------------------------------- attribute recall
def attribute_recall(gold: Sequence[Sequence[str]], recovered: Sequence[str | Collection[str]]) -> dict[str, float]:
    """Share of gold attribute strings an attack recovered (PPFT Table 3), micro and macro averaged.

    ``gold[i]``: the attribute strings of record i (e.g. its symptoms); duplicates after normalisation count once.
    ``recovered[i]``: either a reconstruction *text* (an attribute is recovered when its normalised tokens are
    contained in the text's, see the module doc) or a *collection* of predicted attribute strings (recovered when
    one of them normalises to the same tokens). Per record ``recall_i = |gold_i ∩ recovered_i| / |gold_i|``;
    ``micro = sum_i |gold_i ∩ recovered_i| / sum_i |gold_i|``, ``macro = mean_i recall_i`` over records with at least
    one gold attribute (both NaN when there are none). Returns ``{"micro", "macro", "n_records", "n_gold"}``.

    >>> attribute_recall([["fever", "dry cough"], ["rash"]], ["Fever and a dry, cough.", {"itch"}])
    {'micro': 0.6666666666666666, 'macro': 0.5, 'n_records': 2, 'n_gold': 3}
    """
    _check_records(gold, recovered, "gold and recovered", "attribute_recall")
    hits, totals = [], []
    for i, (g, rec) in enumerate(zip(gold, recovered)):
        units = _unit_set(g, f"attribute_recall: gold[{i}]")
        if isinstance(rec, str):
            text = _tokens(rec)
            hits.append(sum(_contains(text, u) for u in units))
        else:
            predicted = set(_unit_set(list(rec), f"attribute_recall: recovered[{i}]"))
            hits.append(sum(u in predicted for u in units))
        totals.append(len(units))
    out: dict[str, float] = dict(_micro_macro(hits, totals))
    out["n_records"] = sum(t > 0 for t in totals)
    out["n_gold"] = sum(totals)
    return out


def _label_sets(labels: Any, what: str) -> list[frozenset]:
    """Label sets from a sequence of label collections, or from a 0/1 indicator matrix (numpy array / torch tensor)."""
    if hasattr(labels, "shape"):
        m = _as_array(labels, dtype=None)
        if m.ndim != 2 or not np.isin(m, (0, 1)).all():
            raise ValueError(
                f"multilabel_prf: {what} as an array must be a 2-D 0/1 indicator matrix, got shape {m.shape}"
            )
        return [frozenset(np.flatnonzero(row).tolist()) for row in m]
    if isinstance(labels, str):
        raise ValueError(f"multilabel_prf: {what} must be a sequence of label collections, not a string")
    sets = []
    for i, row in enumerate(labels):
        if isinstance(row, str) or not isinstance(row, Collection):
            raise ValueError(f"multilabel_prf: {what}[{i}] must be a collection of labels, got {row!r}")
        sets.append(frozenset(row))
    return sets


def _prf(tp: int, fp: int, fn: int) -> PRF:
    """P = tp/(tp+fp), R = tp/(tp+fn), F1 = 2PR/(P+R); each 0 where its denominator is 0."""
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return PRF(p, r, f)


def multilabel_prf(predicted: Any, gold: Any, *, average: str = "micro") -> PRF:
    """Multi-label precision, recall and F1 of predicted label sets (e.g. an attribute classifier's symptoms).

    ``predicted[i]`` and ``gold[i]``: collections of hashable labels of record i, or both 0/1 indicator matrices
    ``[n_records, n_labels]`` (numpy or torch). With per-label counts TP_l, FP_l, FN_l over records:

    * ``"micro"``: P, R, F1 of the summed counts ``TP = sum_l TP_l`` etc.;
    * ``"macro"``: the unweighted mean over labels (every label in gold or predicted) of each label's P, R, F1.

    A ratio with a zero denominator is 0 (scikit-learn's ``zero_division=0``).

    >>> multilabel_prf([{"a", "b"}, {"c"}], [{"a"}, {"c", "d"}])  # TP 2, FP 1, FN 1
    PRF(precision=0.6666666666666666, recall=0.6666666666666666, f1=0.6666666666666666)
    """
    if average not in ("micro", "macro"):
        raise ValueError(f"multilabel_prf: average must be 'micro' or 'macro', got {average!r}")
    pred_sets, gold_sets = _label_sets(predicted, "predicted"), _label_sets(gold, "gold")
    _check_records(pred_sets, gold_sets, "predicted and gold", "multilabel_prf")
    labels = sorted(set().union(*pred_sets, *gold_sets), key=repr)
    counts = {label: [0, 0, 0] for label in labels}  # tp, fp, fn
    for p, g in zip(pred_sets, gold_sets):
        for label in p & g:
            counts[label][0] += 1
        for label in p - g:
            counts[label][1] += 1
        for label in g - p:
            counts[label][2] += 1
    if average == "micro":
        return _prf(*(sum(c[j] for c in counts.values()) for j in range(3)))
    if not labels:
        return PRF(0.0, 0.0, 0.0)
    per_label = [_prf(*c) for c in counts.values()]
    return PRF(*(math.fsum(column) / len(per_label) for column in zip(*per_label)))


# ------------------------------------------------------------------------------------------------ PII recovery
def _similarity(a: Tokens, b: Tokens) -> float:
    return SequenceMatcher(None, " ".join(a), " ".join(b), autojunk=False).ratio()


def _best_window(unit: Tokens, text: Tokens) -> float:
    m = len(unit)
    best = 0.0
    for w in range(max(m - 1, 1), min(m + 1, len(text)) + 1):
        for i in range(len(text) - w + 1):
            best = max(best, _similarity(unit, text[i : i + w]))
            if best == 1.0:
                return best
    return best


def best_window_similarity(unit: str, text: str) -> float:
    """Highest similarity between ``unit`` and a contiguous window of ``text``, in [0, 1].

    Both are normalised to tokens (module doc); with ``m`` unit tokens, every window of ``m - 1``, ``m`` or ``m + 1``
    consecutive text tokens (at least 1) is compared by ``difflib.SequenceMatcher(None, a, b, autojunk=False)
    .ratio() = 2 * matched characters / (len(a) + len(b))`` on the space-joined token strings. 1.0 exactly when the
    unit's tokens are contained in the text; 0.0 for an empty text.

    >>> best_window_similarity("John Smith", "patient jon smith, 42")  # "john smith" vs "jon smith": 2*9/19
    0.9473684210526315
    """
    u = _tokens(unit)
    if not u:
        raise ValueError(f"best_window_similarity: unit {unit!r} is empty after normalisation")
    return _best_window(u, _tokens(text))


def pii_recovery(
    pii_units: Sequence[Sequence[str]],
    reconstructions: Sequence[str],
    *,
    threshold: float = 0.8,
    judge: Callable[[str, str], bool] | None = None,
) -> dict[str, Any]:
    """How many PII strings of each record appear in the attacker's reconstruction of it (issue 4, attack 7).

    ``pii_units[i]``: the PII strings of record i (e.g. PUPA ``pii_units``; duplicates after normalisation count
    once); ``reconstructions[i]``: the reconstructed text. A unit is recovered

    * ``"exact"``: when its normalised tokens are contained in the reconstruction's (module doc);
    * ``"fuzzy"``: when :func:`best_window_similarity` ``>= threshold`` (exact implies fuzzy);
    * ``"judge"`` (only when ``judge`` is given): when ``judge(unit, reconstruction)`` is true (raw strings).

    Each entry is ``{"micro", "macro"}`` as in :func:`attribute_recall` (fractions; x100 for a percentage); also
    ``"n_units"`` and ``"n_records"`` (records with at least one unit).
    """
    if not (isinstance(threshold, (int, float)) and 0.0 < threshold <= 1.0):
        raise ValueError(f"pii_recovery: threshold must be in (0, 1], got {threshold!r}")
    _check_records(pii_units, reconstructions, "pii_units and reconstructions", "pii_recovery")
    totals, exact, fuzzy, judged = [], [], [], []
    for i, (units_raw, rec) in enumerate(zip(pii_units, reconstructions)):
        if not isinstance(rec, str):
            raise ValueError(f"pii_recovery: reconstructions[{i}] must be a string, got {type(rec).__name__}")
        units = _unit_set(units_raw, f"pii_recovery: pii_units[{i}]")
        text = _tokens(rec)
        totals.append(len(units))
        exact.append(sum(_contains(text, u) for u in units))
        fuzzy.append(sum(_best_window(u, text) >= threshold for u in units))
        if judge is not None:
            raw = {_tokens(u): u for u in units_raw}  # one raw spelling per normalised unit
            judged.append(sum(bool(judge(raw[u], rec)) for u in units))
    out: dict[str, Any] = {"exact": _micro_macro(exact, totals), "fuzzy": _micro_macro(fuzzy, totals)}
    if judge is not None:
        out["judge"] = _micro_macro(judged, totals)
    out["n_units"] = sum(totals)
    out["n_records"] = sum(t > 0 for t in totals)
    return out


# ------------------------------------------------------------------------------------------- empirical privacy
def empirical_privacy(attack_success: float) -> float:
    """RAPT's empirical privacy ``1 - X``, where ``X`` in [0, 1] is the attack's success rate (e.g. token recovery).

    >>> empirical_privacy(0.25)
    0.75
    """
    if isinstance(attack_success, bool) or not isinstance(attack_success, (int, float, np.floating, np.integer)):
        raise ValueError(f"empirical_privacy: attack_success must be a number, got {attack_success!r}")
    x = float(attack_success)
    if not 0.0 <= x <= 1.0:  # also rejects NaN
        raise ValueError(f"empirical_privacy: attack_success must be in [0, 1], got {attack_success!r}")
    return 1.0 - x


# ---------------------------------------------------------------------------------------- kNN mutual information
def _samples_2d(a: Any, what: str, fn: str = "ksg_mutual_information") -> np.ndarray:
    m = _as_array(a)
    if m.ndim == 1:
        m = m[:, None]
    if m.ndim != 2:
        raise ValueError(f"{fn}: {what} must be [n] or [n, d], got shape {m.shape}")
    if not np.isfinite(m).all():
        raise ValueError(f"{fn}: {what} contains NaN or infinite values")
    return m


def ksg_mutual_information(x: Any, y: Any, *, k: int = 3) -> float:
    """Kraskov–Stögbauer–Grassberger (2004) estimate, algorithm 1, of I(X; Y) in nats from paired samples.

    ``x``: ``[n, d1]``, ``y``: ``[n, d2]`` (1-D means d = 1), row i of each is one paired sample (e.g. a clean and a
    noisy embedding). This is Kraskov et al.'s estimator, not SnD's (SnD A.6 uses the Kozachenko-Leonenko entropy
    difference: :func:`kl_mutual_information`). With ``eps_i`` the distance from sample i to its k-th nearest
    neighbour in the joint space under the max-norm ``max(||x_i - x_j||_inf, ||y_i - y_j||_inf)``, and ``n_x(i)``
    (``n_y(i)``) the number of other samples strictly closer than ``eps_i`` to it in the x (y) space alone:

        I = psi(k) + psi(n) - mean_i [psi(n_x(i) + 1) + psi(n_y(i) + 1)]

    (psi = digamma). The estimate is not clipped at 0: values slightly below 0 mean "no detectable dependence".

    Caveats: the estimator assumes continuous densities (exact duplicate samples are an error); its bias grows with
    the dimension d1 + d2: with n samples it sees dependence only at the scale of the k-th neighbour distance,
    which in high dimension is large, so it typically *under*-estimates large MI (for MI of a few nats and above it
    needs sample sizes growing like exp(MI), and in high dimension n >> 2^d for a reliable figure). The
    max-norm makes the estimate depend on coordinate scales (the true MI does not). Compare figures only at equal n,
    d and k, and read them as a rough, usually lower, estimate, not as a privacy bound.
    """
    xs, ys = _samples_2d(x, "x"), _samples_2d(y, "y")
    n = xs.shape[0]
    if ys.shape[0] != n:
        raise ValueError(
            f"ksg_mutual_information: x and y need the same number of samples, got shapes {xs.shape} and {ys.shape}"
        )
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k < n:
        raise ValueError(f"ksg_mutual_information: k must be an integer in [1, n - 1] = [1, {n - 1}], got {k!r}")
    joint = np.hstack([xs, ys])
    dist, _ = cKDTree(joint).query(joint, k=k + 1, p=np.inf)  # column 0 is the sample itself
    eps = dist[:, k]
    if (eps == 0).any():
        raise ValueError(
            f"ksg_mutual_information: {int((eps == 0).sum())} samples have k={k} exact duplicates in the joint space; "
            "the estimator needs continuous data (add tiny jitter or raise k)"
        )
    radius = np.nextafter(eps, 0)  # "strictly closer than eps" with the ball's inclusive "<="
    n_x = cKDTree(xs).query_ball_point(xs, radius, p=np.inf, return_length=True) - 1  # minus the sample itself
    n_y = cKDTree(ys).query_ball_point(ys, radius, p=np.inf, return_length=True) - 1
    return float(digamma(k) + digamma(n) - np.mean(digamma(n_x + 1) + digamma(n_y + 1)))


def kl_mutual_information(x_tilde: Any, z: Any, *, k: int = 1) -> float:
    """SnD's estimate (Mai et al. 2023, §4.3.1 eq. 13, Appendix A.6 eq. 22) of I(X; X~) in nats for ``X~ = X + Z``
    with the noise Z independent of X.

    Then ``I(X; X~) = H(X~) - H(Z)`` (eq. 20), and each entropy is estimated with Kozachenko and Leonenko's kNN
    estimator ``H = psi(N) - psi(k) + log c_d + (d/N) sum_i log eps(i)`` (eq. 21; ``eps(i)``: Euclidean distance from
    sample i to its k-th nearest other sample in its own set, ``c_d`` the volume of the unit d-ball). With the same N
    and k for both sets the first three terms cancel (eq. 22)::

        I = (d/N) sum_i log eps_X~(i) - (d/N) sum_i log eps_Z(i)

    ``x_tilde``: ``[N, d]`` samples of the privatized embeddings ``x + z``; ``z``: ``[N, d]`` samples of the noise
    (1-D means d = 1). Rows need not be paired (the two entropies are estimated separately), but both sets must have
    the same N and d. Clipping the noisy vectors (SnD eq. 3) cannot raise the MI (data processing), so SnD estimates
    the unclipped ``x + z``; pass that, and the noise itself, here.

    Caveats: the estimate is not clipped at 0 (slightly negative: no detectable dependence). Each entropy estimate
    is biased in high dimension for a fixed N (the k-th neighbour distance is large; it converges slowly), and the
    two biases cancel only partly; compare figures only at equal N, d and k, and read them as an estimate, not a bound.
    Exact duplicate samples (a zero distance) are an error.

    >>> import numpy as np
    >>> g = np.random.default_rng(0)
    >>> x, z = g.normal(size=(4000, 1)), g.normal(size=(4000, 1))
    >>> round(kl_mutual_information(x + z, z), 1)  # closed form: 0.5 log 2 = 0.35
    0.3
    """
    xt = _samples_2d(x_tilde, "x_tilde", "kl_mutual_information")
    zs = _samples_2d(z, "z", "kl_mutual_information")
    if xt.shape != zs.shape:
        raise ValueError(
            f"kl_mutual_information: x_tilde and z need the same number of samples and dimension, got shapes "
            f"{xt.shape} and {zs.shape}"
        )
    n, d = xt.shape
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k < n:
        raise ValueError(f"kl_mutual_information: k must be an integer in [1, N - 1] = [1, {n - 1}], got {k!r}")

    def mean_log_knn(samples: np.ndarray, what: str) -> float:
        dist, _ = cKDTree(samples).query(samples, k=k + 1)  # column 0 is the sample itself
        eps = dist[:, k]
        if (eps == 0).any():
            raise ValueError(
                f"kl_mutual_information: {int((eps == 0).sum())} samples of {what} have k={k} exact duplicates; the "
                "estimator needs continuous data (raise k or remove duplicates)"
            )
        return float(np.mean(np.log(eps)))

    return d * (mean_log_knn(xt, "x_tilde") - mean_log_knn(zs, "z"))
