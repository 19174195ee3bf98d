"""The Fig. 6 section of docs/results/rapt.md: which part-of-speech categories PCT2T privatizes, against privacy and
SST-2 utility (Li et al., section V-E). Nothing is recomputed.

Reads the ``rapt_finetune`` rows of :mod:`.report` whose ``pos`` is neither null (T2T) nor the default set (row kind
``"pos"``), and puts beside each of them, at the same task, method and eta: the default-set PCT2T row, the T2T row and
the clean row (eta = inf); the share of the test words privatized and replaced (the kind's release figures; a run
without them: its privatized words per example over the test sentences' words, the same sentences) and the
``ner_attack`` row of the same eta and POS set (entities surviving unchanged, 1 - entity F1).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

__all__ = ["pos_key", "pos_title", "PAPER_FIG6", "pos_groups", "pos_section", "pos_figure"]

INF = math.inf
DEFAULT_SET = frozenset({"noun", "verb", "pron", "adp"})
ALL_SET = frozenset({"noun", "verb", "pron", "adp", "adj", "adv", "det", "num", "prt", "conj", ".", "x"})
_TAG_TITLES = {".": "symbols and punctuation ('.')", "conj": "CONJ (coordinating only)"}
_ALIASES = {"pronoun": "pron", "prep": "adp", "preposition": "adp"}
#: RAPT section V-E on Fig. 6 (eta 100, BERT-base; the bars' values are not in the paper's text, only this reading).
PAPER_FIG6 = {
    "noun": "effective for privacy (in the paper's set)",
    "verb": "effective for privacy (in the paper's set)",
    "pron": "in the paper's set; no finding stated",
    "adp": "in the paper's set; no finding stated",
    "adj": "a bar; no finding stated",
    ".": "the Symbol bar; no finding stated",
    "det": "relatively weak privacy; kept for syntax",
    "conj": "relatively weak privacy; kept for syntax",
    "all": "the 'All' bar (every tag)",
    "default": "the paper's set in every experiment",
    "t2t": "not in Fig. 6 (Fig. 4: privacy comparable to PCT2T's)",
    "clean": "—",
}


def pos_key(pos: Any) -> str | None:
    """A run's ``pos`` param as one name: None (T2T), 'default' (NOUN, VERB, PRON, ADP in any spelling or order),
    'all' (every universal tag), else its lower-case categories joined by commas in the order given."""
    if pos is None:
        return None
    items = pos if isinstance(pos, list) else str(pos).split(",")
    cats = [_ALIASES.get(c.strip().lower(), c.strip().lower()) for c in items if str(c).strip()]
    if cats in (["default"], ["all"]):
        return cats[0]
    if set(cats) == DEFAULT_SET:
        return "default"
    if set(cats) == ALL_SET:
        return "all"
    return ",".join(dict.fromkeys(cats))


def pos_title(key: str | None) -> str:
    if key is None:
        return "T2T (every word, any category)"
    if key == "default":
        return "NOUN, VERB, PRON, ADP (default)"
    if key == "all":
        return "all categories"
    return ", ".join(_TAG_TITLES.get(c, c.upper()) for c in key.split(","))


def _paper(key: str | None) -> str:
    if key is None:
        return PAPER_FIG6["t2t"]
    cats = key.split(",")
    if len(cats) == 1:
        return PAPER_FIG6.get(cats[0], "not in Fig. 6")
    return "; ".join(f"{c.upper()}: {PAPER_FIG6[c]}" for c in cats if c in PAPER_FIG6) or "not in Fig. 6"


def _num(metrics: dict, name: str) -> float:
    value = metrics.get(name)
    return math.nan if value is None else float(value)


def _test_set(row: Any) -> tuple:
    """What fixes a run's test sentences: its task's test subset (``test_limit``, ``data_seed``; the config's
    defaults 872 and 0)."""
    return row.task, row.params.get("test_limit", 872), row.params.get("data_seed", 0)


def pos_groups(res: Any, same: Callable[[float, float], bool]) -> list[dict[str, Any]]:
    """One entry per (task, method, eta) with POS-set rows: ``{"task", "method", "eta", "entries"}``, the entries
    (``key``, ``title``, ``acc``, ``privatized``, ``replaced``, ``ner``: the matching ``ner_attack`` row or None,
    ``paper``) ordered clean, the POS sets by share privatized, the default set, T2T."""
    groups = []
    for task, method, eta in sorted({(r.task, r.method, r.eta) for r in res.rows if r.row == "pos"}):
        group = [r for r in res.rows if (r.task, r.method) == (task, method)]

        def words(row: Any) -> float:
            """Words per test example of ``row``'s test sentences: its own, or a run's on the same subset."""
            same_test = [r for r in group if r.metrics.get("mean_words") and _test_set(r) == _test_set(row)]
            return _num(same_test[0].metrics, "mean_words") if same_test else math.nan

        def entry(key: str | None, title: str, row: Any, clean: bool = False) -> dict[str, Any]:
            m = row.metrics if row is not None else {}
            privatized, replaced = _num(m, "privatized_share"), _num(m, "replaced_share")
            if math.isnan(privatized) and row is not None:  # an older run: its words per example, same sentences
                privatized = 0.0 if clean else _num(m, "mean_privatized_words") / words(row)
            if clean and row is not None:
                replaced = 0.0
            ner = inversion = attributes = None
            if not clean:
                ner = _at(res.ner, same, eta, key)
                inversion = _at(res.inversion, same, eta, key)
                attributes = _at(res.attributes, same, eta, key)
            return {
                "key": "clean" if clean else key,
                "title": title,
                "acc": math.nan if row is None else row.acc,
                "privatized": privatized,
                "replaced": replaced,
                "ner": ner,
                "inversion": inversion,
                "attributes": attributes,
                "paper": PAPER_FIG6["clean"] if clean else _paper(key),
            }

        def find(row_kind: str, at: float) -> Any:
            return next((r for r in group if r.row == row_kind and same(r.eta, at)), None)

        sets = [entry(pos_key(r.params.get("pos")), pos_title(pos_key(r.params.get("pos"))), r)
                for r in group if r.row == "pos" and same(r.eta, eta)]  # fmt: skip
        sets.sort(key=lambda e: (math.isnan(e["privatized"]), e["privatized"]))
        entries = [entry(None, "none (no privatization)", find("t2t", INF), clean=True)] + sets
        entries += [
            entry("default", pos_title("default"), find("pct2t", eta)),
            entry(None, pos_title(None), find("t2t", eta)),
        ]
        groups.append({"task": task, "method": method, "eta": eta, "entries": entries})
    return groups


def _at(rows: list[dict[str, Any]], same: Callable[[float, float], bool], eta: float, key: str | None) -> Any:
    """The newest attack row (``rows`` oldest first) at ``eta`` over the POS set ``key``, or None."""
    return next(
        (n for n in reversed(rows) if n.get("eta") is not None and same(float(n["eta"]), eta)
         and pos_key(n.get("pos")) == key),
        None,
    )  # fmt: skip


def _clean_ner(res: Any, same: Callable[[float, float], bool], eta: float) -> float | None:
    """1 - entity F1 of the NER attacker on the clear held-out texts, from a ``ner_attack`` row at ``eta``."""
    rows = [n for n in res.ner if n.get("eta") is not None and same(float(n["eta"]), eta)]
    return next((n["clean_empirical_privacy"] for n in rows if n.get("clean_empirical_privacy") is not None), None)


def _short(key: str | None) -> str:
    """A POS set's name on the figure's axis."""
    if key is None:
        return "T2T"
    if key == "default":
        return "NOUN,VERB,\nPRON,ADP"
    return "all" if key == "all" else key.upper().replace(".", "SYM").replace(",", ",\n")


def _pct(value: Any) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def pos_section(res: Any, same: Callable[[float, float], bool], eta_title: Callable[[float], str],
                method_title: Callable[[str], str], figure: str | None = None) -> list[str]:  # fmt: skip
    lines = ["## Part-of-speech categories: privacy and utility (Fig. 6 shape)", ""]
    groups = pos_groups(res, same)
    if not groups:
        return lines + ["No POS-set cell given (`examples/cells/rapt/sst2_lora_pos.yaml`)."]
    lines += [
        "PCT2T privatizes only the words of the chosen categories (each within its category) and sends the rest",
        "in clear. Fig. 6 of the paper (BERT-base, eta 100, one category per bar, and All) finds Determiners and",
        "Conjunctions weak for privacy and Nouns and Verbs effective; its bar values are not in the paper's text,",
        "so the paper column quotes its reading (section V-E). Ours: one eta for every set, so a set's share of",
        "words replaced follows from what it selects. *privatized* / *replaced*: share of the test sentences'",
        "words that went through the mechanism / came out as another word (one release, the test noise seed; a",
        "run without the release figures: its privatized words per sentence over the sentences' words, replaced",
        "not recorded). *NER*: the NER attack (presidio-synth, 200 held-out texts, `ner_pos` cell) at the same",
        "eta: *entities kept* = entities whose words all come out unchanged (what the attacker can still read),",
        "*NER privacy* = 1 - entity F1 (Fig. 6's NER panel). *inversion privacy*: 1 - the share of the words of",
        "100 held-out Pri-DDX prompts recovered at their position by the better of reading the release and the",
        "channel inverter (`substitution_pos` cell, mean of its seeds; Fig. 6's embedding-inversion panel).",
        "*symptoms privacy*: 1 - the symptoms recall of the best attribute attacker on the same prompts' release",
        "(`attributes_pos` cell; Fig. 6's attribute panel). Accuracy: SST-2 dev sentences privatized the same way;",
        "a run of several seeds gives their mean.",
        "",
    ]
    header = ["POS set", "privatized", "replaced", "NER: entities kept", "NER privacy", "inversion privacy",
              "symptoms privacy", "accuracy", "paper (Fig. 6, section V-E)"]  # fmt: skip
    for g in groups:
        lines += [f"### {g['task'].upper()}, {method_title(g['method'])}, {eta_title(g['eta'])}", ""]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for e in g["entries"]:
            ner = e["ner"] or {}
            shares = [_pct(e["privatized"]), _pct(e["replaced"])]
            recovered = (e["inversion"] or {}).get("word_recovery_best")
            symptoms = (e["attributes"] or {}).get("symptoms_recall_best")
            attack = [_pct(ner.get("entity_survival")), _pct(ner.get("empirical_privacy")),
                      _pct(None if recovered is None else 1 - recovered),
                      _pct(None if symptoms is None else 1 - symptoms)]  # fmt: skip
            cells = [e["title"], *shares, *attack, _pct(e["acc"]), e["paper"]]
            lines.append("| " + " | ".join(cells) + " |")
        clean = _clean_ner(res, same, g["eta"])
        if clean is not None:
            lines += ["", f"NER privacy on the clean held-out texts (the attacker's reference): {_pct(clean)}."]
        lines.append("")
    if figure:
        lines += [f"![POS categories: privacy and accuracy]({figure})", ""]
    return lines[:-1] if lines[-1] == "" else lines


def pos_figure(res: Any, same: Callable[[float, float], bool], png: Path) -> bool:
    """Two panels per group: privacy bars per POS set (shares of words replaced, NER entities changed, NER privacy)
    and accuracy bars with the clean line. False (nothing written) without POS-set rows."""
    from ..atomic import atomic_save_figure

    groups = pos_groups(res, same)
    if not groups:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2 * len(groups), 1, figsize=(11, 8 * len(groups)), squeeze=False)
    for k, g in enumerate(groups):
        ax_p, ax_u = axes[2 * k, 0], axes[2 * k + 1, 0]
        entries = [e for e in g["entries"] if e["key"] != "clean"]
        labels = [_short(e["key"]) for e in entries]
        x = range(len(entries))
        series = [
            ("SST-2 words replaced", [e["replaced"] for e in entries]),
            ("NER: entities changed", [1 - (e["ner"] or {}).get("entity_survival", math.nan) for e in entries]),
            ("NER privacy (1 - F1)", [(e["ner"] or {}).get("empirical_privacy", math.nan) for e in entries]),
            ("inversion privacy", [1 - _num(e["inversion"] or {}, "word_recovery_best") for e in entries]),
            ("symptoms privacy", [1 - _num(e["attributes"] or {}, "symptoms_recall_best") for e in entries]),
        ]
        width = 0.8 / len(series)
        for i, (name, values) in enumerate(series):
            at = [k + (i - (len(series) - 1) / 2) * width for k in x]
            ax_p.bar(at, [100 * v for v in values], width, label=name)
            for k, v in zip(at, values):
                if math.isnan(v):
                    ax_p.text(k, 1, "n/r", ha="center", fontsize=7, rotation=90)
        clean_ner = _clean_ner(res, same, g["eta"])
        if clean_ner is not None:
            ax_p.axhline(100 * clean_ner, color="tab:green", ls=":", lw=1, label="NER privacy on clear text")
        ax_p.set_xticks(list(x), labels, fontsize=8)
        ax_p.set_ylabel("%")
        ax_p.set_title(f"privacy, eta {g['eta']:g} (higher: more private; n/r: not recorded)")
        ax_p.legend(fontsize=8)
        ax_p.grid(axis="y", alpha=0.3)
        ax_u.bar(list(x), [100 * e["acc"] for e in entries], 0.6, color="tab:green")
        clean = g["entries"][0]["acc"]
        if not math.isnan(clean):
            ax_u.axhline(100 * clean, color="grey", lw=1, label=f"no privatization ({100 * clean:.1f})")
            ax_u.legend(fontsize=8, loc="lower left")
        for k, e in zip(x, entries):
            if not math.isnan(e["acc"]):
                ax_u.text(k, 100 * e["acc"] + 0.5, f"{100 * e['acc']:.1f}", ha="center", fontsize=8)
        ax_u.set_xticks(list(x), labels, fontsize=8)
        ax_u.set_ylim(50, 100)
        ax_u.set_ylabel("accuracy (%)")
        ax_u.set_title(f"{g['task'].upper()} accuracy, eta {g['eta']:g}")
        ax_u.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    atomic_save_figure(fig, png, dpi=110)
    plt.close(fig)
    return True
