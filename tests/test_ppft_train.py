"""PPFT training: stage 1 and stage 2 on tiny models and the hand-written fixture data; freezing, the payload-only
server input, fresh noise per epoch, resumption, the CLI; one slow test on real Pri-DDX rows."""

import dataclasses
import json
import math
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from textfree.cli import app
from textfree.data import mcqa_prompt, ppft_split
from textfree.lm.loading import load_decoder, make_tiny_decoder_dir
from textfree.ppft.batches import (
    RESTORE_INSTRUCTION,
    ClientCache,
    PayloadExample,
    add_restore_examples,
    general_examples,
)
from textfree.ppft.model import TextFreeLM
from textfree.ppft.server import ServerModel
from textfree.ppft.train import Stage1Config, Stage2Config, train_stage1, train_stage2

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "data"


@pytest.fixture(scope="module")
def tiny_decoder_dir(tmp_path_factory) -> Path:
    return make_tiny_decoder_dir(tmp_path_factory.mktemp("tiny-decoder"), hidden=32, layers=2, heads=2, seed=0)


@pytest.fixture
def fixture_data(monkeypatch):
    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))
    return FIXTURES


def _stage1_cfg(out, decoder, encoder, **kw):
    base = dict(
        out=str(out),
        decoder=str(decoder),
        encoder=str(encoder),
        k=2,
        epochs=2,
        batch_size=2,
        lr=1e-2,
        encoder_lr=1e-3,
        warmup_steps=1,
        save_every=2,
        log_every=1,
        progress=False,
        max_target_tokens=16,
    )
    return Stage1Config(**(base | kw))


def _stage2_cfg(out, init, **kw):
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
def stage1_run(tmp_path_factory, tiny_encoder_dir, tiny_decoder_dir):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TEXTFREE_DATA", str(FIXTURES))
        out = tmp_path_factory.mktemp("runs") / "stage1"
        summary = train_stage1(_stage1_cfg(out, tiny_decoder_dir, tiny_encoder_dir))
    return out, summary


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path))


# ---------------------------------------------------------------------------------------------- stage 1
def test_stage1_trains_encoder_projection_and_lora(stage1_run, tiny_encoder_dir):
    run, summary = stage1_run
    assert summary["stage"] == "stage1" and summary["examples"] == 6 and summary["steps"] == 6
    assert torch.isfinite(torch.tensor(summary["final_loss"]))
    config = json.loads((run / "textfree_config.json").read_text())
    assert config["stage"] == "stage1" and config["epsilon"] is None and config["k"] == 2
    assert json.loads((run / "train_config.json").read_text())["kind"] == "Stage1Config"
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]
    before = _tensors(Path(tiny_encoder_dir) / "model.safetensors")
    after = _tensors(run / "encoder" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before), "stage 1 must train the encoder"
    lora = _tensors(run / "adapter" / "adapter_model.safetensors")
    assert any(v.abs().sum() > 0 for k, v in lora.items() if "lora_B" in k)
    lm = summary["model"]
    assert lm.config.encoder_sha256 == config["encoder_sha256"] == lm.encoder.sha256


def test_stage1_data_sources(fixture_data):
    examples = general_examples()
    assert len(examples) == 6 and all(e.private and e.target and e.public == "" for e in examples)
    more = add_restore_examples(examples, 0.5, seed=0)
    extra = more[len(examples) :]
    assert len(extra) == 3 and all(e.public == RESTORE_INSTRUCTION and e.target == e.private for e in extra)
    assert add_restore_examples(examples, 0.5, seed=0) == more
    for bad in ("csqa", "arc", "pri-ddx", "slja"):
        with pytest.raises(ValueError, match="may not be used for stage 1"):
            general_examples([bad])


# ---------------------------------------------------------------------------------------------- stage 2
def test_stage2_freezes_encoder_and_base_decoder(stage1_run, fixture_data, tmp_path, tiny_decoder_dir):
    run1, _ = stage1_run
    summary = train_stage2(_stage2_cfg(tmp_path / "stage2", run1))
    lm = summary["model"]
    assert summary["stage"] == "stage2" and summary["steps"] == 9 and summary["examples"] == 5
    # encoder: no gradient ever, and bit-identical to the stage-1 encoder
    assert all(p.grad is None and not p.requires_grad for p in lm.encoder.parameters())
    enc1 = TextFreeLM.load(run1).encoder.state_dict()
    for name, tensor in lm.encoder.state_dict().items():
        assert torch.equal(tensor.cpu(), enc1[name]), name
    saved = _tensors(tmp_path / "stage2" / "encoder" / "model.safetensors")
    assert all(torch.equal(saved[k], v) for k, v in _tensors(run1 / "encoder" / "model.safetensors").items())
    # base decoder weights unchanged; only projection + LoRA changed
    base, _ = load_decoder(tiny_decoder_dir)
    base_sd = base.state_dict()
    changed = set()
    stage1 = TextFreeLM.load(run1)
    before = dict(stage1.server.named_parameters())
    for name, p in lm.server.named_parameters():
        if not torch.equal(p.detach().cpu(), before[name].detach().cpu()):
            changed.add(name)
        if "lora_" not in name and name.startswith("decoder."):
            key = name.removeprefix("decoder.base_model.model.").replace(".base_layer", "")
            assert torch.equal(p.detach().cpu(), base_sd[key].cpu()), name
    assert changed and all(n.startswith("projection.") or "lora_" in n for n in changed)
    assert any(n.startswith("projection.") for n in changed) and any("lora_" in n for n in changed)
    config = json.loads((tmp_path / "stage2" / "textfree_config.json").read_text())
    assert (config["stage"], config["epsilon"], config["mechanism"]) == ("stage2", 28.0, "l2_laplace")


def test_stage2_server_sees_only_payloads(stage1_run, fixture_data, tmp_path, monkeypatch):
    """Spy on the server during a real stage-2 run: tensors, public text and targets only, never private text."""
    records = ppft_split("ddx")["train"]
    private = [mcqa_prompt(r).private for r in records]
    contexts = [r.context for r in records]
    calls, epochs = [], []
    original_forward = ServerModel.forward
    original_privatize = ClientCache.privatize

    def spy_forward(self, *args, **kwargs):
        calls.append((args, kwargs))
        return original_forward(self, *args, **kwargs)

    def spy_privatize(self, *args, **kwargs):
        items = original_privatize(self, *args, **kwargs)
        epochs.append(items)
        return items

    monkeypatch.setattr(ServerModel, "forward", spy_forward)
    monkeypatch.setattr(ClientCache, "privatize", spy_privatize)
    run1, _ = stage1_run
    train_stage2(_stage2_cfg(tmp_path / "s2", run1))

    assert len(calls) == 9 and len(epochs) == 3
    for args, kwargs in calls:
        assert set(kwargs) == {"public", "targets"} and len(args) == 2
        vectors, mask = args
        assert isinstance(vectors, torch.Tensor) and vectors.dtype == torch.float32 and mask.dtype == torch.bool
        strings = list(kwargs["public"]) + list(kwargs["targets"])
        assert all(isinstance(s, str) for s in strings)
        for s in strings:
            for text in private + contexts:
                assert text not in s
                assert not (s and s in text and len(s) > 40)
        assert set(kwargs["targets"]) <= {r.answer for r in records}
    for items in epochs:
        assert all(type(it) is PayloadExample for it in items)
        assert {f.name for f in dataclasses.fields(PayloadExample)} == {"vectors", "public", "target"}
        for it in items:
            assert torch.allclose(it.vectors.norm(dim=-1), torch.ones(it.vectors.shape[0]), atol=1e-4)
    # fresh noise every epoch: the same prompts give different payload rows
    assert not torch.equal(epochs[0][0].vectors, epochs[1][0].vectors)
    assert not torch.equal(epochs[1][0].vectors, epochs[2][0].vectors)


