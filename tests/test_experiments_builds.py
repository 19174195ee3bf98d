"""The stage-1 build an attack point records: which PPFT runs it reads, and the builds they descend from."""

import json
from pathlib import Path

from textfree.experiments.kinds._builds import read_runs, record_read_builds
from textfree.experiments.registry import RunContext
from textfree.training.runs import TRAIN_CONFIG, run_fingerprint


def _stage1(root: Path, weights: str) -> Path:
    (root / "encoder").mkdir(parents=True)
    (root / "encoder" / "config.json").write_text(json.dumps({"weights": weights}))
    (root / "summary.json").write_text(json.dumps({"stage": "stage1"}))
    return root


def _stage2(root: Path, init: Path, fingerprint: str) -> Path:
    root.mkdir(parents=True)
    (root / "summary.json").write_text(json.dumps({"stage": "stage2"}))
    (root / TRAIN_CONFIG).write_text(json.dumps({"config": {"init": str(init)}, "init_fingerprint": fingerprint}))
    return root


def test_read_runs_finds_the_ppft_runs_a_point_reads_and_skips_what_it_writes(tmp_path):
    a, b = _stage1(tmp_path / "a", "1"), _stage1(tmp_path / "b", "2")
    s2 = _stage2(tmp_path / "s2", a, run_fingerprint(a))
    plain = tmp_path / "decoder"
    plain.mkdir()
    assert read_runs("default", {}) == []
    assert read_runs(str(a / "encoder"), {}) == [a]  # a run's encoder/ is that run
    assert read_runs(str(plain), {"k": 4, "epochs": 2}) == []  # a directory that is no run
    assert read_runs(str(a / "encoder"), {"init": {"encoder": str(a / "encoder"), "decoder": str(plain)}}) == [
        a
    ]  # once
    assert read_runs("default", {"model": str(s2), "center": [None, str(b)], "missing": str(tmp_path / "gone")}) == [
        s2,
        b,
    ]
    assert read_runs("default", {"out": str(s2)}) == []  # written, not read


def test_record_read_builds_names_one_build_or_each_of_several(tmp_path):
    a, b = _stage1(tmp_path / "a", "1"), _stage1(tmp_path / "b", "2")
    build_a, build_b = run_fingerprint(a), run_fingerprint(b)
    assert build_a != build_b
    s2 = _stage2(tmp_path / "s2", a, build_a)

    def recorded(encoder, params):
        context = RunContext(cell=None)
        record_read_builds(context, encoder, params)
        return context.provenance

    assert recorded(str(a / "encoder"), {"model": str(s2)}) == {
        "stage1_build": build_a
    }  # the stage-2 run descends from a
    assert recorded(str(b / "encoder"), {"model": str(s2)}) == {"stage1_build": ", ".join(sorted([build_a, build_b]))}
    assert recorded("default", {"k": 4}) == {}  # reads no PPFT run: nothing recorded
    stale = _stage2(tmp_path / "stale", a, "0" * 64)  # its init was rebuilt since: no build to name
    assert recorded("default", {"model": str(stale)}) == {}
