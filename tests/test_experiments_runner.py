"""Running cells end to end with a tiny random encoder, the result JSON, and plots drawn from it."""

import json
import math
import re
from datetime import datetime

import pytest
import torch

from textfree.encoders import load_encoder, make_tiny_encoder_dir
from textfree.experiments import plot_results, register_cell_kind, registry, run_cell
from textfree.experiments.kinds.privatization import privatize_batch
from textfree.mechanisms import L2Laplace, SlotPrivatization
from textfree.results.files import REQUIRED_KEYS, ResultsError, format_results_table, load_results
from textfree.rng import seeded_generator

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TEXTS = [
    "The patient reports chest pain and shortness of breath since this morning.",
    "A child with a fever of 39 degrees and a rash on both arms.",
    "She has had migraines for ten years and now sees flashing lights.",
]
EPSILONS = [1, 30, 10000]
KS = [2, 4]
D = 32  # width of the tiny encoder


@pytest.fixture(scope="module")
def tiny_encoder_dir(tmp_path_factory):
    return make_tiny_encoder_dir(tmp_path_factory.mktemp("tiny_encoder"), hidden=D)


@pytest.fixture(scope="module")
def tiny_cell(tiny_encoder_dir):
    return {
        "name": "tiny_privatization",
        "kind": "privatization",
        "texts": TEXTS,
        "encoder": str(tiny_encoder_dir),
        "mechanism": {"name": "l2_laplace", "epsilon": 75},
        "params": {"k": 4},
        "grid": {"mechanism.epsilon": EPSILONS, "params.k": KS},
        "seeds": [0, 1],
        "notes": "test",
    }


