"""The model-selection section of ``docs/results/ppft.md``: runs trained with a validation part held back.

A ``ppft_stage2`` run with ``validation`` > 0 trains on the training rows minus a validation part
(``ppft_split(..., validation=v)``) and, with the cell's ``split: validation``, is evaluated there. Such runs choose
between candidates (layouts, stage-2 lengths, optimisation settings) without reading the held-out part, and appear only
here:
:func:`split_selection` takes them out of every other table. For each (eps, k) the candidate with the highest
validation open-answer accuracy (the issue's harder target) is named, beside its held-out figure from the runs
trained on every training row (the tables above), over every training of that row.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .entries import (
    _PPFT_LAYOUT,
    WIDTH_MATCHED,
    Entry,
    _eps_label,
    _fmt,
    _get,
    _latest,
    _ratio,
    _trainings,
)
from .layouts import (
    _LAYOUT_SECTIONS,
    _OPTIMISATION_KEYS,
    _differs_from_ppft,
    settings_name,
)
from .tables import _table1_ppft
from .verdicts import _training_means

__all__ = ["split_selection", "table_selection", "selected_recipe"]

_SELECTION_INTRO = [
    "Every other table was read off the held-out part, so a layout or a length chosen from them was chosen on the",
    "data it is judged on. Here candidates are trained on the training rows minus a validation part (whole",
    "private-text groups, `ppft_split(..., validation=v)`; the held-out part is untouched) and compared on that",
    "part only. The choice is the candidate with the highest validation open-answer accuracy; its held-out figure is",
    "the one of the same row trained on every training row, from the tables above.",
]

_METRICS = ("acc_mcqa", "acc_open", "acc_open_no_leak", "acc_length_open")


def validation_share(e: Entry) -> float:
    return float(e.params.get("validation") or 0.0)


def split_selection(entries: Sequence[Entry]) -> tuple[list[Entry], list[Entry]]:
    """(entries trained on every training row, entries trained with a validation part held back)."""
    return [e for e in entries if not validation_share(e)], [e for e in entries if validation_share(e)]


def layout_of(e: Entry) -> tuple[str, dict[str, Any]]:
    """The name of ``e``'s layout and the layout keys that say it (``{}``: PPFT's own); a combined section
    ("center+answer") before its parts."""
    for key, name, _, _ in sorted(_LAYOUT_SECTIONS, key=lambda s: -len(s[0].split("+"))):
        value = _get(e, key)
        others = all(_get(e, k) == v for k, v in _PPFT_LAYOUT.items() if k not in key.split("+") and k != "train_seed")
        if _differs_from_ppft(key, value) and others:
            return name(value), {key: value}
    return "PPFT", {}


def _newest_candidates(selection: Sequence[Entry], ds: str) -> dict[tuple, Entry]:
    """The newest file of each candidate run of dataset ``ds``, by (layout, epochs, training seed, eps, k, share held
    back, part evaluated on)."""
    newest: dict[tuple, Entry] = {}
    for e in selection:  # entries are oldest first: the newest file of each candidate wins
        if e.kind == "ppft_stage2" and e.dataset.lower() == ds and not _get(e, "blind"):
            newest[
                (
                    layout_of(e)[0],
                    e.params.get("epochs"),
                    _get(e, "train_seed"),
                    _get(e, "epsilon"),
                    _get(e, "k"),
                    validation_share(e),
                    _part(e),
                )
            ] = e
    return newest


def _mean_scores(validated: Sequence[Entry], key: Callable[[Entry], Any]) -> dict[Any, tuple[float, float]]:
    """Validation (open-answer, 4-option) accuracy, each the mean over the trainings that share ``key``; runs without
    an open-answer figure are left out."""
    scores: dict[Any, list[tuple[float, float]]] = {}
    for e in validated:
        if e.values("acc_open"):
            mcqa = e.mean("acc_mcqa") if e.values("acc_mcqa") else float("nan")
            scores.setdefault(key(e), []).append((e.mean("acc_open"), mcqa))
    return {c: (sum(o for o, _ in v) / len(v), sum(m for _, m in v) / len(v)) for c, v in scores.items()}


def _validation_means(validated: Sequence[Entry], eps: Any, k: Any) -> dict[tuple[str, Any], tuple[float, float]]:
    """:func:`_mean_scores` of each candidate at (eps, k), by (layout name, epochs)."""
    return _mean_scores(
        [e for e in validated if (_get(e, "epsilon"), _get(e, "k")) == (eps, k)],
        lambda e: (layout_of(e)[0], e.params.get("epochs")),
    )


def _best_first(scores: dict[Any, tuple[float, float]]) -> list[tuple[Any, tuple[float, float]]]:
    """Candidates best first: by validation open-answer, ties by 4-option (the other target). Means of the same
    prompt counts over different seeds can differ in the last bits: open-answer is compared to 9 decimals."""
    return sorted(scores.items(), key=lambda item: (-round(item[1][0], 9), -item[1][1]))


def _recipe_name(epochs: Any, layout: dict[str, Any]) -> str:
    """ "24 epochs" for PPFT's default optimisation settings, "24 epochs, stage-2 lr 0.0005" for another."""
    return f"{epochs} epochs, {settings_name(layout)}" if layout else f"{epochs} epochs"


