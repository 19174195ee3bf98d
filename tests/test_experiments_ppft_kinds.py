"""The PPFT cell kinds (textfree.experiments.kinds.ppft): validation, and ppft_pretrain / ppft_stage1 / ppft_stage2 /
ppft_evaluate end to end on tiny models and the hand-written fixtures (Pri-DDX: 5 training rows, 1 held-out row); the
pipeline kind is in test_ppft_pipeline.py."""

import copy
import json
import math
from pathlib import Path

import pytest

import textfree.ppft.train as ppft_train
from textfree.experiments import Cell, CellError, available_cell_kinds, get_cell_kind, load_cell, run_cell
from textfree.experiments.kinds.ppft import EVAL_TASKS, eval_metric_names
from textfree.lm.loading import make_tiny_decoder_dir
from textfree.ppft.model import TextFreeLM

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "data"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "cells" / "ppft"

STAGE2 = {
    "name": "tiny_ppft",
    "kind": "ppft_stage2",
    "dataset": "pri-ddx",
    "params": {"init": "runs/stage1", "out": "runs/{dataset}-eps{epsilon}-k{k}", "k": 4, "epochs": 1},
    "grid": {"params.epsilon": [28, 75]},
    "seeds": [0, 1],
}
EVALUATE = {
    "name": "tiny_eval",
    "kind": "ppft_evaluate",
    "dataset": "pri-ddx",
    "params": {"model": "runs/x"},
    "seeds": [0],
}


def _with(base, **changes):
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _params(base, drop=(), **extra):
    p = {k: v for k, v in base["params"].items() if k not in drop}
    return _with(base, params=p | extra)


# ------------------------------------------------------------------------------------------------ registration
def test_ppft_kinds_are_registered():
    assert {"ppft_stage2", "ppft_evaluate", "ppft_stage1", "ppft_pretrain"} <= set(available_cell_kinds())
    stage2 = get_cell_kind("ppft_stage2")
    assert set(eval_metric_names()) <= set(stage2.metrics) and "reused" in stage2.metrics
    assert {"init", "out", "epsilon", "tasks", "blind", "noise_match", "eval_tasks", "eval_limit", "train_seed"} <= set(
        stage2.params
    )
    assert "seed" not in stage2.params  # the cell's seeds are evaluation noise seeds
    assert {f"acc_{t}" for t in EVAL_TASKS} <= set(get_cell_kind("ppft_evaluate").metrics)


def test_valid_cells_load():
    cell = Cell.from_dict(STAGE2)
    assert cell.kind == "ppft_stage2" and len(cell.points()) == 2
    assert Cell.from_dict(EVALUATE).kind == "ppft_evaluate"
    Cell.from_dict(
        _params(STAGE2, eval_tasks=["mcqa", "blind_open"], mechanism="gaussian", noise_match="norm", tasks=["open"])
    )
    Cell.from_dict(_with(_params(STAGE2, blind=True, epsilon=None), grid={}))
    with pytest.raises(CellError, match="blind run"):  # the grid puts an epsilon on a blind run
        Cell.from_dict(_params(STAGE2, blind=True, epsilon=None))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_example_cells_validate(path):
    cell = load_cell(path)
    # PPFT's own kinds; Table 1's baselines run on the text-tuning kind (d_chi, Paraphrase) and on PrivacyRestore's
    baseline = cell.kind in ("rapt_qa", "privacy_restore_qa") and cell.name.startswith("ppft_ddx_baseline_")
    assert cell.kind.startswith("ppft_") or baseline


# ------------------------------------------------------------------------------------------------ validation
def _error(data) -> CellError:
    with pytest.raises(CellError) as info:
        Cell.from_dict(data)
    return info.value


def test_stage2_needs_a_dataset():
    err = _error(_with(STAGE2, dataset=None))
    assert err.field == "dataset" and "dataset" in str(err)


def test_stage2_refuses_a_mechanism_section():
    err = _error(_with(STAGE2, mechanism={"name": "l2_laplace", "epsilon": 28}))
    assert err.field == "mechanism" and "params" in err.message


@pytest.mark.parametrize("missing", ["init", "out"])
def test_stage2_needs_init_and_out(missing):
    err = _error(_params(STAGE2, drop=(missing,)))
    assert err.field == "params" and "init" in err.message and "out" in err.message


