"""RAPT's plain tokens and reconstruction head on a decoder (textfree.rapt.generation with plain_length and
reconstruction, textfree.lm.text_tuning with plain words and a head): what the client prepends and privatizes, where
the head reads, what it learns, and that the saved run holds no head."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from textfree.data import MCQARecord, mcqa_prompt
from textfree.lm.loading import load_decoder_tokenizer, make_tiny_decoder_dir
from textfree.lm.text_qa import private_parts, qa_prompt
from textfree.lm.text_tuning import TextPair, TextTuningConfig, encode_pairs, load_tuned_decoder, tune_text_decoder

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "data"
WORDS = ["apple", "river", "stone", "quickly", "green", "table", "music", "window", "bright", "cloud"]
BPE_TEXTS = [f"the {a} and the {b} near a {c} house" for a in WORDS for b in WORDS for c in WORDS[:3]]


@pytest.fixture(scope="module")
def bpe_decoder(tmp_path_factory) -> Path:
    """A tiny Llama with the project's byte-level BPE tokenizer (the fast pipeline decoder's kind)."""
    from textfree.lm.local.tokenizer import train_tokenizer

    tok = train_tokenizer(BPE_TEXTS, vocab_size=300, min_frequency=2)
    out = tmp_path_factory.mktemp("bpe-decoder")
    return make_tiny_decoder_dir(out, tokenizer=tok, hidden=32, layers=1, heads=2, seed=0)


@pytest.fixture(scope="module")
def wordpiece_decoder(tmp_path_factory) -> Path:
    return make_tiny_decoder_dir(tmp_path_factory.mktemp("wp-decoder"), hidden=32, layers=1, heads=2, seed=0)


def _plain_pair(words: list[str], targets: list[int], rest: str, answer: str) -> TextPair:
    starts = [sum(len(w) + 1 for w in words[:j]) for j in range(len(words))]
    spans = tuple((a, a + len(w), t) for a, w, t in zip(starts, words, targets, strict=True))
    return TextPair(" ".join(words) + " " + rest, answer, spans)


@pytest.mark.parametrize("which", ["bpe_decoder", "wordpiece_decoder"])
def test_plain_positions_point_at_each_plain_words_first_sub_token(which, request):
    tok = load_decoder_tokenizer(request.getfixturevalue(which))
    words = ["windowriver", "apple", "zzq", "green", "stonecloud"]  # some split into several sub-tokens
    pair = _plain_pair(words, [4, 0, 2, 1, 3], "the apple near a house\nQuestion?", "river")
    short = TextPair("the stone", "green")
    batch = encode_pairs(tok, [pair, short], max_length=64)
    positions, targets, ids = batch["plain_positions"], batch["plain_targets"], batch["input_ids"]
    assert positions.shape == targets.shape == (2, 5)
    assert targets[0].tolist() == [4, 0, 2, 1, 3] and (targets[1] == -100).all()  # no plain words: no targets
    prefix_ids = tok(" ".join(words), add_special_tokens=False).input_ids
    assert ids[0, : len(prefix_ids)].tolist() == prefix_ids  # the plain words lead the prompt
    for j, word in enumerate(words):
        at = int(positions[0, j])
        first = tok.decode([int(ids[0, at])]).strip()
        assert first and word.startswith(first)  # the word's first piece ...
        assert tok.decode(ids[0, :at].tolist()).strip() == " ".join(words[:j])  # ... and none of it before
    assert len(prefix_ids) > len(words)  # some plain words take several sub-tokens
    supervised = batch["labels"][0][batch["labels"][0] != -100].tolist()
    assert supervised[:-1] == tok(" river", add_special_tokens=False).input_ids  # the answer, as without plain words


def test_a_long_prompt_keeps_its_plain_words_and_loses_what_follows_them(bpe_decoder):
    tok = load_decoder_tokenizer(bpe_decoder)
    words = ["apple", "river", "stone"]
    rest = "the green table near a bright cloud house " * 6 + "\nQuestion?"
    pair = _plain_pair(words, [0, 1, 2], rest, "music")
    full = encode_pairs(tok, [pair], max_length=512)
    cut = encode_pairs(tok, [pair], max_length=24)
    assert cut["input_ids"].shape[1] == 24
    assert cut["plain_positions"].tolist() == full["plain_positions"].tolist()  # the plain words stay where they were
    n_plain = len(tok(" ".join(words), add_special_tokens=False).input_ids)
    assert cut["input_ids"][0, :n_plain].tolist() == full["input_ids"][0, :n_plain].tolist()
    n_full = int(full["attention_mask"][0].sum())
    assert cut["input_ids"][0, -8:].tolist() == full["input_ids"][0, n_full - 8 : n_full].tolist()  # the end stays
    message = f"the 3 plain words take {n_plain} tokens: max_length {n_plain + 1} leaves no room"
    with pytest.raises(ValueError, match=message):
        encode_pairs(tok, [pair], max_length=n_plain + 1)
    with pytest.raises(ValueError, match="TextPair.plain"):
        TextPair("apple river", "x", ((0, 5, 0), (3, 9, 1)))  # overlapping spans


def _plain_pairs(n: int) -> list[TextPair]:
    """Pairs whose plain words are ``WORDS`` shuffled per pair, each word's target its index in ``WORDS``."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        order = torch.randperm(len(WORDS), generator=gen)[:4].tolist()
        out.append(_plain_pair([WORDS[k] for k in order], order, f"the {WORDS[i % 10]} house", WORDS[(i + 3) % 10]))
    return out


