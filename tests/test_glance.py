"""docs/results/index.md (results at a glance) is generated from the committed result files through the report
modules' own summaries: it matches a fresh build, its figures are the detail pages' figures, and a synthetic result
folder gives the figures computed by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from textfree.glance import DEFAULT_COMMAND, build_glance
from textfree.results.files import ResultsError

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results" / "index.md"
DETAIL = ROOT / "docs" / "results"


@pytest.fixture(scope="module")
def glance() -> str:
    return build_glance(ROOT / "results", command=DEFAULT_COMMAND)


def _section(text: str, heading: str) -> str:
    """The body of the ``## heading...`` section of a Markdown page (up to the next ``## ``)."""
    start = text.index("\n## " + heading)
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _rows(text: str) -> list[list[str]]:
    """The body rows of the Markdown tables in ``text``, as lists of cells."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines if not line.startswith("| ---")]


def test_committed_page_is_the_one_the_committed_results_give(glance):
    assert PAGE.read_text(encoding="utf-8") == glance, (
        "docs/results/index.md is stale: regenerate it with `textfree report glance results --out "
        "docs/results/index.md` (after the system's own report)"
    )
    assert len(glance.encode()) < 10_000  # a page to read first, not another long one
    for page in ("ppft.md", "snd.md", "rapt.md", "attacks.md"):
        assert f"]({page})" in glance  # each system links its detail page


def test_ppft_figures_are_table_1s(glance):
    detail = (DETAIL / "ppft.md").read_text(encoding="utf-8")
    table1 = _section(glance, "PPFT").split("PPFT's Table 1 baselines")[0]
    rows = [r for r in _rows(table1) if r[0] != "dataset"]
    assert {r[0] for r in rows} == {"Pri-DDX", "Pri-SLJA"}
    for dataset, label, four, open_, paper in rows:
        table1 = _section(detail, f"{dataset}: Table 1 shape").split("\n### ")[0]  # Table 1 itself, no subsection
        row = next(r for r in _rows(table1) if r[0] == label)  # the same label, read in that dataset's Table 1
        # Table 1's columns: row, epochs, 4-option, ..., open-answer (6th), ..., paper 4-option (last)
        assert row[2].split(" ")[0] == four and row[5].split(" ")[0] == open_ and row[-1] == paper, (dataset, label)
    # one row checked by hand against docs/results/ppft.md: Pri-DDX, PPFT at the paper's eps 75, and the paper's
    ddx = {r[1]: r for r in rows if r[0] == "Pri-DDX"}
    assert ddx["PPFT, eps 75 (paper's), k=4"][2:] == ["0.974", "0.956", "0.4537"]


def test_ppft_baseline_rows_are_the_detail_pages(glance):
    """Each row of the glance's baselines table carries the figures of the PPFT page's "Baselines (Table 1)" row."""
    detail = (DETAIL / "ppft.md").read_text(encoding="utf-8")
    baselines = _rows(detail.split("### Pri-DDX: Baselines (Table 1)")[1].split("\n## ")[0])
    glance_rows = _rows(_section(glance, "PPFT").split("PPFT's Table 1 baselines")[1])[1:]
    prefixes = {"word-level d_chi": "d_chi, word level", "Paraphrase": "Paraphrase (Utpala", "PrivacyRestore":
                "PrivacyRestore (Zeng", "PPFT": "PPFT (the fast pipeline", "upper bound": "upper bound: clear text",
                "the options alone": "control: the options alone"}  # fmt: skip
    assert len(glance_rows) == len(prefixes)
    for name, four, open_, paper in glance_rows:
        prefix = next(v for k, v in prefixes.items() if name.startswith(k))
        row = next(r for r in baselines if r[0].startswith(prefix))
        # the detail row: name, what is sent, eps, 4-option, open, paper, ...
        assert (f"{float(row[3]):.3f}", f"{float(row[4]):.3f}") == (four, open_), name
        assert paper == "—" or row[5].startswith(paper), name
    assert "Target met: PPFT ahead of all three baselines on both tasks." in glance


def test_snd_rows_are_the_summary_targets(glance):
    detail = _rows(_section((DETAIL / "snd.md").read_text(encoding="utf-8"), "Summary: the targets"))
    ours = [r for r in _rows(_section(glance, "Split-N-Denoise")) if r[0] != "target"]
    assert len(ours) == len(detail) - 1 >= 5
    for row in ours:
        assert any(d[:3] == row[:3] and d[3].startswith(row[3]) for d in detail), row
    met = sum(r[3] == "**met**" for r in ours)
    assert f"{met} of {len(ours)} targets met" in glance


def test_attack_rows_are_the_verdicts_points(glance):
    detail = (DETAIL / "attacks.md").read_text(encoding="utf-8")
    rows = [r for r in _rows(_section(glance, "Attacks")) if r[0] != "noise (cell)"]
    assert rows
    for noise, point, nn, bc, ratio, verdict, _ in rows:
        cell = re.search(r"\(`([^`]+)`\)$", noise).group(1)
        sentence = next(line for line in detail.splitlines() if line.startswith("* ") and f"(`{cell}`): " in line)
        assert f"at {point}" in sentence, (cell, point)
        assert f"NN recovers {nn} and BeamClean (estimated noise) {bc}: {ratio}" in sentence, cell
        assert sentence.split(f"(`{cell}`): ", 1)[1].startswith(verdict), cell


# ------------------------------------------------------------------------------------------- synthetic results
def _rapt_result(folder: Path, name: str, base: dict, etas: list, accs: list) -> None:
    points = [{"eta": e} for e in etas]
    results = [
        {"point": {"params.eta": p["eta"]}, "resolved": {"mechanism": None, "params": base | p, "attack": None},
         "metrics": {"acc": {"mean": a, "stderr": None, "values": [a]}}}
        for p, a in zip(points, accs)
    ]  # fmt: skip
    cell = {"name": name, "kind": "rapt_finetune", "encoder": "default", "params": base,
            "grid": {"params.eta": etas}, "seeds": [0]}  # fmt: skip
    data = {"format": "textfree.results", "format_version": 1, "cell": cell, "cell_source": None,
            "kind": "rapt_finetune", "grid_axes": ["params.eta"], "seeds": [0], "results": results, "versions": {},
            "git": None, "date": "2026-01-01T00:00:00+00:00", "host": {}}  # fmt: skip
    (folder / f"{name}-20260101T000000Z.json").write_text(json.dumps(data))


def _synthetic_rapt(root: Path) -> Path:
    folder = root / "rapt"
    folder.mkdir(parents=True)
    lora = {"task": "sst2", "method": "lora"}
    _rapt_result(folder, "t2t", lora | {"pos": None, "plain_length": 0}, [None, 62.7], [0.90, 0.60])
    _rapt_result(folder, "pct2t", lora | {"pos": "default", "plain_length": 0}, [62.7], [0.65])
    _rapt_result(folder, "rapt", lora | {"pos": "default", "plain_length": 40}, [None, 62.7], [0.91, 0.70])
    rows = [{"mechanism": "pct2t", "paper_eta": 125, "paper_rate": 0.45, "rate_at_paper_eta": 0.1, "matched_eta": 62.7}]
    (folder / "matched_eta.json").write_text(json.dumps({"format": "textfree.rapt.matched_eta", "rows": rows}))
    return root


def test_synthetic_rapt_figures_and_missing_systems(tmp_path):
    text = build_glance(_synthetic_rapt(tmp_path / "results"))
    rapt = _rows(_section(text, "RAPT"))
    # ours at eta 62.7 (the paper's 125 by the matched rate) beside the paper's Table II (BERT-base, LoRA) at 125
    assert ["sst2 LoRA", "62.7 (paper 125)", "60.0 / 65.0 / 70.0", "68.9 / 80.2 / 81.1"] in rapt
    # without privatization PCT2T is T2T; the paper's eta = inf column
    assert ["sst2 LoRA", "inf", "90.0 / 90.0 / 91.0", "91.4 / 91.9 / 91.8"] in rapt
    # the order T2T < PCT2T < RAPT holds (met); +10 points over T2T is short of the paper's +12.2 (not met)
    assert "1 of 2 targets met" in text
    for system in ("ppft", "snd", "attacks"):
        assert f"No result files in `{(tmp_path / 'results' / system).as_posix()}`" in text


def test_no_results_at_all_is_an_error_and_the_cli_writes_nothing(tmp_path):
    from textfree.cli import app

    (tmp_path / "results").mkdir()
    with pytest.raises(ResultsError, match="no result files of any system"):
        build_glance(tmp_path / "results")
    out = tmp_path / "docs" / "index.md"
    res = CliRunner().invoke(app, ["report", "glance", str(tmp_path / "results"), "--out", str(out)])
    assert res.exit_code == 2 and "no result files of any system" in res.output and not out.exists()
    res = CliRunner().invoke(app, ["report", "glance", str(tmp_path / "nope"), "--out", str(out)])
    assert res.exit_code == 2 and "is not a directory" in res.output and not out.exists()


def test_cli_writes_the_page_naming_its_command(tmp_path):
    from textfree.cli import app

    root = _synthetic_rapt(tmp_path / "results")
    out = tmp_path / "site" / "index.md"
    res = CliRunner().invoke(app, ["report", "glance", str(root), "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text(encoding="utf-8")
    assert f"Generated by `textfree report glance {root.as_posix()} --out {out.as_posix()}`" in text
    assert text.startswith("# Results at a glance\n")