@pytest.mark.parametrize("tasks", [["mcqa", "closed"], [], "mcqa", ["MCQA"], None])
def test_stage2_rejects_bad_eval_tasks(tasks):
    err = _error(_params(STAGE2, eval_tasks=tasks))
    assert err.field == "params" and "eval_tasks" in err.message


@pytest.mark.parametrize(
    "params,pattern",
    [
        ({"epochs": 0}, "epochs must be >= 1"),
        ({"batch_size": 0}, "batch_size"),
        ({"max_steps": 0}, "max_steps"),
        ({"epochs": "three"}, ""),
    ],
)
def test_stage2_rejects_an_invalid_stage2_config_value(params, pattern):
    err = _error(_params(STAGE2, **params))
    assert err.field == "params" and "invalid stage-2 settings" in err.message and pattern in err.message


def test_stage2_invalid_value_in_the_grid_names_the_point():
    err = _error(_with(STAGE2, grid={"params.epochs": [1, 0]}))
    assert err.field == "params" and "params.epochs" in err.message and "epochs must be >= 1" in err.message


@pytest.mark.parametrize("name", ["foo", "seed", "progress", "dataset_path"])
def test_stage2_rejects_unknown_params(name):
    err = _error(_params(STAGE2, **{name: 1}))
    assert err.field == "params" and name in err.message and "takes no parameter" in err.message


def test_stage2_rejects_an_unknown_grid_param():
    err = _error(_with(STAGE2, grid={"params.foo": [1, 2]}))
    assert err.field == "grid" and "foo" in err.message


def test_evaluate_needs_a_model_and_a_dataset():
    err = _error(_params(EVALUATE, drop=("model",)))
    assert err.field == "params" and "model" in err.message
    assert _error(_with(EVALUATE, dataset=None)).field == "dataset"
    assert _error(_with(EVALUATE, mechanism={"name": "l2_laplace", "epsilon": 28})).field == "mechanism"
    assert _error(_params(EVALUATE, eval_tasks=["open", "nope"])).field == "params"
    assert _error(_params(EVALUATE, init="runs/x")).field == "params"  # not a ppft_evaluate param


def test_stage1_and_pretrain_validate_their_params():
    stage1 = {"name": "s1", "kind": "ppft_stage1", "params": {"decoder": "d", "out": "o"}, "seeds": [0]}
    Cell.from_dict(stage1)
    assert "invalid stage-1 settings" in _error(_params(stage1, epochs=0)).message
    assert _error(_params(stage1, drop=("decoder",))).field == "params"
    pretrain = {"name": "pre", "kind": "ppft_pretrain", "params": {"out": "o", "preset": "tiny"}, "seeds": [0]}
    Cell.from_dict(pretrain)
    assert "out" in _error(_params(pretrain, drop=("out",))).message


# ------------------------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def init_run(tmp_path_factory, tiny_encoder_dir) -> Path:
    root = tmp_path_factory.mktemp("ppft-kinds")
    decoder = make_tiny_decoder_dir(root / "decoder", hidden=32, layers=2, heads=2, seed=0)
    return TextFreeLM.build(decoder, encoder=tiny_encoder_dir, k=4, seed=0).save(root / "init")


@pytest.fixture
def fixture_data(monkeypatch):
    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))
    return FIXTURES


@pytest.fixture
def count_training(monkeypatch):
    calls = []
    original = ppft_train.train_stage2

    def counting(cfg, **kwargs):
        calls.append(cfg)
        return original(cfg, **kwargs)

    monkeypatch.setattr(ppft_train, "train_stage2", counting)
    return calls


def _metric(data, name):
    (row,) = data["results"]
    return row["metrics"][name]