def _assert_payload_rows(rows, private):
    """Server-side input: PayloadExamples whose strings hold none of the private texts."""
    assert isinstance(rows, list) and rows and all(type(r) is PayloadExample for r in rows)
    for r in rows:
        for s in (r.public, r.target):
            assert isinstance(s, str) and not any(text in s or (len(s) > 40 and s in text) for text in private)


def test_stage2_beyond_paper_fits_give_the_server_payload_rows_only(stage1_run, fixture_data, tmp_path, monkeypatch):
    """The class subspace and the answer head are fitted on the server side from payload rows (or a function that
    returns a fresh release of them) and targets, never from the client cache or the prompts' text."""
    import textfree.ppft.answer_head as answer_head
    import textfree.ppft.stage2_fits as fits
    import textfree.ppft.train as train

    records = ppft_split("ddx")["train"]
    private = [mcqa_prompt(r).private for r in records] + [r.context for r in records]
    seen = {"subspace": [], "head_fit": [], "head_train": [], "accuracy": []}

    def checked_release(release, log):
        def wrapped(epoch):
            rows = release(epoch)
            _assert_payload_rows(rows, private)
            log.append(epoch)
            return rows

        return wrapped

    def spy(name, original, make):
        def call(*args, **kwargs):
            return original(*make(args, kwargs))

        monkeypatch.setattr(*name, call)

    original_subspace, original_fit = fits.fit_class_subspace, train.fit_answer_head
    original_train, original_accuracy = answer_head.train_answer_head, answer_head.head_accuracy

    def subspace_args(args, kwargs):
        assert not kwargs and len(args) == 1
        _assert_payload_rows(args[0], private)
        seen["subspace"].append(len(args[0]))
        return args

    def fit_args(args, kwargs):
        cfg, run, server, payloads = args
        assert not kwargs and type(server) is ServerModel and callable(payloads)
        assert not any(isinstance(a, (ClientCache, list, tuple)) for a in args)
        return cfg, run, server, checked_release(payloads, seen["head_fit"])

    def train_args(args, kwargs):
        (payloads,) = args
        assert set(kwargs) == {"epochs", "generator", "standardize", "hidden"}
        seen["head_train"].append(kwargs["epochs"])
        return (payloads,)

    def accuracy_args(args, kwargs):
        _assert_payload_rows(args[1], private)
        seen["accuracy"].append(len(args[1]))
        return args

    spy((fits, "fit_class_subspace"), original_subspace, subspace_args)
    spy((train, "fit_answer_head"), original_fit, fit_args)
    monkeypatch.setattr(answer_head, "train_answer_head", lambda *a, **k: original_train(*train_args(a, k), **k))
    spy((answer_head, "head_accuracy"), original_accuracy, accuracy_args)
    run1, _ = stage1_run
    summary = train_stage2(
        _stage2_cfg(
            tmp_path / "fits",
            run1,
            center_mu=2.0,
            subspace_epochs=2,
            answer_head=True,
            answer_head_epochs=3,
            tasks=["mcqa", "open"],
            epochs=1,
        )
    )
    distinct = len({mcqa_prompt(r).private for r in records})
    assert seen["subspace"] == [2 * distinct] and summary["center"]["subspace"]["releases_per_prompt"] == 2
    assert seen["head_train"] == [3] and seen["accuracy"] == [2 * len(records)]
    assert seen["head_fit"] == [0, 1, 2, -1]  # three passes with fresh noise, then one more draw to check the head


def test_server_side_fits_refuse_anything_but_payload_rows(stage1_run, fixture_data):
    """A client cache, text examples or strings handed to a server-side fit are refused by type, before any work."""
    from textfree.ppft.answer_head import head_accuracy, train_answer_head
    from textfree.ppft.batches import TextExample, collate_payloads
    from textfree.ppft.stage2_fits import fit_class_subspace

    text = [TextExample("A 46-year-old male with headaches", "Options: ...", "Cluster headache")]
    row = PayloadExample(torch.ones(2, 4) / 2, "Options: ...", "Cluster headache")
    for bad in (text, [row, text[0]], "A 46-year-old male", object()):
        for call in (
            lambda b: fit_class_subspace(b),
            lambda b: collate_payloads(b),
            lambda b: head_accuracy(None, b),
            lambda b: train_answer_head(lambda epoch: b, epochs=1, generator=torch.Generator()),
        ):
            with pytest.raises(TypeError, match="PayloadExamples"):
                call(bad)
    # a release whose rows change between passes is refused (the head's labels are pass 0's)
    rows = [PayloadExample(torch.ones(2, 4) / 2, "", t) for t in ("Cluster headache", "Sarcoidosis") * 2]
    with pytest.raises(ValueError, match="pass 1 holds other rows than pass 0"):
        train_answer_head(
            lambda epoch: rows if epoch == 0 else rows[::-1], epochs=2, generator=torch.Generator().manual_seed(0)
        )
    lm = TextFreeLM.load(stage1_run[0])
    cache = ClientCache(lm.encoder, text)
    with pytest.raises(TypeError, match="PayloadExamples .*got ClientCache"):
        fit_class_subspace(cache)


def test_stage2_without_noise_is_the_clean_upper_bound(stage1_run, fixture_data, tmp_path, monkeypatch):
    epochs = []
    original = ClientCache.privatize

    def spy(self, *args, **kwargs):
        epochs.append(original(self, *args, **kwargs))
        return epochs[-1]

    monkeypatch.setattr(ClientCache, "privatize", spy)
    run1, _ = stage1_run
    summary = train_stage2(_stage2_cfg(tmp_path / "clean", run1, epsilon=None, epochs=2))
    assert summary["epsilon"] is None
    assert torch.equal(epochs[0][0].vectors, epochs[1][0].vectors)  # no noise: identical every epoch
    assert json.loads((tmp_path / "clean" / "textfree_config.json").read_text())["epsilon"] is None


# ---------------------------------------------------------------------------------------------- resumption
class Interrupt(Exception):
    pass


def _interrupt_at(n):
    def hook(step, loss):
        if step == n:
            raise Interrupt

    return hook


def _trained_weights(run: Path) -> dict[str, torch.Tensor]:
    out = {}
    for rel in ("projection/model.safetensors", "adapter/adapter_model.safetensors", "encoder/model.safetensors"):
        out |= {f"{rel}:{k}": v for k, v in _tensors(run / rel).items()}
    return out


def _assert_same_run(a: Path, b: Path):
    wa, wb = _trained_weights(a), _trained_weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    assert [json.loads(x)["loss"] for x in (a / "metrics.jsonl").read_text().splitlines()] == [
        json.loads(x)["loss"] for x in (b / "metrics.jsonl").read_text().splitlines()
    ]


