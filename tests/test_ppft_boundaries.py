"""PPFT's input boundaries: a training command checks its settings, decoder, init run and data before it touches
--out (an existing run keeps its checkpoints, a refused call leaves no new directory); the stage configs and the
ppft_* cells refuse values that would be read as "the default" or "everything"; --texts of pretrain-decoder is one
error line naming the file. Nothing here trains: ``fit`` is replaced by a function that fails the test."""

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import textfree.ppft.train as ppft_train
from textfree.cli import app
from textfree.experiments import Cell, CellError
from textfree.ppft.train import Stage1Config, Stage2Config, train_stage2

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "data"


@pytest.fixture
def no_training(monkeypatch):
    """Every test here must stop before the training loop starts."""

    def fit(**_):
        raise AssertionError("training started")

    monkeypatch.setattr(ppft_train, "fit", fit)
    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))


def _existing_run(path: Path) -> dict[str, str]:
    """An interrupted run in ``path``: a checkpoint, metrics and its train_config.json; returns every file's text."""
    (path / "checkpoints" / "step-2").mkdir(parents=True)
    (path / "checkpoints" / "step-2" / "trainer_state.json").write_text('{"step": 2}')
    (path / "metrics.jsonl").write_text('{"step": 1, "loss": 3.0}\n')
    (path / "train_config.json").write_text('{"kind": "Stage1Config", "config": {"marker": 1}}')
    return _files(path)


def _files(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): p.read_text() for p in sorted(path.rglob("*")) if p.is_file()}


def _refused(args: list[str], *needles: str):
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and not isinstance(r.exception, AssertionError), (r.output, r.exception)
    errors = [line for line in r.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and all(n in errors[0] for n in needles) and "Traceback" not in r.output, r.output
    return errors[0]


# ------------------------------------------------------------------------------------------------ bug 1: --out last
@pytest.mark.parametrize("case", ["stage1-decoder", "stage2-from", "stage2-data"])
def test_training_checks_decoder_init_and_data_before_touching_an_existing_run(
    no_training, tmp_path, tiny_encoder_dir, tiny_run_dir, case
):
    run = tmp_path / "RUN"
    before = _existing_run(run)
    empty = tmp_path / "nodata"  # a dataset directory without dev.json / test.json: found when the data loads
    empty.mkdir()
    args, named = {
        "stage1-decoder": (
            ["train-stage1", "--decoder", str(tmp_path / "nodecoder"), "--encoder", str(tiny_encoder_dir)],
            "nodecoder",
        ),
        "stage2-from": (["train-stage2", "--from", str(tmp_path / "missing")], "missing"),
        "stage2-data": (["train-stage2", "--from", str(tiny_run_dir), "--dataset", str(empty)], "nodata"),
    }[case]
    _refused(["ppft", *args, "--out", str(run), "--no-resume", "--cpu"], named)
    assert _files(run) == before


@pytest.mark.parametrize(
    "command",
    [
        ["train-stage1", "--decoder", "x", "--restore-fraction", "5"],
        ["train-stage1", "--decoder", "{tmp}/nodecoder"],
        ["train-stage2", "--from", "{tmp}/missing"],
        ["pipeline", "--preset", "bogus"],
        ["pipeline", "--encoder", "{tmp}/noencoder"],
    ],
    ids=["restore-fraction", "decoder", "from", "preset", "pipeline-encoder"],
)
def test_a_refused_training_command_leaves_no_new_out_directory(no_training, tmp_path, command):
    out = tmp_path / "new"
    _refused(["ppft", *(a.format(tmp=tmp_path) for a in command), "--out", str(out)])
    assert not out.exists()


# ------------------------------------------------------------------------------------------------ bug 2: the configs
@pytest.mark.parametrize(
    "change, message",
    [
        ({"k": 0}, "k must be an integer >= 1 or null, got 0"),
        ({"k": -3}, "k must be an integer >= 1 or null, got -3"),
        ({"limit": 0}, "limit must be an integer >= 1 or null, got 0"),
        ({"limit": -5}, "limit must be an integer >= 1 or null, got -5"),
        ({"max_private_tokens": 0}, "max_private_tokens must be an integer >= 1 or null, got 0"),
        ({"split_fraction": 7.0}, "split_fraction must be a number in [0, 1], got 7.0"),
        ({"epsilon": float("inf")}, "epsilon must be a finite number > 0 or null, got inf"),
        ({"dataset": "nosuch"}, "got 'nosuch'"),
    ],
)
def test_stage2_config_refuses_values_naming_field_and_value(change, message):
    with pytest.raises(ValueError) as info:
        Stage2Config(out="runs/x", init="runs/stage1", **change)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"k": 0}, "k must be an integer >= 1, got 0"),
        ({"projection": "bogus"}, "projection must be one of ('linear', 'mlp'), got 'bogus'"),
        ({"lora_r": 0}, "lora_r must be an integer >= 1, got 0"),
        ({"data": []}, "data must be a non-empty list"),
        ({"data": ["nosuch"]}, "data source 'nosuch' is neither a registered dataset nor an existing path"),
        ({"data": ["csqa"]}, "data source 'csqa' is evaluation or domain data"),
        ({"restore_fraction": 5.0}, "restore_fraction must be a number in [0, 1], got 5.0"),
    ],
)
def test_stage1_config_refuses_values_before_any_data_or_decoder_loads(change, message):
    with pytest.raises(ValueError) as info:
        Stage1Config(out="runs/x", decoder="runs/no-decoder", **change)
    assert message in str(info.value)
    assert Stage1Config(out="runs/x", decoder="runs/no-decoder", data=["alpaca", "gsm8k:train"]).k == 4