def test_stage2_cell_trains_once_evaluates_per_seed_and_reuses_the_run(
    fixture_data, init_run, tmp_path, count_training
):
    cell = {
        "name": "tiny_ppft_stage2",
        "kind": "ppft_stage2",
        "dataset": "pri-ddx",
        "params": {
            "init": str(init_run),
            "out": str(tmp_path / "runs" / "{dataset}-eps{epsilon}-k{k}"),
            "k": 4,
            "epochs": 1,
            "batch_size": 2,
            "limit": 4,
            "eval_limit": 3,
            "tasks": ["mcqa"],
        },
        "grid": {"params.epsilon": [28]},
        "seeds": [0, 1],
    }
    path = run_cell(cell, tmp_path / "results", progress=False)
    data = json.loads(path.read_text())
    run = tmp_path / "runs" / "pri-ddx-eps28-k4"

    # trained once for the grid point, not once per seed
    assert len(count_training) == 1
    cfg = count_training[0]
    assert (cfg.out, cfg.dataset, cfg.epsilon, cfg.k, cfg.tasks, cfg.limit, cfg.seed) == (
        str(run),
        "pri-ddx",
        28,
        4,
        ["mcqa"],
        4,
        0,
    )
    assert run.is_dir() and (run / "summary.json").is_file() and (run / "textfree_config.json").is_file()
    saved = json.loads((run / "textfree_config.json").read_text())
    assert (saved["stage"], saved["epsilon"], saved["k"], saved["mechanism"]) == ("stage2", 28, 4, "l2_laplace")
    assert json.loads((run / "summary.json").read_text())["examples"] == 4

    assert data["kind"] == "ppft_stage2" and data["seeds"] == [0, 1]
    assert data["results"][0]["point"] == {"params.epsilon": 28}
    metrics = data["results"][0]["metrics"]
    for name in (
        "acc_mcqa",
        "acc_open",
        "acc_mcqa_no_leak",
        "acc_open_exclusive",
        "n_heldout",
        "majority_baseline",
        "slot_epsilon",
        "prompt_epsilon",
        "eval_wall_s",
        "train_steps",
        "reused",
    ):
        assert name in metrics and len(metrics[name]["values"]) == 2, name
    assert "acc_blind_mcqa" not in metrics  # default eval tasks on Pri-*: mcqa + open
    for name in ("acc_mcqa", "acc_open"):
        assert all(0.0 <= v <= 1.0 for v in metrics[name]["values"])
    assert _metric(data, "n_heldout")["values"] == [1.0, 1.0]  # eval_limit 3, but the fixture holds out one row
    assert _metric(data, "slot_epsilon")["values"] == [56.0, 56.0]  # L2-Laplace: 2 * eps per unit slot
    assert _metric(data, "prompt_epsilon")["mean"] >= 56.0 and _metric(data, "prompt_epsilon")["mean"] % 56.0 == 0
    assert _metric(data, "reused")["values"] == [0.0, 0.0]
    assert "provenance" not in data["results"][0]  # the init was never trained as a stage-1 run: no build to name
    assert _metric(data, "train_steps")["values"] == [2.0, 2.0]  # 4 records, batch 2, 1 epoch
    assert math.isfinite(_metric(data, "train_final_loss")["mean"])

    # the same cell again: the finished run is loaded, not retrained
    again = json.loads(run_cell(cell, tmp_path / "results", progress=False).read_text())
    assert len(count_training) == 1
    assert _metric(again, "reused")["values"] == [1.0, 1.0]
    assert _metric(again, "train_steps")["values"] == [2.0, 2.0]
    assert _metric(again, "slot_epsilon")["values"] == [56.0, 56.0]
    assert _metric(again, "acc_mcqa")["values"] == _metric(data, "acc_mcqa")["values"]  # same model, same noise seeds

    # a changed training setting is not served from the old run
    changed = copy.deepcopy(cell)
    changed["params"] |= {"lr": 0.5, "eval_tasks": ["mcqa"]}
    changed["seeds"] = [0]
    with pytest.raises(ValueError, match="other settings"):  # the run directory holds the lr=1e-3 run
        run_cell(changed, tmp_path / "results", progress=False)

    # evaluate that run on the blind task: nothing private is sent, so no privacy loss is reported
    evaluate = {
        "name": "tiny_ppft_eval",
        "kind": "ppft_evaluate",
        "dataset": "pri-ddx",
        "params": {"model": str(run), "eval_tasks": ["blind_mcqa"]},
        "seeds": [0],
    }
    ev = json.loads(run_cell(evaluate, tmp_path / "results", progress=False).read_text())
    m = ev["results"][0]["metrics"]
    assert 0.0 <= m["acc_blind_mcqa"]["mean"] <= 1.0 and m["n_heldout"]["mean"] == 1.0
    assert "acc_mcqa" not in m and "reused" not in m
    assert m["slot_epsilon"]["values"] == [None] and m["prompt_epsilon"]["values"] == [None]  # NaN -> null

    # the hand-written prompts beside the held-out part, at the same noise (eval_prompts)
    written = Path(__file__).parent / "fixtures" / "ppft" / "handwritten_ddx.jsonl"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(written.read_text().splitlines()[:3]) + "\n")
    evaluate["params"] = {"model": str(run), "eval_tasks": ["mcqa"], "eval_prompts": str(prompts)}
    m = json.loads(run_cell(evaluate, tmp_path / "results", progress=False).read_text())["results"][0]["metrics"]
    assert m["n_prompts"]["mean"] == 3.0 and m["prompts_acc_mcqa"]["mean"] in (0.0, 1 / 3, 2 / 3, 1.0)
    assert m["n_heldout"]["mean"] == 1.0 and "prompts_acc_open" not in m


