"""Verdicts of the PPFT report: the issue's targets (keep 85% of the upper bound, beat the blind row and the lower
bound clearly) applied to one training or over several, with confidence intervals and Welch tests."""

from __future__ import annotations

import math
from typing import Any, Sequence

from ...metrics import mean_interval, welch_test
from .entries import (
    _CLEAR_MARGIN,
    _TARGET_RETENTION,
    Entry,
    _build,
    _get,
    _ratio,
    _trainings,
    _variant_rows,
)
from .layouts import _LAYOUT_SECTIONS, _layout_values


def _bound_of_another_build(row: Entry, upper: Entry | None) -> str:
    """ " (the upper bound from another stage-1 build)" when ``upper``'s recorded build differs from ``row``'s; ""
    when they agree or either was not recorded."""
    differs = _build(row) and _build(upper) and _build(upper) != _build(row)
    return " (the upper bound from another stage-1 build)" if differs else ""


def _meets(p: float, u: float, b: float, lo: float) -> bool:
    """The issue's target: keep >= 85% of the upper bound ``u`` and beat the blind row ``b`` and the lower bound
    ``lo`` by the clear margin (a missing control fails)."""
    keep = (p / u) if u else math.nan
    clear = all(not math.isnan(ref) and p - ref >= _CLEAR_MARGIN for ref in (b, lo))
    return not math.isnan(keep) and keep >= _TARGET_RETENTION and clear


def _layouts_meeting_targets(
    stage2: Sequence[Entry], blind: Entry | None, low: Entry | None
) -> list[tuple[str, Any, str]]:
    """(layout key, its value, description) of each layout section's row whose width-matched run meets the 4-option and
    the
    open-answer target against its own upper bound (over the trainings of the run when it was trained more than
    once)."""
    names = []
    for key, name, _, _ in _LAYOUT_SECTIONS:
        for v in _layout_values([e for e in stage2 if not _get(e, "blind")], key):
            names += _met_rows(stage2, key, v, name(v), _variant_rows(stage2, key, v), blind, low)
    return names


def _met_rows(
    stage2: Sequence[Entry],
    key: str,
    v: Any,
    layout: str,
    rows: Sequence[tuple[Entry | None, Entry | None]],
    blind: Entry | None,
    low: Entry | None,
) -> list[tuple[str, Any, str]]:
    """:func:`_layouts_meeting_targets` for one layout, each of its stage-2 lengths (``rows``: noisy run, bound)."""
    names = []
    for noisy, upper in rows:
        if noisy is None or upper is None or blind is None or low is None:
            continue
        length = f", {noisy.params.get('epochs')} stage-2 epochs" if len(rows) > 1 else ""
        trainings = _trainings(stage2, noisy.params.get("epochs"), **{key: v})
        means = {t: _training_means(trainings, f"acc_{t}") for t in ("mcqa", "open")}
        acc = {t: None if m is None else sum(m) / len(m) for t, m in means.items()}
        if all(
            a is not None and _meets(a, upper.mean(f"acc_{t}"), blind.mean(f"acc_blind_{t}"), low.mean(f"acc_{t}"))
            for t, a in acc.items()
        ):
            names.append(
                (
                    key,
                    v,
                    f"{layout}{length} ({acc['mcqa']:.4f} / {acc['open']:.4f} of "
                    f"{upper.mean('acc_mcqa'):.4f} / {upper.mean('acc_open'):.4f}"
                    + (f", over {len(trainings)} trainings)" if len(trainings) > 1 else ", one training)"),
                )
            )
    return names


def _verdicts(prefix: str, ppft: Entry, upper: Entry, blind: Entry | None, low: Entry | None) -> list[str]:
    """One line per task: PPFT's share of the upper bound and its margins over the blind row and the lower bound."""
    lines = []
    for task, blind_task, name in (
        ("mcqa", "blind_mcqa", "4-option"),
        ("open", "blind_open", "open-answer"),
        ("mcqa_rank", "blind_mcqa_rank", "4-option, ranked (not the paper's metric)"),
        ("open_rank", "blind_open_rank", "label-ranked open-answer (not the paper's metric)"),
    ):
        if not ppft.values(f"acc_{task}"):
            continue
        p, u = ppft.mean(f"acc_{task}"), upper.mean(f"acc_{task}")
        b = blind.mean(f"acc_{blind_task}") if blind else math.nan
        lo = low.mean(f"acc_{task}") if low else math.nan
        verdict = "met" if _meets(p, u, b, lo) else "NOT met"
        lines.append(
            f"- {prefix + ', ' if prefix else ''}{name}: PPFT {p:.4f} = {_ratio(p, u)} of the upper bound {u:.4f}; "
            f"blind {_control(b)}; lower bound {_control(lo)} -> **{verdict}**"
            + (" (a control not measured is not beaten)" if math.isnan(b) or math.isnan(lo) else "")
            + _bound_of_another_build(ppft, upper)
        )
    return lines