@pytest.fixture(scope="module")
def run(tiny_cell, tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    path = run_cell(tiny_cell, out, progress=False)
    return path, json.loads(path.read_text())


def row(data, eps, k):
    (r,) = [r for r in data["results"] if r["point"] == {"mechanism.epsilon": eps, "params.k": k}]
    return r["metrics"]


# ------------------------------------------------------------------------------------------- the JSON
def test_result_file_has_every_required_key(run):
    path, data = run
    assert path.name.startswith("tiny_privatization-") and path.suffix == ".json"
    for key in REQUIRED_KEYS + ("cell_source", "kind", "grid_axes", "elapsed_s"):
        assert key in data, key
    assert data["format"] == "textfree.results" and data["format_version"] == 1
    assert data["cell"]["texts"] == TEXTS and data["cell"]["grid"]["params.k"] == KS
    assert data["seeds"] == [0, 1]
    assert {"python", "torch", "transformers", "numpy", "textfree"} <= set(data["versions"])
    assert data["versions"]["torch"] and data["versions"]["textfree"]
    assert data["git"] is None or {"commit", "dirty"} <= set(data["git"])
    assert datetime.fromisoformat(data["date"]).utcoffset().total_seconds() == 0
    assert data["host"]["cpu_count"] and data["host"]["platform"]
    assert len(data["results"]) == len(EPSILONS) * len(KS)
    for r in data["results"]:
        assert r["resolved"]["mechanism"]["epsilon"] == r["point"]["mechanism.epsilon"]
        for name, agg in r["metrics"].items():
            assert set(agg) == {"mean", "stderr", "values"}, name
            assert len(agg["values"]) == 2
    assert load_results(path)["cell"]["name"] == "tiny_privatization"
    assert "cosine" in format_results_table(data)


def test_cosine_falls_as_epsilon_falls(run):
    _, data = run
    for k in KS:
        cos = [row(data, eps, k)["cosine"]["mean"] for eps in EPSILONS]
        assert cos[0] < cos[1] < cos[2], (k, cos)
        assert cos[2] > 0.999  # E||z|| = 32 / 10000: the slots barely move
        assert cos[0] < 0.3  # E||z|| = 32 against unit slots


def test_noise_norm_and_privacy_losses(run):
    _, data = run
    for eps in EPSILONS:
        for k in KS:
            m = row(data, eps, k)
            assert m["expected_noise_norm"]["mean"] == pytest.approx(D / eps)
            assert m["noise_norm_ratio"]["mean"] == pytest.approx(1.0, abs=0.3)
            assert m["slot_epsilon"]["mean"] == pytest.approx(2 * eps)
            assert m["slot_epsilon"]["stderr"] == 0.0
            assert m["prompt_epsilon"]["mean"] == pytest.approx(2 * eps * m["slots_per_prompt"]["mean"])
            assert m["prompt_epsilon_max"]["mean"] >= m["prompt_epsilon"]["mean"]
    # halving k (4 -> 2) roughly doubles the slots
    assert row(data, 30, 2)["slots_per_prompt"]["mean"] > 1.8 * row(data, 30, 4)["slots_per_prompt"]["mean"]


def test_aggregate_is_mean_and_stderr_of_the_seed_values(run):
    _, data = run
    agg = row(data, 30, 4)["cosine"]
    a, b = agg["values"]
    assert agg["mean"] == pytest.approx((a + b) / 2)
    assert agg["stderr"] == pytest.approx(abs(a - b) / 2)  # sample std |a-b|/sqrt2, over sqrt2


def test_same_seeds_reproduce_the_numbers(run, tiny_cell, tmp_path):
    _, data = run
    again = json.loads(
        run_cell(
            {**tiny_cell, "grid": {"mechanism.epsilon": [30], "params.k": [4]}}, tmp_path, progress=False
        ).read_text()
    )
    assert again["results"][0]["metrics"]["cosine"]["values"] == row(data, 30, 4)["cosine"]["values"]


def test_kind_pipeline_equals_slot_privatization(tiny_encoder_dir):
    enc = load_encoder(str(tiny_encoder_dir))
    batch = enc.encode(TEXTS)
    priv = SlotPrivatization(noise=L2Laplace(20.0), k=3)
    expected, expected_mask = priv.apply(batch.hidden, batch.mask, generator=seeded_generator(7, warn=False))
    released, mask, noise_norm = privatize_batch(priv, batch.hidden, batch.mask, seeded_generator(7, warn=False))
    assert torch.equal(released, expected) and torch.equal(mask, expected_mask)
    assert noise_norm.shape == mask.shape and bool((noise_norm[mask] > 0).all())


# ------------------------------------------------------------------------------------------------ plots
def test_plot_results_writes_png_files(run, tmp_path):
    path, data = run
    written = plot_results([path], tmp_path / "plots")
    metrics = list(data["results"][0]["metrics"])
    assert [p.name for p in written] == [f"tiny_privatization-{m}.png" for m in metrics]
    for p in written:
        assert p.is_file() and p.read_bytes()[:8] == PNG_MAGIC
    only = plot_results(path, tmp_path / "one", x="params.k", y="cosine")
    assert [p.name for p in only] == ["tiny_privatization-cosine.png"]
    assert only[0].read_bytes()[:8] == PNG_MAGIC


def test_plot_results_rejects_unknown_axes_and_metrics(run, tmp_path):
    path, _ = run
    with pytest.raises(ValueError, match="not a grid axis"):
        plot_results([path], tmp_path, x="params.q")
    with pytest.raises(ValueError, match="no metric"):
        plot_results([path], tmp_path, y=["bleu"])


def test_plot_two_runs_of_one_cell_keep_both(run, tmp_path):
    path, data = run
    copy = tmp_path / "tiny_privatization-copy.json"
    copy.write_text(json.dumps(data))
    written = plot_results([path, copy], tmp_path / "p", y="cosine")
    assert len({p.name for p in written}) == 2


# ------------------------------------------------------------------------------------------ load_results
def test_load_results_names_the_bad_field(run, tmp_path):
    path, data = run
    for key in ("git", "results", "seeds"):
        bad = tmp_path / f"no_{key}.json"
        bad.write_text(json.dumps({k: v for k, v in data.items() if k != key}))
        with pytest.raises(ResultsError, match=rf"{bad}: field '{key}': is missing"):
            load_results(bad)
    broken = json.loads(json.dumps(data))
    broken["results"][1]["metrics"]["cosine"]["values"] = [0.5]
    bad = tmp_path / "short_values.json"
    bad.write_text(json.dumps(broken))
    with pytest.raises(ResultsError, match=r"results\[1\]\.metrics\.cosine\.values"):
        load_results(bad)
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(ResultsError, match="not valid JSON"):
        load_results(tmp_path / "junk.json")


# ------------------------------------------------------------------------------------ a custom cell kind
@pytest.fixture
def scratch_registry(monkeypatch):
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))