def test_stage2_k_zero_is_not_read_as_the_init_runs_k(no_training, tmp_path, tiny_run_dir):
    cfg = Stage2Config(
        out=str(tmp_path / "s2"), init=str(tiny_run_dir), dataset="ddx", tasks=["mcqa"], max_steps=1, progress=False
    )
    cfg.k = 0  # past __post_init__: train_stage2 itself must not take 0 for "unset"
    with pytest.raises(ValueError, match="k must be an integer >= 1, got 0"):
        train_stage2(cfg)
    assert not (tmp_path / "s2").exists()


# ------------------------------------------------------------------------------------------------ bug 3: the cells
STAGE2 = {
    "name": "b",
    "kind": "ppft_stage2",
    "dataset": "pri-ddx",
    "seeds": [0],
    "params": {"init": "runs/stage1", "out": "runs/{dataset}-eps{epsilon}-k{k}", "epochs": 1},
}
EVALUATE = {"name": "e", "kind": "ppft_evaluate", "dataset": "pri-ddx", "params": {"model": "runs/x"}, "seeds": [0]}


@pytest.mark.parametrize("base", [STAGE2, EVALUATE], ids=["ppft_stage2", "ppft_evaluate"])
@pytest.mark.parametrize("name, value", [("eval_limit", 0), ("eval_limit", -3), ("k", 0)])
def test_ppft_cells_refuse_a_zero_or_negative_eval_limit_and_k(base, name, value):
    data = copy.deepcopy(base)
    data["params"][name] = value
    with pytest.raises(CellError) as info:
        Cell.from_dict(data)
    assert name in str(info.value) and f"got {value}" in str(info.value)
    data["params"][name] = 2
    assert Cell.from_dict(data).params[name] == 2


# ------------------------------------------------------------------------------------------------ bug 4: --texts
@pytest.mark.parametrize("make", ["missing", "directory", "latin1_txt", "latin1_jsonl"])
def test_pretrain_decoder_texts_problems_are_one_error_line_naming_the_file(tmp_path, make):
    path = (
        tmp_path
        / {"missing": "nope.txt", "directory": "dir.txt", "latin1_txt": "docs.txt", "latin1_jsonl": "docs.jsonl"}[make]
    )
    if make == "directory":
        path.mkdir()
    elif make == "latin1_txt":
        path.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    elif make == "latin1_jsonl":
        path.write_bytes(json.dumps({"text": "x"}).encode() + b"\n\xff\n")
    out = tmp_path / "decoder"
    _refused(
        ["ppft", "pretrain-decoder", "--preset", "tiny", "--texts", str(path), "--out", str(out), "--no-progress"],
        str(path),
    )
    assert not out.exists()