@pytest.mark.parametrize(
    "change, message",
    [
        ({"tasks": ["bogus"]}, "tasks"),
        ({"tasks": ["mcqa", "mcqa"]}, "tasks"),
        ({"noise_match": "volume"}, "noise_match"),
        ({"mechanism": "nope"}, "unknown mechanism"),
        ({"epsilon": -1}, "epsilon"),
    ],
)
def test_stage2_settings_are_checked_when_the_cell_loads(change, message):
    err = _error(_with(_params(STAGE2, **change), grid={}))
    assert err.field == "params" and message in err.message


def test_a_finished_stage2_run_is_not_reused_after_its_init_was_rebuilt_at_the_same_path(
    fixture_data, init_run, tmp_path, count_training, caplog
):
    import shutil

    from textfree.ppft.checkpoint import stage1_build
    from textfree.training.runs import run_fingerprint

    init = tmp_path / "stage1"
    shutil.copytree(init_run, init)
    (init / "summary.json").write_text(json.dumps({"stage": "stage1"}))  # as train_stage1 leaves it
    build = run_fingerprint(init)
    run = tmp_path / "runs" / "s2"
    cell = {
        "name": "tiny_ppft_stage2_init",
        "kind": "ppft_stage2",
        "dataset": "pri-ddx",
        "params": {
            "init": str(init),
            "out": str(run),
            "k": 4,
            "epochs": 1,
            "batch_size": 2,
            "limit": 4,
            "eval_limit": 3,
            "tasks": ["mcqa"],
            "eval_tasks": ["mcqa"],
            "epsilon": 28,
        },
        "seeds": [0],
    }
    first = json.loads(run_cell(cell, tmp_path / "results", progress=False).read_text())
    summary = json.loads((run / "summary.json").read_text())
    assert len(summary["init_fingerprint"]) == 64
    # the result names the stage-1 build, and so does an evaluation of the stage-2 run or of the stage-1 run itself
    assert first["results"][0]["provenance"] == {"stage1_build": build} and stage1_build(run) == build
    for model in (run, init):
        evaluate = {
            "name": "tiny_ppft_eval_build",
            "kind": "ppft_evaluate",
            "dataset": "pri-ddx",
            "params": {"model": str(model), "eval_tasks": ["blind_mcqa"]},
            "seeds": [0],
        }
        ev = json.loads(run_cell(evaluate, tmp_path / "results", progress=False).read_text())
        assert ev["results"][0]["provenance"] == {"stage1_build": build}, model
    again = json.loads(run_cell(cell, tmp_path / "results", progress=False).read_text())
    assert _metric(again, "reused")["values"] == [1.0] and len(count_training) == 1

    # a run that predates the fingerprint is reused, with a warning that names the unchecked init
    legacy = {k: v for k, v in summary.items() if k != "init_fingerprint"}
    (run / "summary.json").write_text(json.dumps(legacy))
    with caplog.at_level("WARNING"):
        again = json.loads(run_cell(cell, tmp_path / "results", progress=False).read_text())
    assert _metric(again, "reused")["values"] == [1.0]
    assert any("records no fingerprint of its init run" in r.getMessage() for r in caplog.records)
    (run / "summary.json").write_text(json.dumps(summary))

    # rebuild the init at the same path (its projection weights change): refused, and the old run is kept
    (weights,) = (init / "projection").glob("*.safetensors")
    from safetensors.torch import load_file, save_file

    tensors = load_file(weights)
    save_file({k: v + 0.01 for k, v in tensors.items()}, weights)
    assert stage1_build(run) is None and stage1_build(init) != build  # the run's build is gone; the path holds another
    with pytest.raises(CellError, match="was trained from another .*stage1"):
        run_cell(cell, tmp_path / "results", progress=False)
    assert len(count_training) == 1 and (run / "summary.json").is_file()