def test_stage2_resumes_exactly_after_an_interruption(stage1_run, fixture_data, tmp_path):
    run1, _ = stage1_run
    full = train_stage2(_stage2_cfg(tmp_path / "full", run1))
    with pytest.raises(Interrupt):
        train_stage2(_stage2_cfg(tmp_path / "cut", run1), on_step=_interrupt_at(5))  # mid-epoch; checkpoint at 4
    assert [p.name for p in (tmp_path / "cut" / "checkpoints").iterdir()] == ["step-000004"]
    # saved by a version without a later setting (answer_head_standardize): it counts as its default, so it resumes
    doc = json.loads((tmp_path / "cut" / "train_config.json").read_text())
    assert doc["config"].pop("answer_head_standardize") is False
    (tmp_path / "cut" / "train_config.json").write_text(json.dumps(doc))
    resumed = train_stage2(_stage2_cfg(tmp_path / "cut", run1))
    assert resumed["resumed_from_step"] == 4 and resumed["steps"] == full["steps"] == 9
    _assert_same_run(tmp_path / "full", tmp_path / "cut")


def test_a_resumed_run_reports_the_whole_runs_first_loss_and_training_time(stage1_run, fixture_data, tmp_path, caplog):
    """The checkpoint carries the training time so far and the first loss; a resumed run adds its own time to that
    one and reports the first session's first loss, not the resumed part's. A checkpoint without the record resumes
    and reports both as unknown; a corrupt record is refused by name."""
    import shutil

    from textfree.experiments.kinds.ppft import _train_metrics

    run1, _ = stage1_run
    full = train_stage2(_stage2_cfg(tmp_path / "full", run1))
    cut = tmp_path / "cut"
    with pytest.raises(Interrupt):
        train_stage2(_stage2_cfg(cut, run1), on_step=_interrupt_at(5))
    state_file = cut / "checkpoints" / "step-000004" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    assert state["first_loss"] == full["first_loss"] and state["elapsed_s"] > 0
    shutil.copytree(cut, tmp_path / "pristine")  # the interrupted run, to resume again with another record

    def interrupted_again(record: dict) -> None:  # (a run resumes only from its own directory: `out` is a setting)
        shutil.rmtree(cut)
        shutil.copytree(tmp_path / "pristine", cut)
        state_file.write_text(json.dumps(record))

    state_file.write_text(json.dumps(state | {"elapsed_s": 1000.0}))  # as if the first session had trained 1,000 s
    resumed = train_stage2(_stage2_cfg(cut, run1))
    assert resumed["resumed_from_step"] == 4 and resumed["first_loss"] == full["first_loss"]
    assert 1000.0 < resumed["wall_s"] <= resumed["total_wall_s"] < 1000.0 + full["total_wall_s"] + 60
    logged = [json.loads(x) for x in (cut / "metrics.jsonl").read_text().splitlines()]
    assert [r["elapsed_s"] > 1000.0 for r in logged] == [r["step"] > 4 for r in logged]
    assert json.loads((cut / "summary.json").read_text())["total_wall_s"] == resumed["total_wall_s"]

    interrupted_again({k: v for k, v in state.items() if k not in ("elapsed_s", "first_loss")})  # an older checkpoint
    with caplog.at_level("WARNING", logger="textfree.training"):
        old = train_stage2(_stage2_cfg(cut, run1))
    assert any("records no training time or first loss" in r.getMessage() for r in caplog.records)
    assert old["steps"] == 9 and old["first_loss"] is None and old["wall_s"] is None and old["total_wall_s"] is None
    metrics = _train_metrics(old, reused=False)
    assert (
        math.isnan(metrics["train_first_loss"]) and math.isnan(metrics["train_wall_s"]) and metrics["train_steps"] == 9
    )

    interrupted_again(state | {"elapsed_s": -3})
    with pytest.raises(ValueError, match="elapsed_s must be a finite number >= 0 or null, got -3"):
        train_stage2(_stage2_cfg(cut, run1))


def test_a_finished_run_resumed_again_reports_its_final_loss(stage1_run, fixture_data, tmp_path):
    """Resuming a finished run (a re-score) trains nothing; it reports the final loss its last checkpoint recorded,
    and for a checkpoint written before that was recorded, the loss logged at its step."""
    run1, _ = stage1_run
    run = tmp_path / "done"
    full = train_stage2(_stage2_cfg(run, run1))
    again = train_stage2(_stage2_cfg(run, run1))
    assert again["resumed_from_step"] == again["steps"] == full["steps"]
    assert full["final_loss"] is not None and again["final_loss"] == full["final_loss"]
    last = sorted((run / "checkpoints").iterdir())[-1] / "trainer_state.json"
    state = json.loads(last.read_text())
    last.write_text(json.dumps({k: v for k, v in state.items() if k != "final_loss"}))
    logged = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    older = train_stage2(_stage2_cfg(run, run1))
    assert older["final_loss"] == logged[-1]["loss"] and logged[-1]["step"] == full["steps"]


def test_stage2_resumes_only_from_the_init_run_it_started_from(stage1_run, fixture_data, tmp_path, caplog):
    """The config names init by path: an interrupted run whose init was rebuilt at the same path is refused, its
    checkpoints kept; one whose train_config.json predates the fingerprint resumes with a warning."""
    import shutil

    from safetensors.torch import save_file

    from textfree.training.runs import InitChanged, run_fingerprint

    run1, _ = stage1_run
    init = tmp_path / "init"
    shutil.copytree(run1, init)
    cut = tmp_path / "cut"
    with pytest.raises(Interrupt):
        train_stage2(_stage2_cfg(cut, init), on_step=_interrupt_at(5))
    saved = json.loads((cut / "train_config.json").read_text())
    assert saved["init_fingerprint"] == run_fingerprint(init)

    (weights,) = (init / "projection").glob("*.safetensors")
    save_file({k: v + 0.01 for k, v in _tensors(weights).items()}, weights)
    with pytest.raises(InitChanged, match="was trained from another .*init.*cannot be resumed"):
        train_stage2(_stage2_cfg(cut, init))
    assert [p.name for p in (cut / "checkpoints").iterdir()] == ["step-000004"]
    assert json.loads((cut / "train_config.json").read_text()) == saved  # nothing rewritten by the refusal

    (cut / "train_config.json").write_text(json.dumps({k: v for k, v in saved.items() if k != "init_fingerprint"}))
    with caplog.at_level("WARNING", logger="textfree.training"):
        resumed = train_stage2(_stage2_cfg(cut, init))
    assert resumed["resumed_from_step"] == 4 and resumed["init_fingerprint"] == run_fingerprint(init)
    assert any("records no fingerprint of its init run" in r.getMessage() for r in caplog.records)