def _ppft_recipe_scores(validated: Sequence[Entry]) -> dict[tuple[Any, tuple], tuple[float, float]]:
    """Validation (open-answer, 4-option) accuracy, each the mean over the candidate's trainings, of PPFT's own client
    and layout at the targets' point (width-matched eps, k=4), by (stage-2 length, optimisation settings: ``()`` for
    PPFT's defaults, else the one :data:`~textfree.ppft.report.layouts._OPTIMISATION_KEYS` layout item it sets)."""
    ppft = [
        e
        for e in validated
        if (_get(e, "epsilon"), _get(e, "k")) == (WIDTH_MATCHED, 4) and set(layout_of(e)[1]) <= _OPTIMISATION_KEYS
    ]
    return _mean_scores(ppft, lambda e: (e.params.get("epochs"), tuple(layout_of(e)[1].items())))


def _ranked_recipes(validated: Sequence[Entry]) -> list[tuple[tuple[Any, tuple], tuple[float, float]]]:
    """:func:`_ppft_recipe_scores`, best first (:func:`_best_first`)."""
    return _best_first(_ppft_recipe_scores(validated))


def selected_recipe(selection: Sequence[Entry], ds: str) -> tuple[Any, dict[str, Any]] | None:
    """(stage-2 length, optimisation settings: ``{}`` for PPFT's defaults, else e.g. ``{"optim": (5e-4, 0.0)}``) of
    PPFT's own client and layout that scored the best validation open-answer accuracy at the targets' point
    (width-matched eps, k=4; ties: the better 4-option), when two or more such candidates were run there; None
    otherwise. Table 1's PPFT row at that point, and so the issue's verdicts, are read with this recipe where it was
    run on every training row with its own upper bound. Only settings that change how stage 2 optimises compete
    here: a candidate that changes what the client sends or what the server reads or trains on is a layout of its
    own (its section), never Table 1's PPFT row."""
    ranked = _ranked_recipes([e for e in _newest_candidates(selection, ds).values() if _part(e) == "validation"])
    if len(ranked) < 2:
        return None
    epochs, layout = ranked[0][0]
    return epochs, dict(layout)