def test_the_reconstruction_loss_trains_the_head_and_the_run_saves_no_head(bpe_decoder, tmp_path):
    from textfree.heads.reconstruction import ReconstructionHead
    from textfree.lm import text_tuning

    pairs = _plain_pairs(16)
    made: list[ReconstructionHead] = []
    before: list[torch.Tensor] = []

    def head(width: int) -> ReconstructionHead:
        made.append(ReconstructionHead(width, len(WORDS), 8))
        before.extend(p.detach().clone() for p in made[-1].parameters())
        return made[-1]

    cfg = TextTuningConfig(out=str(tmp_path / "rec"), decoder=str(bpe_decoder), epochs=30, batch_size=8, lr=2e-2,
                           warmup_steps=2, progress=False, save_every=1000, log_every=4)  # fmt: skip
    fitted = tune_text_decoder(cfg, pairs, head=head)
    first, final = fitted["first_rec_loss"], fitted["final_rec_loss"]
    assert torch.isfinite(torch.tensor([first, final])).all()
    assert first == pytest.approx(torch.log(torch.tensor(float(len(WORDS)))).item(), abs=0.7)  # chance at the start
    assert final < 0.5 * first  # the head learns which plain word sits where
    assert any(not torch.equal(a, b) for a, b in zip(before, made[0].parameters(), strict=True))  # the head trained
    # the loss is the answer's LM loss + the reconstruction loss summed over the plain words (eq. 6)
    tok = fitted["tokenizer"]
    batch = encode_pairs(tok, pairs[:4], max_length=cfg.max_length)
    fitted["model"].eval()
    wrapped = text_tuning._Reconstructing(fitted["model"], made[0], 0.5)
    loss, rec = wrapped(batch)
    out = fitted["model"](**{k: v for k, v in batch.items() if not k.startswith("plain_")}, output_hidden_states=True)
    expected_rec = made[0].loss(out.hidden_states[-1], batch["plain_positions"], batch["plain_targets"])
    assert rec.item() == pytest.approx(expected_rec.item(), rel=1e-5)
    assert loss.item() == pytest.approx(out.loss.item() + 0.5 * 4 * expected_rec.item(), rel=1e-5)
    made[0].zero_grad()
    rec.backward()
    assert made[0].up.weight.grad.abs().sum() > 0 and made[0].down.weight.grad.abs().sum() > 0
    # the run: the adapter alone, the same tensors as a run without the head, and it loads back
    plain = TextTuningConfig(out=str(tmp_path / "plain"), decoder=str(bpe_decoder), epochs=1, batch_size=8,
                             progress=False)  # fmt: skip
    tune_text_decoder(plain, pairs)
    from safetensors.torch import load_file

    saved = load_file(tmp_path / "rec" / "adapter" / "adapter_model.safetensors")
    reference = load_file(tmp_path / "plain" / "adapter" / "adapter_model.safetensors")
    assert set(saved) == set(reference) and not any("head" in k or ".up." in k or ".down." in k for k in saved)
    assert all(t.shape[0] != len(WORDS) for t in saved.values())
    assert sorted(p.name for p in (tmp_path / "rec").iterdir() if p.is_dir()) == sorted(
        p.name for p in (tmp_path / "plain").iterdir() if p.is_dir()
    )
    with pytest.raises(ValueError, match="needs plain words on every training pair"):
        tune_text_decoder(plain, [*pairs, TextPair("no plain words", "x")], head=head)
    model, tok = load_tuned_decoder(tmp_path / "rec")
    prompts = [p.prompt for p in pairs[:3]]
    from textfree.lm.text_tuning import answer_prompts

    assert answer_prompts(model, tok, prompts, max_new_tokens=2) == answer_prompts(
        fitted["model"], fitted["tokenizer"], prompts, max_new_tokens=2
    )


