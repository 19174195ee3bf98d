"""RAPT: plain tokens, the client's privatization of examples, the batch with plain-token positions, the
reconstruction head and its loss, every PEFT method training on a tiny BERT with the head, and the head's removal."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from textfree.data.tasks import TaskData
from textfree.heads.reconstruction import ReconstructionHead
from textfree.rapt.model import encode_examples, load_classifier
from textfree.rapt.train import RaptTrainConfig, build_mechanism, train_rapt
from textfree.substitution.examples import PrivatizedExample, privatize_examples
from textfree.substitution.plain import PlainTokens

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "data"
POS = ["a great and moving film", "she loved the warm ending", "what a wonderful cast", "funny and smart"] * 5
NEG = ["a dull and boring film", "he hated the slow ending", "what a terrible cast", "flat and stupid"] * 5


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def mechanism(tiny_encoder_dir):
    return build_mechanism(str(tiny_encoder_dir), 1e9, "default")


@pytest.fixture(scope="module")
def data():
    texts = [(t,) for t in POS + NEG]
    labels = [1] * len(POS) + [0] * len(NEG)
    return TaskData("sst2", texts, labels, texts[::5], labels[::5], "train", "dev")


# ------------------------------------------------------------------------------------------------ plain tokens
def test_plain_tokens_are_drawn_uniformly_from_the_categories(mechanism):
    words, tags = mechanism.table.words, mechanism.vocabulary_tags()
    plain = PlainTokens.sample(words, tags, categories=["NOUN"], length=2000, generator=gen(1))
    nouns = {w for w, t in zip(words, tags) if t == "NOUN"}
    assert set(plain.vocabulary) == nouns and set(plain.sequences[0]) <= nouns
    # uniform over the nouns: no word far above its expected count (chi-square-free bound: max count is small)
    counts = Counter(plain.sequences[0])
    assert max(counts.values()) <= 12 and len(counts) > 0.5 * min(len(nouns), 2000)
    small = PlainTokens.sample(words, tags, categories=["NOUN", "VERB"], length=40, n_sequences=3, vocab_size=50,
                               generator=gen(2))  # fmt: skip
    assert len(small.vocabulary) == 50 and len(small.sequences) == 3 and small.length == 40
    assert all(0 <= i < 50 for s in range(3) for i in small.targets(s))
    assert PlainTokens.from_dict(json.loads(json.dumps(small.to_dict()))) == small


def test_plain_tokens_refuse_bad_input(mechanism):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        PlainTokens((("cat",),), ("dog", "bird"))
    with pytest.raises(ValueError, match="one length"):
        PlainTokens((("dog",), ("dog", "bird")), ("dog", "bird"))
    with pytest.raises(ValueError, match="length must be an integer >= 1"):
        PlainTokens.sample(["a", "b"], None, categories=None, length=0, generator=gen())
    with pytest.raises(ValueError, match="vocab_size 10 is over"):
        PlainTokens.sample(["a", "b"], None, categories=None, vocab_size=10, generator=gen())
    with pytest.raises(ValueError, match="not a textfree-rapt-plain-tokens file"):
        PlainTokens.from_dict({"format": "other"})


def test_plain_tokens_save_and_load(tmp_path):
    plain = PlainTokens((("dog", "bird"),), ("dog", "bird", "cat"), ("NOUN",))
    plain.save(tmp_path)
    assert PlainTokens.load(tmp_path) == plain
    (tmp_path / "plain_tokens.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot read plain tokens"):
        PlainTokens.load(tmp_path)


# ------------------------------------------------------------------------------------------------ the client
def test_client_privatizes_examples_and_plain_tokens_separately(tiny_encoder_dir):
    mech = build_mechanism(str(tiny_encoder_dir), 1e-3, "default")  # nearly every eligible word replaced
    plain = PlainTokens.sample(mech.table.words, mech.vocabulary_tags(), categories=mech.pos_categories, length=6,
                               n_sequences=2, generator=gen(3))  # fmt: skip
    examples = [("the cat sat on the mat", "a dog ran to the park"), ("she saw him", "we met them")]
    out = privatize_examples(examples, [1, 0], mech, plain, generator=gen(4))
    assert [len(e.parts) for e in out] == [2, 2] and [e.label for e in out] == [1, 0]
    for ex in out:
        assert ex.sequence in (0, 1) and len(ex.plain) == 6 and ex.plain != plain.sequences[ex.sequence]
    assert out[0].parts[0].split()[0] == "the"  # a determiner: outside the categories, sent unchanged
    # the example's own privatized words only (plain tokens are public): nouns, verbs, pronouns, prepositions
    assert out[1].words_privatized == 6 and 0 < out[0].words_privatized < 12
    clean = privatize_examples(examples, [1, 0], None, plain, generator=gen(4))
    assert clean[0].parts == examples[0] and clean[0].plain == plain.sequences[clean[0].sequence]
    with pytest.raises(ValueError, match="2 examples but 1 labels"):
        privatize_examples(examples, [1], mech, plain, generator=gen())
    with pytest.raises(TypeError, match="pass a torch.Generator"):
        privatize_examples(examples, [1, 0], mech, plain, generator=None)
    with pytest.raises(ValueError, match="same 1 or 2 sentences"):
        privatize_examples([("a",), ("b", "c")], [1, 0], mech, None, generator=gen())


# ------------------------------------------------------------------------------------------------ the batch
def test_batch_points_at_the_plain_tokens(tiny_encoder_dir, mechanism):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_encoder_dir)
    plain = PlainTokens((("house", "river", "walked"), ("garden", "sang", "table")), ("house", "river", "walked",
                        "garden", "sang", "table"))  # fmt: skip
    examples = [
        PrivatizedExample(("a fine film",), 1, ("house", "river", "walked"), 0),
        PrivatizedExample(("terrible",), 0, ("garden", "sang", "table"), 1),
    ]
    batch = encode_examples(tok, examples, plain, max_length=32)
    assert batch["labels"].tolist() == [1, 0]
    for i, ex in enumerate(examples):
        ids = batch["input_ids"][i, batch["plain_positions"][i]].tolist()
        assert tok.convert_ids_to_tokens(ids) == list(ex.plain)
        assert batch["plain_targets"][i].tolist() == plain.targets(ex.sequence)
    # the task head's mean runs over the input's own tokens: not [CLS]/[SEP], not the plain tokens
    own = [tok.convert_ids_to_tokens(batch["input_ids"][i, batch["input_mask"][i]].tolist()) for i in range(2)]
    assert own == [["a", "fine", "film"], ["terrible"]]
    short = encode_examples(tok, examples, plain, max_length=3)  # [CLS] house [SEP]: two plain words cut off
    assert short["plain_targets"][0].tolist() == [0, -100, -100]
    with pytest.raises(ValueError, match="disagree"):
        encode_examples(tok, examples, None, max_length=32)


def test_reconstruction_head_loss_is_cross_entropy_at_the_positions():
    torch.manual_seed(0)
    head = ReconstructionHead(8, 5, bottleneck=3)
    assert [p.shape for p in head.parameters()] == [(3, 8), (3,), (5, 3), (5,)]
    hidden = torch.randn(2, 6, 8)
    positions = torch.tensor([[1, 2], [4, 0]])
    targets = torch.tensor([[3, 0], [1, -100]])
    expected = torch.nn.functional.cross_entropy(
        torch.stack([head(hidden[0, 1]), head(hidden[0, 2]), head(hidden[1, 4])]), torch.tensor([3, 0, 1])
    )
    assert torch.allclose(head.loss(hidden, positions, targets), expected)
    with pytest.raises(ValueError, match="positions must lie in"):
        head.loss(hidden, torch.tensor([[6, 0], [0, 0]]), targets)
    with pytest.raises(ValueError, match="bottleneck must be an integer"):
        ReconstructionHead(8, 5, bottleneck=0)


# ------------------------------------------------------------------------------------------------ training
@pytest.mark.parametrize("method", ["lora", "prompt_tuning", "prefix_tuning", "full"])
def test_every_method_trains_with_the_head_and_serves_without_it(method, tiny_encoder_dir, data, tmp_path, monkeypatch):
    from textfree.heads import reconstruction

    shifts = []
    real = reconstruction.ReconstructionHead.loss

    def spy(self, hidden, positions, targets):
        shifts.append(int(positions[0, 0]) - 1)  # the first plain word sits right after [CLS]
        return real(self, hidden, positions, targets)

    monkeypatch.setattr(reconstruction.ReconstructionHead, "loss", spy)
    cfg = RaptTrainConfig(out=str(tmp_path / method), encoder=str(tiny_encoder_dir), method=method, eta=50.0,
                          plain_length=4, epochs=2, batch_size=8, virtual_tokens=3, progress=False)  # fmt: skip
    summary = train_rapt(cfg, data=data)
    # prompt tuning's virtual tokens come first: the head must read past them
    assert set(shifts) == ({3} if method == "prompt_tuning" else {0})
    assert summary["steps"] == 10 and summary["n_train"] == 40 and 0 <= summary["acc"] <= 1
    model = summary["model"]
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any(n.startswith("head.") for n in trained) and any(n.startswith("task_head.") for n in trained)
    if method != "full":  # a PEFT method trains its adapter (and the classifier), not the encoder's own weights
        assert not any("attention.self.query.weight" in n and "lora" not in n for n in trained)
    run = tmp_path / method
    assert (run / ("model" if method == "full" else "adapter")).is_dir() and (run / "plain_tokens.json").is_file()
    saved = " ".join(p.name for p in run.rglob("*") if p.is_file() and "checkpoints" not in p.parts)
    served, tok, plain, config = load_classifier(run)
    assert served.head is None and "reconstruction" not in saved
    assert not any(n.startswith("head.") for n, _ in served.named_parameters())
    from safetensors import safe_open

    assert sorted(safe_open(str(run / "task_head.safetensors"), "pt").keys()) == ["bias", "weight"]
    for file in run.rglob("*.safetensors"):
        if "checkpoints" not in file.parts:  # no tensor of the reconstruction head (up / down) is served
            assert not [k for k in safe_open(str(file), "pt").keys() if k.split(".")[-2:-1] in (["up"], ["down"])], file
    examples = privatize_examples(data.test_texts, data.test_labels, build_mechanism(str(tiny_encoder_dir), 50.0,
                                  "default"), plain, generator=gen(9))  # fmt: skip
    batch = encode_examples(tok, examples, plain, max_length=cfg.max_length)
    model.eval()
    assert torch.equal(served.predict(batch), model.predict(batch)), "the served model must answer as trained"


def test_ablations_and_config_checks(tiny_encoder_dir, data, tmp_path):
    no_rec = RaptTrainConfig(out=str(tmp_path / "norec"), encoder=str(tiny_encoder_dir), eta=50.0, plain_length=4,
                             reconstruction=False, batch_size=8, epochs=1, progress=False)  # fmt: skip
    summary = train_rapt(no_rec, data=data)
    assert not any(n.startswith("head.") for n, _ in summary["model"].named_parameters())
    assert (tmp_path / "norec" / "plain_tokens.json").is_file()  # plain tokens kept: "without reconstruction"
    none = RaptTrainConfig(out=str(tmp_path / "none"), encoder=str(tiny_encoder_dir), eta=None, plain_length=0,
                           reconstruction=False, batch_size=8, epochs=1, progress=False)  # fmt: skip
    summary = train_rapt(none, data=data)
    assert summary["epsilon_per_word"] is None and summary["mean_privatized_words"] == 0
    assert not (tmp_path / "none" / "plain_tokens.json").exists()
    for bad, match in (({"method": "adapter"}, "method must be one of"), ({"eta": -1.0}, "eta must be"),
                       ({"plain_length": 0}, "plain_length must be > 0 with reconstruction on"),
                       ({"task": "mnli"}, "task must be"),
                       ({"plain_length": 200}, "leaves no room")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            RaptTrainConfig(out=str(tmp_path / "x"), **bad)


# ------------------------------------------------------------------------------------------------ the cell kind
def _cell(encoder, out, **params) -> dict:
    base = {"task": "sst2", "train_limit": None, "test_limit": None, "batch_size": 2, "plain_length": 3,
            "max_length": 32, "out": str(out)}  # fmt: skip
    return {"name": "rapt_test", "kind": "rapt_finetune", "encoder": str(encoder), "params": base | params,
            "grid": {"params.eta": [None, 50]}, "seeds": [0]}  # fmt: skip


def test_cell_kind_runs_on_the_glue_fixtures(tiny_encoder_dir, tmp_path, monkeypatch):
    from textfree.experiments import run_cell
    from textfree.results.files import load_results

    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))
    path = run_cell(_cell(tiny_encoder_dir, tmp_path / "runs"), tmp_path, progress=False)
    rows = [{k: v["mean"] for k, v in r["metrics"].items()} for r in load_results(path)["results"]]
    assert [r["n_train"] for r in rows] == [3, 3] and [r["n_test"] for r in rows] == [2, 2]
    assert rows[0]["epsilon_per_word"] is None and rows[1]["epsilon_per_word"] > 0
    assert rows[0]["mean_privatized_words"] == 0 and rows[1]["mean_privatized_words"] > 0
    assert sorted(p.name for p in (tmp_path / "runs" / "rapt_test").iterdir()) == ["eta=50-s0", "eta=None-s0"]
    # run again: the finished runs are re-scored, not retrained; they keep their accuracy, final loss and cost
    again = run_cell(_cell(tiny_encoder_dir, tmp_path / "runs"), tmp_path / "again", progress=False)
    rescored = [{k: v["mean"] for k, v in r["metrics"].items()} for r in load_results(again)["results"]]
    for before, after, point in zip(rows, rescored, ("eta=None-s0", "eta=50-s0")):
        assert after["acc"] == before["acc"] and after["final_loss"] == before["final_loss"] is not None
        summary = json.loads((tmp_path / "runs" / "rapt_test" / point / "summary.json").read_text())
        # its cost: the training carried through the resume plus the re-score, as the run's summary counts it
        assert after["seconds"] == summary["total_wall_s"] > summary["carried_wall_s"] > 0


def test_cell_validation_names_the_field(tiny_encoder_dir, tmp_path):
    from textfree.experiments import Cell, CellError

    def field(cell) -> str:
        with pytest.raises(CellError) as info:
            Cell.from_dict(cell)
        return info.value.field

    assert field(_cell(tiny_encoder_dir, tmp_path, method="adapter")) == "params.method"
    assert field(_cell(tiny_encoder_dir, tmp_path, plain_length=0)) == "params.plain_length"
    assert field(_cell(tiny_encoder_dir, tmp_path, rounds=3)) == "params"  # an unknown parameter
    bad_eta = _cell(tiny_encoder_dir, tmp_path)
    bad_eta["grid"] = {"params.eta": [50, -1]}
    assert field(bad_eta) == "grid.params.eta"
    assert field(_cell(tiny_encoder_dir, tmp_path) | {"dataset": "sst2"}) == "dataset"