def test_custom_kind_runs_with_aggregation_filtering_and_nan(scratch_registry, tmp_path):
    calls = []

    @register_cell_kind("fake", metrics=("a", "b", "c"))
    def fake(cell, point, seed, context):
        calls.append((dict(point), seed))
        context.cached("setup", lambda: calls.append("setup"))
        return {"a": float(seed), "b": point.get("params.x", 0) * 10, "c": math.nan}

    cell = {
        "name": "fake",
        "kind": "fake",
        "params": {},
        "grid": {"params.x": [1, 2]},
        "seeds": [0, 1, 2],
        "metrics": ["a", "c"],
    }
    p1 = run_cell(cell, tmp_path, progress=False)
    p2 = run_cell(cell, tmp_path, progress=False)
    assert p1 != p2 and p1.is_file() and p2.is_file()  # never overwrites, even within one second
    assert calls.count("setup") == 2 and len(calls) == 2 * (1 + 2 * 3)
    data = load_results(p1)
    assert "NaN" not in p1.read_text()  # strict JSON: non-finite numbers are null
    m = data["results"][0]["metrics"]
    assert list(m) == ["a", "c"]  # only the requested metrics, in the requested order
    assert m["a"] == {"mean": 1.0, "stderr": pytest.approx(1 / math.sqrt(3)), "values": [0.0, 1.0, 2.0]}
    assert m["c"]["mean"] is None and m["c"]["values"] == [None, None, None]
    assert plot_results([p1], tmp_path / "plots")[0].read_bytes()[:8] == PNG_MAGIC


def test_git_is_recorded_when_the_run_starts(scratch_registry, tmp_path, monkeypatch):
    # A long cell may outlive a commit made meanwhile: the file names the checkout the code ran from.
    from textfree.experiments import runner

    state = {"commit": "a" * 40}
    monkeypatch.setattr(runner, "git_info", lambda path=None: {"commit": state["commit"], "dirty": False})

    @register_cell_kind("commits_meanwhile")
    def kind(cell, point, seed, context):
        state["commit"] = "b" * 40
        return {"v": 1.0}

    data = load_results(run_cell({"name": "g", "kind": "commits_meanwhile", "seeds": [0]}, tmp_path, progress=False))
    assert data["git"] == {"commit": "a" * 40, "dirty": False}


def test_git_info_tells_a_result_file_left_by_an_earlier_run_from_changed_code(tmp_path):
    # A cell queued behind another in one checkout starts "dirty" from the earlier cell's new result file alone:
    # the record names the changed tracked files and counts the untracked ones, so a reader sees whether code differed.
    import subprocess

    from textfree.experiments.runner import git_info

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    clean = git_info(tmp_path)
    assert len(clean["commit"]) == 40
    assert (clean["dirty"], clean["modified"], clean["n_modified"], clean["untracked"]) == (False, [], 0, 0)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "a.json").write_text("{}")
    (tmp_path / "results" / "b.json").write_text("{}")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("y = 1\n")
    git("add", "pkg/mod.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pkg")
    for where in (tmp_path, tmp_path / "pkg"):  # the package lies in a folder of the checkout, results beside it
        only_results = git_info(where)
        assert (only_results["dirty"], only_results["modified"], only_results["untracked"]) == (True, [], 2), where
    (tmp_path / "code.py").write_text("x = 2\n")
    for where in (tmp_path, tmp_path / "pkg"):
        changed = git_info(where)
        assert (changed["dirty"], changed["modified"], changed["n_modified"], changed["untracked"]) == (
            True,
            ["code.py"],
            1,
            2,
        )