def test_the_run_fingerprint_covers_weights_and_configs_not_checkpoints_logs_or_the_path(init_run, tmp_path):
    import shutil

    from textfree.training.runs import run_fingerprint

    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(init_run, a)
    shutil.copytree(init_run, b)
    assert run_fingerprint(a) == run_fingerprint(b) == run_fingerprint(init_run)  # content, not location
    (b / "checkpoints" / "step-000010").mkdir(parents=True)
    (b / "checkpoints" / "step-000010" / "state.json").write_text("{}")
    (b / "metrics.jsonl").write_text('{"step": 1}\n')
    assert run_fingerprint(b) == run_fingerprint(a)
    # how the training went (summary.json: times, losses) is not what the run is; the legacy fingerprint included it
    (b / "summary.json").write_text(json.dumps({"stage": "stage1", "wall_s": 1.0}))
    (a / "summary.json").write_text(json.dumps({"stage": "stage1", "wall_s": 2.0}))
    assert run_fingerprint(b) == run_fingerprint(a)
    assert run_fingerprint(b, legacy=True) != run_fingerprint(a, legacy=True)
    (b / "textfree_config.json").write_text((b / "textfree_config.json").read_text() + " ")
    assert run_fingerprint(b) != run_fingerprint(a)


def test_the_run_fingerprint_names_the_base_decoder_by_its_weights_not_by_where_it_lies(init_run, tmp_path):
    """decoder_ref.json records a local decoder by absolute path: a clone elsewhere (or a copied runs/ folder) builds
    the same run, so the path is left out where the weights' hash is recorded; another decoder still changes it."""
    import shutil

    from textfree.training.runs import run_fingerprint

    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(init_run, a)
    shutil.copytree(init_run, b)
    ref = json.loads((b / "decoder_ref.json").read_text())
    assert ref["sha256"] and Path(ref["name_or_path"]).is_absolute()
    (b / "decoder_ref.json").write_text(json.dumps({**ref, "name_or_path": "/elsewhere/runs/decoder-small"}))
    assert run_fingerprint(b) == run_fingerprint(a)
    assert run_fingerprint(b, legacy=True) != run_fingerprint(a, legacy=True)  # the legacy one hashed the bytes
    (b / "decoder_ref.json").write_text(json.dumps({**ref, "sha256": "0" * 64}))
    assert run_fingerprint(b) != run_fingerprint(a)
    # a hub name without a hash of its weights: the name is all that identifies the decoder, so it counts
    (a / "decoder_ref.json").write_text(json.dumps({**ref, "name_or_path": "org/decoder-a", "sha256": None}))
    (b / "decoder_ref.json").write_text(json.dumps({**ref, "name_or_path": "org/decoder-b", "sha256": None}))
    assert run_fingerprint(b) != run_fingerprint(a)


def test_a_run_that_recorded_the_legacy_fingerprint_of_its_init_still_names_its_build(init_run, tmp_path):
    """Runs trained before 2026-11-27 recorded their init's fingerprint with its summary.json: they still pass
    ``same_init`` and name the init's (new) fingerprint as their build; a changed init is still refused."""
    import shutil

    from textfree.ppft.checkpoint import stage1_build
    from textfree.training.runs import TRAIN_CONFIG, InitChanged, run_fingerprint, same_init

    init = tmp_path / "stage1"
    shutil.copytree(init_run, init)
    (init / "summary.json").write_text(json.dumps({"stage": "stage1", "wall_s": 3.5}))
    run = tmp_path / "s2"
    run.mkdir()
    legacy = run_fingerprint(init, legacy=True)
    assert legacy != run_fingerprint(init)
    (run / TRAIN_CONFIG).write_text(json.dumps({"config": {"init": str(init)}, "init_fingerprint": legacy}))
    (run / "summary.json").write_text(json.dumps({"stage": "stage2"}))
    assert same_init(run, legacy, init) and stage1_build(run) == run_fingerprint(init)
    (init / "summary.json").write_text(json.dumps({"stage": "stage1", "wall_s": 4.5}))  # its legacy fingerprint moves
    assert stage1_build(run) is None
    with pytest.raises(InitChanged, match="was trained from another"):
        same_init(run, legacy, init)