def table_selection(selection: Sequence[Entry], heldout: Sequence[Entry], ds: str) -> list[str]:
    """The section's table and its choice per (eps, k) for dataset ``ds``; empty when no such run exists."""
    newest = _newest_candidates(selection, ds)
    if not newest:
        return []
    out = [
        "| candidate | stage-2 epochs | training seed | eps | k | held back | evaluated on (records) | 4-option acc | "
        "open-answer acc | open, no name | open, random slots (count only) | result file |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (name, epochs, seed, eps, k, share, part), e in newest.items():
        n = int(e.mean("n_heldout")) if e.values("n_heldout") else "?"
        out.append(
            f"| {name} | {epochs} | {seed} | {_eps_label(eps)} | {k} | {share:.0%} | {part} ({n}) | "
            + " | ".join(_fmt(e, m) for m in _METRICS)
            + f" | `{e.source}` |"
        )
    validated = [e for e in newest.values() if _part(e) == "validation"]
    choices = _choices(validated, heldout, ds)
    ranked = _ranked_recipes(validated)
    if len(ranked) >= 2:
        (length, layout), _ = ranked[0]
        best = _recipe_name(length, dict(layout))
        stage2 = [e for e in heldout if e.kind == "ppft_stage2" and e.dataset.lower() == ds]
        if layout and not _table1_ppft(stage2, (length, dict(layout)))[2]:  # Table 1 fell back to the default settings
            read = (
                f"Selected: {best}. **It has not been run on every training row with its own upper bound, so Table 1's "
                f"PPFT row and the issue's verdicts stay at PPFT's default optimisation settings, {length} epochs** "
                "where "
                "that row was run."
            )
        else:
            read = (
                f"**Table 1's PPFT row and the issue's verdicts are read at {best}** where that row was run on every "
                "training row with its own upper bound."
            )
        choices.append(
            f"- PPFT's own client and layout alone, eps {_eps_label(WIDTH_MATCHED)}, k=4: validation open-answer "
            "(4-option, the tie-break) by stage-2 length and optimisation settings: "
            + "; ".join(f"{_recipe_name(ep, dict(lay))} {o:.4f} ({m:.4f})" for (ep, lay), (o, m) in ranked)
            + ". "
            + read
        )
    return out + ([""] + choices if choices else [])


def _part(e: Entry) -> str:
    return "validation" if e.extra.get("split") == "validation" else "held-out"


def _choices(validated: Sequence[Entry], heldout: Sequence[Entry], ds: str) -> list[str]:
    """Per (eps, k): the candidate with the highest mean validation open-answer accuracy over its trainings, and the
    held-out figure of the same row trained on every training row."""
    stage2 = [e for e in heldout if e.kind == "ppft_stage2" and e.dataset.lower() == ds]
    lines = []
    for eps, k in sorted({(_get(e, "epsilon"), _get(e, "k")) for e in validated}, key=str):
        mean = _validation_means(validated, eps, k)
        if len(mean) < 2:
            continue
        ranked = _best_first(mean)
        (name, epochs), _ = ranked[0]
        ranking = "; ".join(f"{n}, {ep} epochs {o:.4f}" for (n, ep), (o, _) in ranked)
        lines.append(
            f"- eps {_eps_label(eps)}, k={k}: validation open-answer (mean over the candidate's trainings; ties: the "
            f"better 4-option): {ranking}. "
            f"**Selected: {name}, {epochs} epochs.**"
        )
        layout = next(layout_of(e)[1] for e in validated if (layout_of(e)[0], e.params.get("epochs")) == (name, epochs))
        if (eps, k) == (WIDTH_MATCHED, 4):  # the targets' point, the one row _trainings reads
            lines.append("  - " + _heldout_line(stage2, _trainings(stage2, epochs, **layout), epochs, layout))
    return lines


def _heldout_line(stage2: Sequence[Entry], trainings: Sequence[Entry], epochs: Any, layout: dict[str, Any]) -> str:
    if not trainings:
        return "its held-out figure trained on every training row: not run with these settings at this length."
    upper = _latest(stage2, blind=False, epsilon=None, epochs=epochs, **layout) or _latest(
        stage2, blind=False, epsilon=None, **layout
    )
    parts = []
    for task, label in (("mcqa", "4-option"), ("open", "open-answer")):
        means = _training_means(trainings, f"acc_{task}")
        if means is None:
            continue
        p = sum(means) / len(means)
        share = (
            f" = {_ratio(p, upper.mean(f'acc_{task}'))} of its upper bound {upper.mean(f'acc_{task}'):.4f}"
            if upper
            else ""
        )
        parts.append(f"{label} {p:.4f}{share}")
    return (
        f"its held-out figure trained on every training row, over {len(trainings)} training(s) (the tables above): "
        + "; ".join(parts)
        + "."
    )