def test_stage2_answer_head_trains_first_stays_frozen_and_is_reused_on_resume(
    stage1_run, fixture_data, tmp_path, monkeypatch
):
    """The answer head is trained before the loop on fresh payloads (classes: the distinct targets), saved in the run,
    left unchanged by the loop (its class vectors train); an interrupted run resumes with the saved head, not a new
    one."""
    run1, _ = stage1_run
    cfg = dict(tasks=["mcqa", "open"], answer_head=True, answer_head_epochs=5)
    full = train_stage2(_stage2_cfg(tmp_path / "full", run1, **cfg))
    info = full["answer_head"]
    assert info["classes"] == 3 and info["epochs"] == 5 and 0.0 <= info["train_accuracy_fresh_draw"] <= 1.0
    assert (
        info["standardize"] is False
        and not full["model"].server.projection.answer.standardize
        and info["hidden"] == 256
    )
    proj = full["model"].server.projection
    assert set(proj.config.answer_classes) == {"Acute otitis media", "Cluster headache", "Sarcoidosis"}
    before = _tensors(tmp_path / "full" / "answer_head" / "model.safetensors")
    after = _tensors(tmp_path / "full" / "projection" / "model.safetensors")
    heads = [k for k in before if k.startswith("answer.")]
    assert heads and all(torch.equal(before[k], after[k]) for k in heads), "the stage-2 loop must not train the head"
    assert not torch.equal(before["answer_embed"], after["answer_embed"]), "the class vectors train with P_psi"
    saved = json.loads((tmp_path / "full" / "projection" / "config.json").read_text())
    assert saved["answer_classes"] == list(proj.config.answer_classes) and saved["answer_max_count"] >= 1
    # resume: the saved head is reused (training another one would fail here)
    with pytest.raises(Interrupt):
        train_stage2(_stage2_cfg(tmp_path / "cut", run1, **cfg), on_step=_interrupt_at(5))
    import textfree.ppft.answer_head as answer_head

    monkeypatch.setattr(answer_head, "train_answer_head", lambda *a, **k: pytest.fail("the saved head must be reused"))
    resumed = train_stage2(_stage2_cfg(tmp_path / "cut", run1, **cfg))
    assert resumed["resumed_from_step"] == 4 and resumed["answer_head"] == info
    _assert_same_run(tmp_path / "full", tmp_path / "cut")


@pytest.mark.parametrize(
    "name, bad, message",
    [
        ("lr", 0, "lr must be a number > 0, got 0"),
        ("lr", float("inf"), "lr must be a number > 0, got inf"),
        ("lr", "1e-3", "lr must be a number > 0, got '1e-3'"),
        ("weight_decay", -0.1, "weight_decay must be a number >= 0, got -0.1"),
        ("grad_clip", -1.0, r"grad_clip must be a number >= 0 \(0: no clipping\), got -1.0"),
        ("min_lr_ratio", 1.5, r"min_lr_ratio must be a number in \[0, 1\], got 1.5"),
        ("warmup_steps", 2.5, "warmup_steps must be an integer >= 0, got 2.5"),
        ("encoder_lr", -1e-5, "encoder_lr must be a number >= 0, got -1e-05"),
    ],
)
def test_optimiser_settings_are_checked_by_name(tmp_path, name, bad, message):
    cls = Stage1Config if name == "encoder_lr" else Stage2Config
    base = {"decoder": "d"} if cls is Stage1Config else {"init": "i"}
    with pytest.raises(ValueError, match=message):
        cls(out=str(tmp_path), **base, **{name: bad})
    assert getattr(cls(out=str(tmp_path), **base, weight_decay=0.1), "weight_decay") == 0.1


def test_stage2_answer_head_settings_are_checked(stage1_run, fixture_data, tmp_path):
    run1, _ = stage1_run
    with pytest.raises(ValueError, match="not for blind or restore runs"):
        _stage2_cfg(tmp_path / "b", run1, epsilon=None, blind=True, answer_head=True)
    with pytest.raises(ValueError, match="not for blind or restore runs"):
        _stage2_cfg(tmp_path / "r", run1, tasks=["restore"], answer_head=True)
    for bad in (0, None, 2.5):
        with pytest.raises(ValueError, match=f"answer_head_epochs must be an integer >= 1, got {bad}"):
            _stage2_cfg(tmp_path / "e", run1, answer_head=True, answer_head_epochs=bad)
    with pytest.raises(ValueError, match="answer_head must be true or false, got 'yes'"):
        _stage2_cfg(tmp_path / "y", run1, answer_head="yes")
    with pytest.raises(ValueError, match="answer_head_standardize must be true or false, got 1"):
        _stage2_cfg(tmp_path / "s", run1, answer_head=True, answer_head_standardize=1)
    with pytest.raises(ValueError, match="answer_head_standardize needs answer_head: true"):
        _stage2_cfg(tmp_path / "t", run1, answer_head_standardize=True)
    for bad in (-1, 1.0, True):
        with pytest.raises(
            ValueError, match=rf"answer_head_hidden must be an integer >= 0 \(0: a linear head\), got {bad}"
        ):
            _stage2_cfg(tmp_path / "h", run1, answer_head=True, answer_head_hidden=bad)
    with pytest.raises(ValueError, match="answer_head_hidden needs answer_head: true"):
        _stage2_cfg(tmp_path / "h", run1, answer_head_hidden=0)
    with pytest.raises(ValueError, match="answer_head_options must be true or false, got 'no'"):
        _stage2_cfg(tmp_path / "o", run1, answer_head=True, answer_head_options="no")
    with pytest.raises(ValueError, match="answer_head_options needs answer_head: true"):
        _stage2_cfg(tmp_path / "o", run1, answer_head_options=True)


def test_answer_classes_are_the_repeated_targets_most_frequent_first():
    from textfree.ppft.answer_head import answer_classes

    assert answer_classes(["flu", "cold", "flu", "otitis", "cold", "flu"]) == ["flu", "cold", "otitis"]
    assert answer_classes(["b", "a", "a", "b"]) == ["a", "b"]  # ties: alphabetical
    # spellings of one answer are one class, named by the most frequent one (Pri-SLJA has two such charges)
    assert answer_classes(["Theft", "theft", "Theft", "Fraud", "fraud ", "Fraud"]) == ["Fraud", "Theft"]
    assert answer_classes(["Theft", "theft", "Fraud", "Fraud", "Fraud"]) == ["Fraud", "Theft"]  # 3 against 2
    with pytest.raises(ValueError, match="at least 2 distinct training targets, got 1"):
        answer_classes(["flu", "flu"])
    with pytest.raises(ValueError, match="3 of 5 training targets occur once: the answers are free text"):
        answer_classes(["a", "b", "c", "d", "a"])


def test_stage1_resumes_exactly_after_an_interruption(fixture_data, tmp_path, tiny_encoder_dir, tiny_decoder_dir):
    full = train_stage1(_stage1_cfg(tmp_path / "full", tiny_decoder_dir, tiny_encoder_dir))
    with pytest.raises(Interrupt):
        train_stage1(_stage1_cfg(tmp_path / "cut", tiny_decoder_dir, tiny_encoder_dir), on_step=_interrupt_at(3))
    resumed = train_stage1(_stage1_cfg(tmp_path / "cut", tiny_decoder_dir, tiny_encoder_dir))
    assert resumed["resumed_from_step"] == 2 and resumed["steps"] == full["steps"] == 6
    _assert_same_run(tmp_path / "full", tmp_path / "cut")
    # a run directory holding another run is not silently resumed
    with pytest.raises(ValueError, match="other settings"):
        train_stage1(_stage1_cfg(tmp_path / "cut", tiny_decoder_dir, tiny_encoder_dir, lr=0.5))