# ------------------------------------------------------------------------------------------------ validation part
@pytest.mark.parametrize(
    "change, field, message",
    [
        ({"split": "validation"}, "params.validation", "params.validation must be > 0"),
        ({"split": "test"}, "split", "split must be 'heldout' or 'validation' or unset, got 'test'"),
    ],
)
def test_stage2_split_is_the_heldout_or_a_validation_part(change, field, message):
    err = _error(_with(STAGE2, **change))
    assert err.field == field and message in err.message
    Cell.from_dict(_with(_params(STAGE2, validation=0.2), split="validation"))
    Cell.from_dict(_with(STAGE2, split="heldout"))
    err = _error(_with(EVALUATE, split="validation"))  # a stage-1 / other run has no validation part of its own
    assert err.field == "split" and "split must be 'heldout' or unset" in err.message
    with pytest.raises(CellError, match="validation must be a number in \\[0, 1\\)"):
        Cell.from_dict(_with(_params(STAGE2, validation=1.5), grid={}))


def test_a_validation_run_trains_without_its_validation_part_and_is_evaluated_there(
    fixture_data, init_run, tmp_path, count_training
):
    """Fixture split at validation 0.6: train keeps 2 of its 5 rows (303, 304), the validation part is the other 3
    (101, 202, 102: one context for 101 and 102); the held-out row is not read."""
    cell = {
        "name": "tiny_select",
        "kind": "ppft_stage2",
        "dataset": "pri-ddx",
        "split": "validation",
        "params": {
            "init": str(init_run),
            "out": str(tmp_path / "runs" / "sel"),
            "k": 4,
            "epochs": 1,
            "batch_size": 2,
            "tasks": ["mcqa"],
            "eval_tasks": ["mcqa", "open"],
            "epsilon": 28,
            "validation": 0.6,
        },
        "seeds": [0],
    }
    data = json.loads(run_cell(cell, tmp_path / "results", progress=False).read_text())
    (cfg,) = count_training
    assert cfg.validation == 0.6
    assert json.loads((tmp_path / "runs" / "sel" / "summary.json").read_text())["examples"] == 2  # 2 rows x 1 task
    assert _metric(data, "n_heldout")["values"] == [3.0]  # the validation part's size, not the held-out row
    assert data["cell"]["split"] == "validation"


def test_pretrain_and_stage1_cells_train_once_then_reuse_their_runs(fixture_data, tmp_path, tiny_encoder_dir):
    """ppft_pretrain and ppft_stage1 end to end on the fixtures: the tiny decoder pretrains on the fixture corpus, stage
    1
    aligns it with the tiny encoder, each records its figures; run again, each reuses its finished run (reused = 1,
    the same figures) instead of training again."""
    decoder, stage1 = tmp_path / "decoder", tmp_path / "stage1"
    pre = {
        "name": "tiny_pretrain",
        "kind": "ppft_pretrain",
        "seeds": [0],
        "params": {
            "out": str(decoder),
            "preset": "tiny",
            "config": {"sources": ["alpaca", "lima", "gsm8k-train"], "max_steps": 3},
        },
    }
    s1 = {
        "name": "tiny_stage1",
        "kind": "ppft_stage1",
        "seeds": [0],
        "params": {
            "decoder": str(decoder),
            "encoder": str(tiny_encoder_dir),
            "out": str(stage1),
            "k": 2,
            "max_steps": 2,
            "limit_per_source": 8,
            "batch_size": 2,
            "max_target_tokens": 16,
        },
    }

    def metrics(cell):
        (row,) = json.loads(run_cell(cell, tmp_path / "results", progress=False).read_text())["results"]
        return {name: m["values"][0] for name, m in row["metrics"].items()}

    first = metrics(pre)
    assert first["reused"] == 0.0 and first["parameters"] > 0 and math.isfinite(first["heldout_loss"])
    assert first["heldout_ppl"] == pytest.approx(math.exp(first["heldout_loss"]), rel=1e-6)
    assert (decoder / "config.json").is_file() and (decoder / "metrics.json").is_file()
    again = metrics(pre)
    assert again["reused"] == 1.0 and again["heldout_loss"] == first["heldout_loss"]

    trained = metrics(s1)
    assert trained["reused"] == 0.0 and trained["train_steps"] == 2 and math.isfinite(trained["train_first_loss"])
    assert TextFreeLM.load(stage1).config.k == 2  # a loadable run, on the pretrained decoder
    reused = metrics(s1)
    assert reused["reused"] == 1.0 and reused["train_first_loss"] == trained["train_first_loss"]