def _control(value: float) -> str:
    """A control's accuracy for a verdict line, or that it was not measured (no result file, or not for this task)."""
    return "not measured" if math.isnan(value) else f"{value:.4f}"


def _training_means(trainings: Sequence[Entry], metric: str) -> list[float] | None:
    """Each training's mean ``metric`` over its noise seeds (None unless every training measured it)."""
    means = [e.mean(metric) for e in trainings if e.values(metric)]
    return means if trainings and len(means) == len(trainings) else None


def _training_verdicts(
    prefix: str,
    trainings: Sequence[Entry],
    upper: Entry,
    blind: Entry | None,
    low: Entry | None,
    *,
    judged: bool = True,
    header: str | None = None,
    at_least: int = 2,
) -> list[str]:
    """When a row was trained at least ``at_least`` times (by default more than once): the 4-option and open-answer
    verdicts over its trainings (the verdicts of :func:`_verdicts` are training seed 0's). ``judged``: a row the
    targets are judged on (the width-matched one, listed in the training-seed table); else an informative row.
    ``header``: the line before the verdicts, instead of the one that says what they add to seed 0's."""
    if len(trainings) < max(at_least, 1):
        return []
    where = (
        "trainings of this row (the training-seed table), which is what the targets are judged on:"
        if judged
        else "trainings of this row:"
    )
    lines = [
        header
        or f"- {prefix + ': ' if prefix else ''}the verdicts above are one training's (training seed 0). Over the "
        f"{len(trainings)} {where}"
    ]
    for task, name in (("mcqa", "4-option"), ("open", "open-answer")):
        means = _training_means(trainings, f"acc_{task}")
        if means is None:
            continue
        p, u = sum(means) / len(means), upper.mean(f"acc_{task}")
        b = blind.mean(f"acc_blind_{task}") if blind else math.nan
        lo = low.mean(f"acc_{task}") if low else math.nan
        lines.append(
            f"  - {name}: PPFT {p:.4f} (trainings: {', '.join(f'{m:.4f}' for m in means)}) = {_ratio(p, u)} of the "
            "upper "
            f"bound {u:.4f} -> **{'met' if _meets(p, u, b, lo) else 'NOT met'}**"
            + next((note for note in (_bound_of_another_build(t, upper) for t in trainings) if note), "")
            + _mixed_builds(trainings)
        )
        if len(means) >= 3:
            lines.append(_interval_line(means, u))
    return lines


def _welch_lines(selected: Sequence[Entry], default: Sequence[Entry]) -> list[str]:
    """Per task, whether the selected settings' trainings differ from the default settings' ones: Welch's t-test
    over the per-training means (two or more trainings on each side), at the 0.05 level."""
    lines = []
    for task, name in (("mcqa", "4-option"), ("open", "open-answer")):
        a, b = _training_means(selected, f"acc_{task}"), _training_means(default, f"acc_{task}")
        if a is None or b is None or len(a) < 2 or len(b) < 2 or len(set(a) | set(b)) < 2:
            continue
        w = welch_test(a, b)
        lines.append(
            f"- the selected settings against the default ones, {name}: {sum(a) / len(a) - sum(b) / len(b):+.4f} over "
            f"{len(a)} and {len(b)} trainings; Welch t {w['t']:.2f} (df {w['df']:.1f}), two-sided p {w['p']:.3f}: "
            + ("significant at 0.05" if w["p"] < 0.05 else "not significant at 0.05")
        )
    return lines


def _interval_line(means: Sequence[float], u: float) -> str:
    """Where the issue's bar (85% of the upper bound ``u``, the bound taken as fixed: it is one deterministic
    training) lies against the 95% t-interval of the mean over the trainings' ``means``."""
    lo, hi = mean_interval(means, 0.95)
    bar = _TARGET_RETENTION * u
    where = (
        "below it: the bar is met with 95% confidence"
        if bar < lo
        else "above it: the bar is missed with 95% confidence"
        if bar > hi
        else "inside it: the mean meets the bar, but not with 95% confidence"
        if sum(means) / len(means) >= bar
        else "inside it: the mean misses the bar, but not with 95% confidence"
    )
    return (
        f"    - 95% t-interval of the mean over the {len(means)} trainings: {lo:.4f} to {hi:.4f} ({_ratio(lo, u)} to "
        f"{_ratio(hi, u)} of the bound); the {_TARGET_RETENTION:.0%} bar {bar:.4f} lies {where}"
    )


def _mixed_builds(trainings: Sequence[Entry]) -> str:
    """A note when ``trainings`` do not all record the same stage-1 build (a file that records none counts as
    another: it may come from any build)."""
    builds = {_build(t) for t in trainings}
    return (
        ""
        if len(builds) == 1
        else " (the trainings do not all record the same stage-1 build: see the training-seed table)"
    )