def _record(i: int, context: str, answer: str) -> MCQARecord:
    options = ["anemia", "gerd", "sarcoidosis", "panic attack"]
    return MCQARecord(f"r{i}", context, "What is the likely diagnosis?", options, options.index(answer))


def test_the_client_prepends_plain_tokens_privatized_in_the_same_call(tiny_encoder_dir, bpe_decoder, tmp_path,
                                                                     monkeypatch):  # fmt: skip
    from textfree.rapt import generation
    from textfree.rapt.generation import RaptQAConfig
    from textfree.substitution.t2t import TextToText

    calls: list[list[str]] = []
    real = TextToText.privatize_detailed

    def recording(self, texts, **kw):
        calls.append(list(texts))
        return real(self, texts, **kw)

    monkeypatch.setattr(TextToText, "privatize_detailed", recording)
    cfg = RaptQAConfig(out=str(tmp_path / "r"), decoder=str(bpe_decoder), encoder=str(tiny_encoder_dir), eta=1e-3,
                       pos=None, plain_length=6, reconstruction=True)  # fmt: skip
    privatize, mechanism, plain = generation._client(cfg)
    assert plain.length == 6 and set(plain.sequences[0]) <= set(mechanism.table.words)
    records = [_record(0, "A 30-year-old woman is tired and pale.", "anemia"),
               _record(1, "A 50-year-old man has heartburn.", "gerd")]  # fmt: skip
    release = privatize(private_parts(records), 0)
    clear = " ".join(plain.sequences[0])
    assert calls == [private_parts(records) + [clear, clear]]  # one call: the private parts, one plain copy each
    assert len(release.plain) == 2 and all(len(w) == 6 for w in release.plain)
    assert release.plain[0] != release.plain[1]  # each record's copy has its own noise
    changed = sum(a != b for w in release.plain for a, b in zip(w, plain.sequences[0], strict=True))
    assert changed >= 9  # eta 1e-3: (nearly) every plain word replaced
    alone = real(mechanism, private_parts(records), generator=torch.Generator().manual_seed(1))
    assert release.words == list(alone.substituted_per_text)  # the private words only (the plain ones are public)
    pairs = generation._pairs(records, "mcqa", release, plain)
    for pair, words, text, record in zip(pairs, release.plain, release.texts, records, strict=True):
        assert pair.prompt == " ".join(words) + " " + qa_prompt(text, mcqa_prompt(record).public)
        assert [pair.prompt[a:b] for a, b, _ in pair.plain] == list(words)
        assert [t for _, _, t in pair.plain] == plain.targets(0)  # the ORIGINAL plain words' indices in V_r
        assert [plain.vocabulary[t] for _, _, t in pair.plain] == list(plain.sequences[0])
    clear_cfg = RaptQAConfig(out=str(tmp_path / "c"), decoder=str(bpe_decoder), encoder=str(tiny_encoder_dir),
                             eta=None, pos=None, plain_length=6)  # fmt: skip
    privatize, _, plain = generation._client(clear_cfg)
    assert privatize(["a b"], 0).plain == [plain.sequences[0]]  # clear text: the plain tokens as they are


