"""The NER section of ``docs/results/attacks.md``: entity F1 and empirical privacy (1 - F1) of the ``ner_attack`` cell
kind on T2T / PCT2T text (RAPT IV-A3), one table per cell, generated from its newest result file."""

from __future__ import annotations

from .report_payloads import PayloadCell, _fmt, _num

__all__ = ["ner_section"]

_HEADER = "| eta | word eps | replaced | entity F1 | span F1 | empirical privacy | clean F1 | survive | untouched |"


def _release(pos) -> str:
    return f"PCT2T, {pos if isinstance(pos, str) else ', '.join(pos)}" if pos else "T2T"


def _grids_pos(c: PayloadCell) -> bool:
    return "params.pos" in (c.cell.get("grid") or {})


def _title(c: PayloadCell) -> str:
    release = "T2T or PCT2T per row" if _grids_pos(c) else _release((c.cell.get("params") or {}).get("pos"))
    sizes = ""
    if c.points:
        p = c.points[0][1]
        sizes = f"; {p.mean('n_texts'):.0f} held-out texts, {p.mean('n_entities'):.0f} entities"
        sizes += f", tagger trained on {p.mean('n_train_texts'):.0f} clean texts"
    return f"### `{c.name}` ({c.cell.get('dataset')}, {release}{sizes})"


def ner_section(cells: list[PayloadCell]) -> list[str]:
    """Markdown lines: per eta, the entity and span F1 on the released text, empirical privacy, the clean reference,
    the share of entities whose words survive and of those the mechanism never touched, and the word guarantee."""
    lines = [
        "",
        "## NER attack on T2T / PCT2T text (RAPT IV-A3)",
        "",
        "A token classifier fine-tuned on clean annotated text (held-out templates) tags the released text.",
        "*Entity F1*: a found entity counts when its position, type and words read from the released text equal the",
        "original entity's (the attacker has the true string); *span F1*: position and type only. *Empirical",
        "privacy* = 1 - entity F1 (RAPT's measure); *clean F1*: the same tagger on the unprivatized texts. *Survive*:",
        "entities whose words all come out unchanged; *untouched*: entities none of whose words went through the",
        "mechanism (digits, out-of-table words, PCT2T's categories left out), released verbatim and not covered by the",
        "guarantee.",
    ]
    if not cells:
        return lines + ["", "No ner_attack result files were given."]
    for c in cells:
        per_pos = _grids_pos(c)  # a grid over the privatized categories (RAPT Fig. 6): one release per row
        lines += [
            "",
            _title(c),
            "",
            ("| release " if per_pos else "") + _HEADER,
            ("|---" if per_pos else "") + "|---|---|---|---|---|---|---|---|---|",
        ]
        for point, p in c.points:
            params = c.cell.get("params") or {}
            eta = point.get("params.eta", params.get("eta"))
            release = f"| {_release(point.get('params.pos', params.get('pos')))} " if per_pos else ""
            lines.append(
                f"{release}| {eta} | {_num(p, 'word_epsilon')} | {_fmt(p, 'replacement_rate', True)} | "
                f"{_fmt(p, 'entity_f1')} | {_fmt(p, 'span_f1')} | {_fmt(p, 'empirical_privacy')} | "
                f"{_fmt(p, 'clean_entity_f1')} | {_fmt(p, 'entity_survival', True)} | "
                f"{_fmt(p, 'entity_unprotected', True)} |"
            )
    return lines