# ---------------------------------------------------------------------------------------------- CLI
def test_cli_stage1_stage2_ask_evaluate(fixture_data, tmp_path, tiny_encoder_dir, tiny_decoder_dir):
    runner = CliRunner()

    def run(*args):
        result = runner.invoke(app, ["ppft", *map(str, args)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    s1, s2 = tmp_path / "s1", tmp_path / "s2"
    run(
        "train-stage1",
        "--decoder",
        tiny_decoder_dir,
        "--encoder",
        tiny_encoder_dir,
        "--out",
        s1,
        "--max-steps",
        2,
        "--k",
        2,
        "--ema-decay",
        0.9,
    )
    run(
        "train-stage2",
        "--from",
        s1,
        "--dataset",
        "pri-ddx",
        "--epsilon",
        75,
        "--k",
        4,
        "--out",
        s2,
        "--epochs",
        1,
        "--summary-slots",
        1,
        "--answer-head",
        "--answer-head-epochs",
        2,
        "--answer-head-standardize",
        "--answer-head-hidden",
        0,
        "--answer-head-options",
        "--center-mu",
        1,
        "--repeat-mean",
        "--ema-decay",
        0.99,
        "--weight-decay",
        0.01,
    )
    for run_dir, decay in ((s1, 0.9), (s2, 0.99)):  # the weight average reaches both stages' configs
        assert json.loads((run_dir / "train_config.json").read_text())["config"]["ema_decay"] == decay
    assert json.loads((s2 / "train_config.json").read_text())["config"]["weight_decay"] == 0.01
    saved = json.loads((s2 / "textfree_config.json").read_text())
    assert (
        saved["k"] == 4 and saved["summary_slots"] == 1
    )  # ask and evaluate below read payloads with the summary vector
    assert (
        saved["center_mu"] == 1.0 and len(saved["center_sha256"]) == 64 and (s2 / "slot_center.safetensors").is_file()
    )  # ... centred
    assert saved["repeat_mean"] is True  # ... sending each prompt's mean slot repeated
    head = json.loads((s2 / "projection" / "config.json").read_text())
    assert (
        len(head["answer_classes"]) == 3 and head["answer_standardize"] is True
    )  # ... and the standardised answer head,
    assert (
        head["answer_hidden"] == 0 and head["answer_options"] is True
    )  # linear, over the options: evaluate and ask run it
    out = run("evaluate", "--model", s2, "--dataset", "pri-ddx", "--task", "open_head", "--out", tmp_path / "head.json")
    assert "open_head" in out and json.loads((tmp_path / "head.json").read_text())["task"] == "open_head"
    out = run(
        "ask",
        "--model",
        s2,
        "A 46-year-old man with a history of cluster headaches",
        "--public",
        "Options:\nA. Cluster headache",
        "--seed",
        1,
        "--max-new-tokens",
        3,
    )
    assert "privacy:" in out and "epsilon 75.0 per unit distance" in out  # the model's training eps by default
    # the form, with the noise set on the command line
    out = run(
        "ask",
        "--model",
        s2,
        "A 46-year-old man with a history of cluster headaches",
        "--epsilon",
        28,
        "--k",
        4,
        "--seed",
        1,
        "--max-new-tokens",
        3,
    )
    assert "epsilon 28.0 per unit distance" in out and "worst-case loss for this prompt" in out
    out = run(
        "evaluate",
        "--model",
        s2,
        "--dataset",
        "pri-ddx",
        "--epsilon",
        28,
        "--out",
        tmp_path / "eval.json",
        "--max-new-tokens",
        3,
    )
    assert "accuracy" in out and json.loads((tmp_path / "eval.json").read_text())["n"] == 1
    out = run(
        "evaluate",
        "--model",
        s2,
        "--dataset",
        "pri-ddx",
        "--task",
        "blind_open",
        "--out",
        tmp_path / "blind.json",
        "--max-new-tokens",
        3,
    )
    blind = json.loads((tmp_path / "blind.json").read_text())
    assert "blind_open" in out and blind["task"] == "blind_open" and blind["epsilon"] is None
    for flags, words in (
        (["--epsilon", "-1"], "epsilon"),
        (["--k", "0"], "k must be"),
    ):  # one error line, not a traceback
        bad = runner.invoke(app, ["ppft", "ask", "--model", str(s2), "a prompt", *flags])  # (--k 0 was the model's k)
        assert bad.exit_code == 2 and "error" in bad.output and words in bad.output, bad.output
    handwritten = Path(__file__).parent / "fixtures" / "ppft" / "handwritten_ddx.jsonl"
    out = run(
        "evaluate",
        "--model",
        s2,
        "--prompts",
        handwritten,
        "--limit",
        2,
        "--max-new-tokens",
        2,
        "--out",
        tmp_path / "hw.json",
    )
    hw = json.loads((tmp_path / "hw.json").read_text())
    assert hw["n"] == 2 and hw["part"] == str(handwritten) and "handwritten_ddx.jsonl" in out
    bad = runner.invoke(app, ["ppft", "evaluate", "--model", str(s2), "--prompts", str(tmp_path / "none.jsonl")])
    assert bad.exit_code == 2 and "--prompts: no such file" in bad.output
    bad = runner.invoke(app, ["ppft", "evaluate", "--model", str(s2), "--dataset", "pri-ddx", "--limit", "-1"])
    assert bad.exit_code == 2 and "--limit must be >= 1, got -1" in bad.output  # (it dropped the last record)
    bad = runner.invoke(
        app, ["ppft", "train-stage2", "--from", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]
    )
    assert bad.exit_code == 2 and "error" in bad.output
    bad = runner.invoke(app, ["ppft", "train-stage2", "--from", str(s1), "--out", str(tmp_path / "y"), "--blind"])
    assert bad.exit_code == 2 and "blind run" in bad.output  # a blind run with an epsilon is refused before training
    bad = runner.invoke(
        app, ["ppft", "train-stage2", "--from", str(s1), "--out", str(tmp_path / "z"), "--task", "essay"]
    )
    assert bad.exit_code == 2 and "tasks" in bad.output
    bad = runner.invoke(
        app, ["ppft", "train-stage2", "--from", str(s1), "--out", str(tmp_path / "w"), "--summary-slots", "-1"]
    )
    assert bad.exit_code == 2 and "summary_slots must be an integer >= 0 or null, got -1" in bad.output
    bad = runner.invoke(
        app, ["ppft", "train-stage2", "--from", str(s1), "--out", str(tmp_path / "v"), "--count-vectors", "-2"]
    )
    assert bad.exit_code == 2 and "count_vectors must be an integer >= 0 or null, got -2" in bad.output
    bad = runner.invoke(
        app,
        [
            "ppft",
            "train-stage2",
            "--from",
            str(s1),
            "--out",
            str(tmp_path / "u"),
            "--answer-head",
            "--answer-head-epochs",
            "0",
        ],
    )
    assert bad.exit_code == 2 and "answer_head_epochs must be an integer >= 1, got 0" in bad.output
    bad = runner.invoke(
        app, ["ppft", "train-stage2", "--from", str(s1), "--out", str(tmp_path / "t"), "--center-mu", "-1"]
    )
    assert bad.exit_code == 2 and "center_mu must be a number > 0 or null, got -1" in bad.output
    bad = runner.invoke(
        app, ["ppft", "train-stage2", "--from", str(s1), "--out", str(tmp_path / "s"), "--slot-drop", "0.95"]
    )
    assert bad.exit_code == 2 and "slot_drop must be a number in [0, 0.9], got 0.95" in bad.output
    bad = runner.invoke(
        app, ["ppft", "train-stage2", "--from", str(s1), "--out", str(tmp_path / "r"), "--slot-augment-epochs", "2"]
    )
    assert bad.exit_code == 2 and "slot_augment_epochs (2) needs slot_insert or slot_drop" in bad.output
    bad = runner.invoke(
        app, ["ppft", "train-stage2", "--from", str(s1), "--out", str(tmp_path / "p"), "--ema-decay", "1"]
    )
    assert (
        bad.exit_code == 2
        and "ema_decay must be a number strictly between 0 and 1 (e.g. 0.999) or null, got 1.0" in bad.output
    )
    bad = runner.invoke(
        app, ["ppft", "train-stage2", "--from", str(s1), "--out", str(tmp_path / "o"), "--weight-decay", "-1"]
    )
    assert bad.exit_code == 2 and "weight_decay must be a number >= 0, got -1.0" in bad.output
    bad = runner.invoke(
        app, ["ppft", "train-stage2", "--from", str(s1), "--out", str(tmp_path / "q"), "--validation", "1"]
    )
    assert bad.exit_code == 2 and "validation must be a number in [0, 1) or null, got 1.0" in bad.output
    # model selection: train without the validation part (fixture at 0.6: 2 of 5 training rows), score that part (3
    # rows)
    out = run(
        "train-stage2",
        "--from",
        s1,
        "--dataset",
        "pri-ddx",
        "--epsilon",
        28,
        "--out",
        tmp_path / "sel",
        "--epochs",
        1,
        "--task",
        "mcqa",
        "--validation",
        0.6,
        "--eval",
    )
    assert "validation mcqa accuracy" in out and "(n=3, epsilon=28.0)" in out
    assert json.loads((tmp_path / "sel" / "summary.json").read_text())["examples"] == 2


# ---------------------------------------------------------------------------------------------- real data
@pytest.mark.slow
@pytest.mark.shared_data
def test_stage2_on_real_pri_ddx_beats_chance(shared_data, monkeypatch, tmp_path, tiny_encoder_dir):
    """Stage 2 (eps = 75, k = 4, 3 epochs: ~15-60 s on 2 cores) on the real Pri-DDX training split (967 rows),
    from an untrained tiny model; held-out 4-option accuracy (582 rows) must beat chance (25%). It fails if the
    model does not learn to answer with an option's text (untrained, it scores 0). Note: on Pri-DDX answering
    the most frequent training diagnosis among the options already scores ~0.94 (majority_baseline)."""
    from textfree.ppft.evaluate import evaluate_mcqa

    monkeypatch.setenv("TEXTFREE_DATA", str(shared_data))
    decoder = make_tiny_decoder_dir(tmp_path / "decoder", hidden=64, layers=2, heads=4, seed=0)
    TextFreeLM.build(decoder, encoder=tiny_encoder_dir, k=4, seed=0).save(tmp_path / "init")
    t0 = time.time()
    summary = train_stage2(
        Stage2Config(
            out=str(tmp_path / "ddx"),
            init=str(tmp_path / "init"),
            dataset="ddx",
            epsilon=75.0,
            tasks=["mcqa"],
            epochs=3,
            batch_size=16,
            lr=3e-3,
            warmup_steps=10,
            progress=False,
            save_every=1000,
        )
    )
    train_s = time.time() - t0
    heldout = ppft_split("ddx")["heldout"]
    result = evaluate_mcqa(summary["model"], heldout, epsilon=75.0, seed=0, max_new_tokens=8, batch_size=50)
    assert summary["final_loss"] < summary["first_loss"]
    assert result["n"] == 582
    assert result["accuracy"] > 0.25, (result["accuracy"], summary, train_s)


def _hand_centre(lm, texts, mu):
    """The stage-2 centre recomputed by hand: PrivateMean(mu) of each text's mean unit slot, training seed 0's draw."""
    from textfree.mechanisms.centering import PrivateMean, prompt_mean_slots
    from textfree.mechanisms.transforms import k_pool, l2_normalize
    from textfree.rng import seeded_generator

    slots = []
    for t in texts:
        b = lm.encoder.encode([t])
        pooled, m = k_pool(b.hidden, b.mask, lm.config.k)
        slots.append(l2_normalize(pooled[0][m[0]]))
    return (
        PrivateMean(mu)
        .sample(prompt_mean_slots(slots), generator=seeded_generator(0 * 100_003 + 90_001, warn=False))
        .float()
    )


def test_stage2_center_is_the_private_mean_of_the_prompts_and_ships_with_the_model(stage1_run, fixture_data, tmp_path):
    """center_mu: the centre is the mean of each distinct training prompt's mean unit slot plus N(0, (2/(n mu))^2)
    noise, saved beside the weights, named by sha256 in the config, applied by the loaded model's client (every slot
    still a unit vector), and reused on resume."""
    from textfree.mechanisms.centering import center_sha256
    from textfree.mechanisms.transforms import k_pool, l2_normalize

    run1, _ = stage1_run
    full = train_stage2(_stage2_cfg(tmp_path / "full", run1, center_mu=2.0, tasks=["mcqa", "open"]))
    info = full["center"]
    lm = TextFreeLM.load(tmp_path / "full")
    assert lm.config.center_mu == 2.0 and lm.config.center_sha256 == info["sha256"] == center_sha256(lm.center)
    # recompute the centre by hand from the same prompts and the same seeded generator
    from textfree.ppft.batches import domain_examples

    records = ppft_split("ddx")["train"]
    texts = list(dict.fromkeys(ex.private for ex in domain_examples(records, ["mcqa", "open"])))
    assert info["prompts"] == len(texts) and info["sigma"] == pytest.approx(2.0 / (len(texts) * 2.0))
    torch.testing.assert_close(lm.center, _hand_centre(lm, texts, 2.0), atol=1e-5, rtol=0)
    # the client centres: a clean payload's slots are unit(unit(v) - c), not unit(v)
    clean = lm.privatizer(None).privatize([texts[0]])
    b = lm.encoder.encode([texts[0]])
    pooled, m = k_pool(b.hidden, b.mask, lm.config.k)
    torch.testing.assert_close(
        clean.vectors[0, : int(m.sum())], l2_normalize(l2_normalize(pooled[0][m[0]]) - lm.center), atol=1e-5, rtol=0
    )
    noisy = lm.privatizer(28.0).privatize([texts[0]], seed=1)
    assert noisy.privatization.center_sha256 == info["sha256"]
    torch.testing.assert_close(noisy.vectors[0].norm(dim=-1), torch.ones(noisy.vectors.shape[1]), atol=1e-5, rtol=0)
    # resume reuses the saved centre
    with pytest.raises(Interrupt):
        train_stage2(
            _stage2_cfg(tmp_path / "cut", run1, center_mu=2.0, tasks=["mcqa", "open"]), on_step=_interrupt_at(5)
        )
    resumed = train_stage2(_stage2_cfg(tmp_path / "cut", run1, center_mu=2.0, tasks=["mcqa", "open"]))
    assert resumed["center"] == info
    _assert_same_run(tmp_path / "full", tmp_path / "cut")


def test_stage2_subspace_is_the_class_span_of_fresh_centred_payloads_and_ships_with_the_centre(
    stage1_run, fixture_data, tmp_path
):
    """subspace_epochs: after the centre, the server draws that many passes of fresh centred payloads of each training
    prompt (seeded 70_000 + pass), labels each payload's mean slot by its target, and keeps class_subspace of them; the
    map [centre; basis] is saved, named by sha256, applied by the loaded client (unit(B^T B unit(unit(v) - c))) and
    reused on resume; a resume that disagrees about the subspace is refused."""
    from textfree.data import normalize_answer
    from textfree.mechanisms.centering import center_sha256
    from textfree.mechanisms.subspace import class_subspace
    from textfree.mechanisms.transforms import k_pool, l2_normalize
    from textfree.ppft.batches import domain_examples
    from textfree.rng import seeded_generator

    run1, _ = stage1_run
    cfg = dict(center_mu=2.0, subspace_epochs=2, tasks=["mcqa", "open"])
    info = train_stage2(_stage2_cfg(tmp_path / "sub", run1, **cfg))["center"]
    lm = TextFreeLM.load(tmp_path / "sub")
    examples = domain_examples(ppft_split("ddx")["train"], ["mcqa", "open"])
    first = {}
    for ex in examples:
        first.setdefault(ex.private, normalize_answer(ex.target))
    texts, labels = list(first), list(first.values())
    center = _hand_centre(lm, texts, 2.0)
    assert (
        lm.center.shape[0] == 1 + info["subspace"]["rank"]
        and lm.config.center_sha256 == center_sha256(lm.center) == info["sha256"]
    )
    assert info["subspace"] == {
        "rank": len(set(labels)) - 1,
        "epochs": 2,
        "prompts": len(texts),
        "releases_per_prompt": 2,
    }
    torch.testing.assert_close(lm.center[0], center, atol=1e-5, rtol=0)
    # the basis by hand: two seeded passes of centred L2-Laplace(28) payloads, each reduced to its mean slot
    from textfree.mechanisms.laplace import L2Laplace

    means = []
    for epoch in range(2):
        gen = seeded_generator(0 * 100_003 + 70_000 + epoch, warn=False)
        for t in texts:
            b = lm.encoder.encode([t])
            pooled, m = k_pool(b.hidden, b.mask, lm.config.k)
            x = l2_normalize(l2_normalize(pooled[0][m[0]]) - center)
            means.append(l2_normalize(L2Laplace(28.0).sample(x.double(), generator=gen)).float().mean(dim=0))
    basis = class_subspace(torch.stack(means), labels * 2)
    torch.testing.assert_close(lm.center[1:], basis, atol=1e-4, rtol=0)
    # the loaded client projects: a clean payload's slots are unit(B^T B unit(unit(v) - c))
    b = lm.encoder.encode([texts[0]])
    pooled, m = k_pool(b.hidden, b.mask, lm.config.k)
    x = l2_normalize(l2_normalize(pooled[0][m[0]]) - center)
    want = l2_normalize(x @ basis.T @ basis)
    torch.testing.assert_close(
        lm.privatizer(None).privatize([texts[0]]).vectors[0, : int(m.sum())], want, atol=1e-4, rtol=0
    )
    # resume reuses the saved map; a resume without the subspace is refused, the map kept
    with pytest.raises(Interrupt):
        train_stage2(_stage2_cfg(tmp_path / "cut", run1, **cfg), on_step=_interrupt_at(5))
    assert train_stage2(_stage2_cfg(tmp_path / "cut", run1, **cfg))["center"] == info
    _assert_same_run(tmp_path / "sub", tmp_path / "cut")
    with pytest.raises(Interrupt):
        train_stage2(_stage2_cfg(tmp_path / "cut2", run1, **cfg), on_step=_interrupt_at(2))
    with pytest.raises(ValueError, match=r"holds a run with other settings \(subspace_epochs\)"):
        train_stage2(_stage2_cfg(tmp_path / "cut2", run1, center_mu=2.0, tasks=["mcqa", "open"]))
    assert (tmp_path / "cut2" / "slot_center.safetensors").is_file()


def test_stage2_center_settings_are_checked(stage1_run, fixture_data, tmp_path):
    run1, _ = stage1_run
    for bad in (0, -1.0, True, "1"):
        with pytest.raises(ValueError, match="center_mu must be a number > 0 or null"):
            _stage2_cfg(tmp_path / "x", run1, center_mu=bad)
    with pytest.raises(ValueError, match="not for blind runs or restore_text"):
        _stage2_cfg(tmp_path / "b", run1, epsilon=None, blind=True, center_mu=1.0)
    with pytest.raises(ValueError, match="subspace_epochs projects centred slots: it needs center_mu"):
        _stage2_cfg(tmp_path / "s", run1, subspace_epochs=3)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match=f"subspace_epochs must be an integer >= 1 or null, got {bad!r}"):
            _stage2_cfg(tmp_path / "s", run1, center_mu=1.0, subspace_epochs=bad)


def test_stage2_prompt_variants_rewrite_the_clients_training_prompts_before_encoding(
    stage1_run, fixture_data, tmp_path, monkeypatch
):
    """prompt_variants: each epoch the client encodes fresh rewrites of some training prompts (same items, another
    order) and privatizes them; the server still gets payload rows only; the cache it started from is untouched;
    the summary records the setting; runs it cannot apply to refuse it by name."""
    encoded, sent = [], []
    original_replaced = ClientCache.replaced
    original_forward = ServerModel.forward

    def spy_replaced(self, texts, **kwargs):
        before = list(self.private)
        copy = original_replaced(self, texts, **kwargs)
        assert self.private == before  # the cache of the prompts as written is not changed
        encoded.append(dict(texts))
        for i, text in texts.items():
            assert copy.private[i] == text and copy.hidden[i] is not self.hidden[i]
            assert text != self.private[i]
        untouched = [i for i in range(len(self)) if i not in texts]
        assert all(copy.hidden[i] is self.hidden[i] for i in untouched)
        return copy

    def spy_forward(self, vectors, mask, **kwargs):
        assert isinstance(vectors, torch.Tensor) and not any(isinstance(v, str) for v in kwargs.values())
        sent.append(int(mask.sum()))
        return original_forward(self, vectors, mask, **kwargs)

    monkeypatch.setattr(ClientCache, "replaced", spy_replaced)
    monkeypatch.setattr(ServerModel, "forward", spy_forward)
    run1, _ = stage1_run
    summary = train_stage2(_stage2_cfg(tmp_path / "var", run1, prompt_variants=1.0))
    assert summary["prompt_variants"] == {"prob": 1.0, "shuffle": True, "drop": 0.0}
    assert len(encoded) == 3 and all(encoded)  # one set of rewrites per epoch, every epoch some
    assert encoded[0] != encoded[1] or encoded[1] != encoded[2]  # fresh each epoch
    records = ppft_split("ddx")["train"]
    originals = [mcqa_prompt(r).private for r in records]
    for rewrites in encoded:
        for i, text in rewrites.items():  # the same items in another order: the same words
            words = lambda t: sorted(t.replace(",", "").replace(".", "").split())  # noqa: E731
            assert words(text) == words(originals[i])
    assert sent  # the server trained on payload rows
    encoded.clear()
    again = train_stage2(_stage2_cfg(tmp_path / "var2", run1, prompt_variants=1.0))
    assert again["final_loss"] == summary["final_loss"] and len(encoded) == 3  # seeded: the same rewrites, the same run
    assert train_stage2(_stage2_cfg(tmp_path / "plain", run1))["prompt_variants"] is None
    with pytest.raises(ValueError, match="no prompt rewriter for dataset 'slja'"):
        _stage2_cfg(tmp_path / "s", run1, dataset="slja", prompt_variants=0.5)
    with pytest.raises(ValueError, match="not for blind runs, restore_text or the 'restore' task"):
        _stage2_cfg(tmp_path / "r", run1, tasks=["mcqa", "restore"], prompt_variants=0.5)
    with pytest.raises(ValueError, match="not for blind runs"):
        _stage2_cfg(tmp_path / "b", run1, epsilon=None, blind=True, prompt_variants=0.5)
    with pytest.raises(
        ValueError,
        match="prompt_variant_drop / prompt_variant_shuffle / prompt_variant_rephrase need prompt_variants > 0",
    ):
        _stage2_cfg(tmp_path / "d", run1, prompt_variant_drop=0.2)
    with pytest.raises(ValueError, match=r"prompt_variants must be a number in \[0, 1.0\], got 2"):
        _stage2_cfg(tmp_path / "p", run1, prompt_variants=2)


def test_stage2_slot_augment_blurs_the_count_of_the_servers_training_rows_only(
    stage1_run, fixture_data, tmp_path, monkeypatch
):
    """slot_insert: the server's training batches hold more slots than the client's payloads (never fewer), the
    client's payloads are untouched, the summary records the setting; blind and restore runs refuse it."""
    seen, sent = [], []
    original_forward = ServerModel.forward
    original_privatize = ClientCache.privatize

    def spy_forward(self, vectors, mask, **kwargs):
        seen.append(int(mask.sum()))
        return original_forward(self, vectors, mask, **kwargs)

    def spy_privatize(self, *args, **kwargs):
        items = original_privatize(self, *args, **kwargs)
        sent.append(sum(it.vectors.shape[0] for it in items))
        return items

    monkeypatch.setattr(ServerModel, "forward", spy_forward)
    monkeypatch.setattr(ClientCache, "privatize", spy_privatize)
    run1, _ = stage1_run
    summary = train_stage2(_stage2_cfg(tmp_path / "aug", run1, slot_insert=1.0))
    assert summary["slot_augment"] == {"insert": 1.0, "drop": 0.0}
    assert len(sent) == 3 and sum(seen) > sum(sent)  # 3 epochs; each row gets 0..n extra slots
    seen.clear(), sent.clear()
    first = train_stage2(_stage2_cfg(tmp_path / "first", run1, slot_insert=1.0, slot_augment_epochs=1))
    assert first["slot_augment_epochs"] == 1 and len(seen) == 9  # 3 epochs of 3 steps: only epoch 0 is augmented
    assert sum(seen[:3]) > sent[0] and sum(seen[3:]) == sent[1] + sent[2]
    plain = train_stage2(_stage2_cfg(tmp_path / "plain", run1))
    assert plain["slot_augment"] is None
    with pytest.raises(ValueError, match=r"slot_augment_epochs \(2\) needs slot_insert or slot_drop"):
        _stage2_cfg(tmp_path / "e", run1, slot_augment_epochs=2)
    with pytest.raises(ValueError, match="slot_augment_epochs must be"):
        _stage2_cfg(tmp_path / "e", run1, slot_insert=0.5, slot_augment_epochs=0)
    for bad in (-0.5, "x"):
        with pytest.raises(ValueError, match="slot_insert must be a number in"):
            _stage2_cfg(tmp_path / "x", run1, slot_insert=bad)
    with pytest.raises(ValueError, match="not for blind or restore runs"):
        _stage2_cfg(tmp_path / "b", run1, epsilon=None, blind=True, slot_drop=0.2)
    with pytest.raises(ValueError, match="not for blind or restore runs"):
        _stage2_cfg(tmp_path / "r", run1, tasks=["restore"], slot_insert=0.5)


def test_stage2_repeat_mean_client_sends_each_prompts_mean_slot_in_training_the_subspace_fit_and_the_saved_client(
    stage1_run, fixture_data, tmp_path, monkeypatch
):
    """repeat_mean: every payload the server trains on (and the class subspace is fitted from) has all of a row's
    slots equal before the noise, and the saved model's client keeps doing it; without it (PPFT) a row's slots
    differ."""
    from textfree.mechanisms.slots import SlotPrivatization
    from textfree.mechanisms.transforms import k_pool, l2_normalize

    run1, _ = stage1_run
    seen: list[bool] = []
    real_apply = SlotPrivatization.apply

    def spy(self, hidden, mask, *, generator):
        seen.append(self.repeat_mean)
        return real_apply(self, hidden, mask, generator=generator)

    monkeypatch.setattr(SlotPrivatization, "apply", spy)
    summary = train_stage2(
        _stage2_cfg(tmp_path / "rep", run1, center_mu=2.0, subspace_epochs=1, repeat_mean=True, epochs=1)
    )
    assert seen and all(seen)  # the subspace fit's payloads and every epoch's
    assert summary["repeat_mean"] is True
    lm = TextFreeLM.load(tmp_path / "rep")
    assert lm.config.repeat_mean is True and lm.privatizer(28.0).privatization.repeat_mean
    text = ppft_split("ddx")["train"][0].context
    clean = lm.privatizer(None).privatize([text])
    n = clean.lengths[0]
    assert n > 1
    b = lm.encoder.encode([text])
    pooled, m = k_pool(b.hidden, b.mask, lm.config.k)
    from textfree.mechanisms import center_slots

    want = l2_normalize(center_slots(l2_normalize(pooled[0][m[0]]), lm.center).sum(dim=0))
    torch.testing.assert_close(clean.vectors[0, :n], want.expand(n, -1), atol=1e-5, rtol=0)
    assert clean.privatization.repeat_mean  # the header says so
    plain = TextFreeLM.load(run1).privatizer(None).privatize([text])
    assert not torch.allclose(plain.vectors[0, 0], plain.vectors[0, 1]) and not plain.privatization.repeat_mean
    with pytest.raises(ValueError, match="a blind run sends none"):
        _stage2_cfg(tmp_path / "b", run1, epsilon=None, blind=True, repeat_mean=True)
    with pytest.raises(ValueError, match="repeat_mean must be true, false or null, got 'yes'"):
        _stage2_cfg(tmp_path / "y", run1, repeat_mean="yes")