def test_rapt_qa_with_reconstruction_end_to_end(tiny_encoder_dir, bpe_decoder, tmp_path, monkeypatch):
    """The cell kind, plain tokens and the head on: every prompt at the server's door (training and scoring) starts
    with m privatized plain words; the summary records the head's loss; the run holds the adapter and the public plain
    tokens, no head."""
    from textfree.data import ppft_split
    from textfree.experiments import Cell, run_cell
    from textfree.rapt import generation
    from textfree.results.files import load_results
    from textfree.substitution.plain import PlainTokens

    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))
    seen: dict[str, list[str]] = {"train": [], "test": []}
    tune, answer = generation.tune_text_decoder, generation.answer_prompts

    def tuning(cfg, pairs, **kw):
        seen["train"].extend(p.prompt for p in pairs)
        assert all(len(p.plain) == 5 for p in pairs) and kw["head"] is not None
        return tune(cfg, pairs, **kw)

    monkeypatch.setattr(generation, "tune_text_decoder", tuning)
    monkeypatch.setattr(generation, "answer_prompts", lambda model, tok, prompts, **kw: seen["test"].extend(prompts)
                        or answer(model, tok, prompts, **kw))  # fmt: skip
    cell = {"name": "qa_rec", "kind": "rapt_qa", "encoder": str(tiny_encoder_dir),
            "params": {"decoder": str(bpe_decoder), "eta": 1e-3, "pos": None, "plain_length": 5,
                       "reconstruction": True, "rec_hidden": 8, "epochs": 1, "batch_size": 8, "eval_limit": 2,
                       "max_new_tokens": 2, "out": str(tmp_path / "runs")},
            "seeds": [0]}  # fmt: skip
    path = run_cell(Cell.from_dict(cell), tmp_path, progress=False)
    run = tmp_path / "runs" / "qa_rec" / "point-s0"
    summary = json.loads((run / "summary.json").read_text())
    plain = PlainTokens.load(run)
    assert summary["plain_length"] == 5 and summary["reconstruction"] is True and summary["system"] == "rapt"
    assert summary["rec_vocab_size"] == len(plain.vocabulary) and 0 < summary["final_rec_loss"] < 1e3
    train, heldout = ppft_split("pri-ddx")["train"], ppft_split("pri-ddx")["heldout"][:2]
    assert summary["scores"]["heldout"]["mcqa"]["n"] == len(heldout) and summary["final_loss"] > 0
    assert len(seen["train"]) == 2 * len(train) and len(seen["test"]) == 2 * len(heldout)
    table = set(generation._client(generation.RaptQAConfig(out="x", decoder="x", encoder=str(tiny_encoder_dir),
                                                           eta=1.0, pos=None))[1].table.words)  # fmt: skip
    for prompt in seen["train"] + seen["test"]:
        sent = prompt.split(" ")[:5]
        assert set(sent) <= table and sent != list(plain.sequences[0])  # m privatized plain words lead every prompt
    assert len({p.split("\n")[0] for p in seen["test"]}) == len(heldout)  # one release per record, for both prompts
    assert summary["plain_sent"] == seen["test"][0].split(" ")[:5]
    assert not (run / "adapter" / "reconstruction_head.safetensors").exists()
    assert {p.name for p in run.iterdir() if p.is_dir()} <= {"adapter", "tokenizer", "checkpoints"}
    row = {k: v["mean"] for k, v in load_results(path)["results"][0]["metrics"].items()}
    assert row["n_test"] == len(heldout)


@pytest.mark.parametrize(
    ("settings", "field", "message"),
    [
        ({"reconstruction": True}, "reconstruction", "reconstruction needs plain_length > 0"),
        ({"plain_length": -1}, "plain_length", "plain_length must be an integer >= 0, got -1"),
        ({"plain_length": 40, "privatizer": "paraphrase", "temperature": 1.0, "eta": None, "pos": None},
         "plain_length", "plain_length must be 0 with privatizer 'paraphrase'"),
        ({"plain_length": 300}, "plain_length", "plain_length 300 leaves no room in max_length 256"),
        ({"plain_length": 4, "rec_hidden": 0}, "rec_hidden", "rec_hidden must be an integer >= 1"),
        ({"plain_length": 4, "rec_vocab_size": 1}, "rec_vocab_size", "rec_vocab_size must be an integer >= 2"),
        ({"plain_length": 4, "reconstruction": "yes"}, "reconstruction", "reconstruction must be true or false"),
    ],
)  # fmt: skip
def test_bad_plain_token_settings_are_one_line_errors_naming_the_field(settings, field, message, wordpiece_decoder):
    from textfree.experiments import Cell, CellError
    from textfree.rapt.generation import RaptQAConfig

    with pytest.raises(ValueError, match=message) as info:
        RaptQAConfig(out="unused", decoder=str(wordpiece_decoder), **settings)
    assert "\n" not in str(info.value)
    cell = {"name": "qa", "kind": "rapt_qa", "params": {"decoder": str(wordpiece_decoder), "eta": 1.0} | settings}
    with pytest.raises(CellError, match=message) as info:
        Cell.from_dict(cell)
    assert info.value.field == f"params.{field}"


def test_the_rapt_generation_cells_load():
    from textfree.experiments import load_cell

    cells = Path(__file__).resolve().parents[1] / "examples" / "cells" / "rapt"
    rec, no_rec = load_cell(cells / "ddx_qa_rapt.yaml"), load_cell(cells / "ddx_qa_plain_no_rec.yaml")
    assert rec.kind == no_rec.kind == "rapt_qa"
    assert rec.params["plain_length"] == no_rec.params["plain_length"] == 40
    assert rec.params["reconstruction"] is True and no_rec.params["reconstruction"] is False
    assert rec.grid == {"params.eta": [0.698]} and no_rec.params["eta"] == 0.698


def test_the_summary_names_whose_client_the_run_is():
    from textfree.rapt.generation import RaptQAConfig, _system

    assert _system(RaptQAConfig(out="x", decoder="d", eta=1.0, pos="all")) == "rapt"
    assert _system(RaptQAConfig(out="x", decoder="d", eta=0.13, pos=None, oov_word="unknown")) == "dchi"
    paraphrase = RaptQAConfig(out="x", decoder="d", privatizer="paraphrase", temperature=1.5, pos=None)
    assert _system(paraphrase) == "paraphrase"
