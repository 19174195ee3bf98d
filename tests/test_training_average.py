"""The weight average (textfree.training.average) by hand, and in a stage-2 run: saved as the run's weights, resumed
exactly."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from textfree.ppft.model import TextFreeLM
from textfree.ppft.train import Stage2Config, train_stage2
from textfree.training.average import WeightAverage, check_ema_decay
from textfree.training.checkpoint import EMA_FILE, latest_checkpoint

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "data"


def test_average_by_hand():
    w = torch.nn.Parameter(torch.tensor([0.0, 4.0]))
    avg = WeightAverage.start(0.5, {"w": w})
    with torch.no_grad():
        w.copy_(torch.tensor([2.0, 0.0]))
    avg.update({"w": w})  # 0.5 * [0, 4] + 0.5 * [2, 0]
    assert torch.equal(avg.average["w"], torch.tensor([1.0, 2.0]))
    with torch.no_grad():
        w.copy_(torch.tensor([3.0, 2.0]))
    avg.update({"w": w})  # 0.5 * [1, 2] + 0.5 * [3, 2]
    assert torch.equal(avg.average["w"], torch.tensor([2.0, 2.0]))
    avg.copy_to({"w": w})
    assert torch.equal(w.detach(), torch.tensor([2.0, 2.0]))


def test_average_keeps_float32_and_writes_back_in_the_parameters_dtype():
    w = torch.nn.Parameter(torch.tensor([1.0, 1.0], dtype=torch.bfloat16))
    avg = WeightAverage.start(0.999, {"w": w})
    assert avg.average["w"].dtype == torch.float32
    with torch.no_grad():
        w.zero_()
    for _ in range(3):
        avg.update({"w": w})
    # 0.999 ** 3 = 0.997003: kept in float32, where bfloat16 would round it to 0.99609375
    assert torch.allclose(avg.average["w"], torch.full((2,), 0.997003), atol=1e-7)
    avg.copy_to({"w": w})
    assert w.dtype == torch.bfloat16 and torch.equal(w.detach(), torch.full((2,), 0.997003).to(torch.bfloat16))


def test_state_round_trip_and_mismatches_are_refused():
    a = torch.nn.Parameter(torch.ones(2, 3))
    avg = WeightAverage.start(0.9, {"a": a})
    other = WeightAverage.start(0.9, {"a": torch.zeros(2, 3)})
    other.load(avg.state(), where="ckpt")
    assert torch.equal(other.average["a"], torch.ones(2, 3))
    with pytest.raises(ValueError, match="ckpt: the saved weight average does not match.*extra \\['b'\\]"):
        other.load({"a": torch.ones(2, 3), "b": torch.ones(1)}, where="ckpt")
    with pytest.raises(
        ValueError, match="ckpt: the saved average of 'a' has shape \\(3, 2\\), the parameter \\(2, 3\\)"
    ):
        other.load({"a": torch.ones(3, 2)}, where="ckpt")
    with pytest.raises(ValueError, match="not the averaged ones"):
        avg.update({"b": a})


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, float("nan"), True, "0.9"])
def test_decay_is_checked(bad):
    with pytest.raises(ValueError, match=f"ema_decay must be a number strictly between 0 and 1.*got {bad!r}"):
        check_ema_decay(bad)
    with pytest.raises(ValueError, match="ema_decay"):
        Stage2Config(out="x", init="y", ema_decay=bad)
    check_ema_decay(None)
    check_ema_decay(0.999)


# ---------------------------------------------------------------------------------------------- in a stage-2 run
def _cfg(out, init, **kw):
    base = dict(
        out=str(out),
        init=str(init),
        dataset="ddx",
        epsilon=28.0,
        epochs=3,
        batch_size=2,
        lr=1e-2,
        tasks=["mcqa"],
        warmup_steps=1,
        save_every=2,
        log_every=1,
        progress=False,
    )
    return Stage2Config(**(base | kw))


@pytest.fixture(scope="module")
def stage1_run(tmp_path_factory, tiny_encoder_dir):
    from textfree.lm.loading import make_tiny_decoder_dir
    from textfree.ppft.train import Stage1Config, train_stage1

    decoder = make_tiny_decoder_dir(tmp_path_factory.mktemp("tiny-decoder"), hidden=32, layers=2, heads=2, seed=0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TEXTFREE_DATA", str(FIXTURES))
        out = tmp_path_factory.mktemp("runs") / "stage1"
        train_stage1(
            Stage1Config(
                out=str(out),
                decoder=str(decoder),
                encoder=str(tiny_encoder_dir),
                k=2,
                max_steps=2,
                batch_size=2,
                lr=1e-2,
                warmup_steps=1,
                progress=False,
                max_target_tokens=16,
            )
        )
    return out


def _losses(run: Path) -> list[float]:
    return [json.loads(x)["loss"] for x in (run / "metrics.jsonl").read_text().splitlines()]


def _saved_server_weights(run: Path, names) -> dict[str, torch.Tensor]:
    params = dict(TextFreeLM.load(run).server.named_parameters())
    return {n: params[n].detach() for n in names}


def test_stage2_saves_the_average_and_trains_the_same_trajectory(stage1_run, tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))
    plain = train_stage2(_cfg(tmp_path / "plain", stage1_run))
    ema = train_stage2(_cfg(tmp_path / "ema", stage1_run, ema_decay=0.5))
    # the average is kept beside the optimizer: the losses (the trajectory) are the same as without it
    assert plain["steps"] == ema["steps"] == 9
    assert _losses(tmp_path / "plain") == _losses(tmp_path / "ema")
    last = latest_checkpoint(tmp_path / "ema")
    average, last_step = load_file(str(last / EMA_FILE)), load_file(str(last / "trainable.safetensors"))
    assert average.keys() == last_step.keys() and not (latest_checkpoint(tmp_path / "plain") / EMA_FILE).exists()
    saved = _saved_server_weights(tmp_path / "ema", average)
    assert all(torch.equal(saved[n], average[n].to(saved[n].dtype)) for n in average)
    # ... and the average is not the last step's weights, which the run without it saves
    assert any(not torch.equal(average[n], last_step[n]) for n in average)
    plain_saved = _saved_server_weights(tmp_path / "plain", last_step)
    assert all(torch.equal(plain_saved[n], last_step[n].to(plain_saved[n].dtype)) for n in last_step)


class _Interrupt(Exception):
    pass


def test_stage2_with_an_average_resumes_exactly(stage1_run, tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))
    train_stage2(_cfg(tmp_path / "full", stage1_run, ema_decay=0.6))

    def stop(step, loss):
        if step == 5:
            raise _Interrupt

    with pytest.raises(_Interrupt):
        train_stage2(_cfg(tmp_path / "cut", stage1_run, ema_decay=0.6), on_step=stop)  # checkpoint at step 4
    assert (latest_checkpoint(tmp_path / "cut") / EMA_FILE).is_file()
    resumed = train_stage2(_cfg(tmp_path / "cut", stage1_run, ema_decay=0.6))
    assert resumed["resumed_from_step"] == 4
    names = load_file(str(latest_checkpoint(tmp_path / "full") / EMA_FILE))
    full, cut = _saved_server_weights(tmp_path / "full", names), _saved_server_weights(tmp_path / "cut", names)
    assert all(torch.equal(full[n], cut[n]) for n in names)


def test_stage2_refuses_a_checkpoint_without_its_average(stage1_run, tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))

    def stop(step, loss):
        if step == 3:
            raise _Interrupt

    with pytest.raises(_Interrupt):
        train_stage2(_cfg(tmp_path / "cut", stage1_run, ema_decay=0.6), on_step=stop)
    (latest_checkpoint(tmp_path / "cut") / EMA_FILE).unlink()
    with pytest.raises(ValueError, match="holds no weight average \\(ema.safetensors\\) though ema_decay is set"):
        train_stage2(_cfg(tmp_path / "cut", stage1_run, ema_decay=0.6))
    # a run saved with another decay is another run: refused before any weight is read
    with pytest.raises(ValueError, match="other settings \\(ema_decay\\)"):
        train_stage2(_cfg(tmp_path / "cut", stage1_run, ema_decay=0.9))