def test_provenance_is_recorded_per_point_and_checked(scratch_registry, tmp_path):
    @register_cell_kind("noting")
    def noting(cell, point, seed, context):
        if point["params.x"] == 1:
            context.record("built_from", f"run-{point['params.x']}")
        return {"v": 1.0}

    cell = {"name": "n", "kind": "noting", "grid": {"params.x": [1, 2]}, "seeds": [0, 1]}
    path = run_cell(cell, tmp_path, progress=False)
    rows = load_results(path)["results"]
    assert rows[0]["provenance"] == {"built_from": "run-1"}
    assert "provenance" not in rows[1]  # reset for every point: the second recorded nothing

    @register_cell_kind("fickle")
    def fickle(cell, point, seed, context):
        context.record("built_from", f"run-{seed}")
        return {"v": 1.0}

    with pytest.raises(
        ValueError, match="provenance 'built_from' differs between the seeds of one point: 'run-0' and 'run-1'"
    ):
        run_cell({"name": "f", "kind": "fickle", "seeds": [0, 1]}, tmp_path, progress=False)

    @register_cell_kind("numeric")
    def numeric(cell, point, seed, context):
        context.record("steps", 3)
        return {"v": 1.0}

    with pytest.raises(TypeError, match="provenance is a non-empty name and a string value, got 'steps': 3"):
        run_cell({"name": "m", "kind": "numeric", "seeds": [0]}, tmp_path, progress=False)
    broken = json.loads(path.read_text())
    broken["results"][0]["provenance"] = {"built_from": 7}
    bad = tmp_path / "bad_provenance.json"
    bad.write_text(json.dumps(broken))
    with pytest.raises(ResultsError, match=r"results\[0\]\.provenance': must be an object of strings"):
        load_results(bad)


def test_custom_kind_without_grid_and_bad_return(scratch_registry, tmp_path):
    @register_cell_kind("const")
    def const(cell, point, seed, context):
        return {"v": 3}

    @register_cell_kind("broken")
    def broken(cell, point, seed, context):
        return {"v": "high"}

    path = run_cell({"name": "const", "kind": "const", "seeds": [5]}, tmp_path, progress=False)
    data = load_results(path)
    assert data["results"] == [
        {
            "point": {},
            "resolved": {"mechanism": None, "params": {}, "attack": None},
            "metrics": {"v": {"mean": 3.0, "stderr": None, "values": [3.0]}},
        }
    ]
    assert plot_results(path, tmp_path / "plots")[0].read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(TypeError, match="metric 'v' must be a real number"):
        run_cell({"name": "b", "kind": "broken", "seeds": [0]}, tmp_path, progress=False)
    with pytest.raises(ValueError, match="already registered"):
        register_cell_kind("const")(lambda cell, point, seed, context: {})


def test_a_bad_out_dir_is_refused_before_any_grid_point_runs(scratch_registry, tmp_path):
    calls = []

    @register_cell_kind("counted")
    def counted(cell, point, seed, context):
        calls.append(seed)
        return {"v": 1.0}

    cell = {"name": "c", "kind": "counted", "seeds": [0, 1]}
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    with pytest.raises(ValueError, match="'.*afile' is not a directory"):
        run_cell(cell, afile, progress=False)
    with pytest.raises(ValueError, match="cannot create the results directory '.*afile/sub'"):
        run_cell(cell, afile / "sub", progress=False)
    assert calls == []  # nothing ran, so no results were lost
    assert run_cell(cell, tmp_path / "new" / "dir", progress=False).parent == tmp_path / "new" / "dir"


def test_a_failed_final_write_says_where_the_results_could_not_go(scratch_registry, tmp_path, monkeypatch):
    from textfree.experiments import runner

    @register_cell_kind("const_w")
    def const_w(cell, point, seed, context):
        return {"v": 1.0}

    def full_disk(out_dir, stem, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner, "_write_new_json", full_disk)
    with pytest.raises(
        OSError, match=f"could not write the results of cell 'w' to '{re.escape(str(tmp_path))}'.*No space"
    ):
        run_cell({"name": "w", "kind": "const_w", "seeds": [0]}, tmp_path, progress=False)
