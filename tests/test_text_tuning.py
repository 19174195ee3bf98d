"""A decoder fine-tuned on text prompts (textfree.lm.text_tuning, textfree.lm.text_qa) and RAPT's generation on it
(textfree.rapt.generation)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from textfree.data import MCQARecord
from textfree.lm.loading import load_decoder_tokenizer, make_tiny_decoder_dir
from textfree.lm.text_qa import private_parts, qa_pairs, score_answers
from textfree.lm.text_tuning import (
    TextPair,
    TextTuningConfig,
    answer_prompts,
    encode_pairs,
    load_tuned_decoder,
    tune_text_decoder,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "data"


@pytest.fixture(scope="module")
def decoder_dir(tmp_path_factory) -> Path:
    return make_tiny_decoder_dir(tmp_path_factory.mktemp("decoder"), hidden=48, layers=2, heads=2, seed=0)


def _record(i: int, context: str, answer: str) -> MCQARecord:
    options = ["anemia", "gerd", "sarcoidosis", "panic attack"]
    return MCQARecord(f"r{i}", context, "What is the likely diagnosis?", options, options.index(answer))


def test_encode_pairs_supervises_the_answer_only_and_keeps_it_whole(decoder_dir):
    tok = load_decoder_tokenizer(decoder_dir)
    pairs = [TextPair("short prompt", "anemia"), TextPair("a much longer prompt " * 20, "panic attack")]
    batch = encode_pairs(tok, pairs, max_length=24)
    ids, labels, mask = batch["input_ids"], batch["labels"], batch["attention_mask"]
    assert ids.shape[1] == 24  # the long prompt was cut to fit
    for i, pair in enumerate(pairs):
        answer = tok(" " + pair.answer, add_special_tokens=False).input_ids + [tok.eos_token_id]
        supervised = labels[i][labels[i] != -100].tolist()
        assert supervised == answer  # the answer and EOS, nothing of the prompt
        n = int(mask[i].sum())
        assert ids[i, n - len(answer) : n].tolist() == answer and (labels[i, n:] == -100).all()
    long_prompt = tok(pairs[1].prompt, add_special_tokens=False).input_ids
    kept = 24 - len(tok(" panic attack", add_special_tokens=False).input_ids) - 1
    assert ids[1, :kept].tolist() == long_prompt[-kept:]  # the prompt's start is what goes
    with pytest.raises(ValueError, match="max_length 3 is too small"):
        encode_pairs(tok, [TextPair("p", "panic attack")], max_length=3)
    with pytest.raises(ValueError, match="TextPair.answer must be a non-empty string"):
        TextPair("p", " ")


def test_tuned_decoder_learns_the_answers_and_loads_back(decoder_dir, tmp_path):
    pairs = [TextPair("the sky is", "blue"), TextPair("grass is", "green")]
    prompts = [p.prompt for p in pairs]
    full = TextTuningConfig(out=str(tmp_path / "full"), decoder=str(decoder_dir), method="full", epochs=25,
                            batch_size=2, lr=2e-2, warmup_steps=2, progress=False, save_every=1000)  # fmt: skip
    fitted = tune_text_decoder(full, pairs)
    assert fitted["final_loss"] < 0.1 * fitted["first_loss"]
    answers = answer_prompts(fitted["model"], fitted["tokenizer"], prompts, max_new_tokens=3)
    assert answers == ["blue", "green"]
    model, tok = load_tuned_decoder(tmp_path / "full")  # the whole model, from_pretrained
    assert answer_prompts(model, tok, prompts, max_new_tokens=3) == answers
    lora = TextTuningConfig(out=str(tmp_path / "lora"), decoder=str(decoder_dir), epochs=2, batch_size=2, lr=1e-2,
                            progress=False)  # fmt: skip
    fitted = tune_text_decoder(lora, pairs)
    before = answer_prompts(fitted["model"], fitted["tokenizer"], prompts, max_new_tokens=3)
    model, tok = load_tuned_decoder(tmp_path / "lora")  # the base by its name + the saved adapter
    assert answer_prompts(model, tok, prompts, max_new_tokens=3) == before
    assert (tmp_path / "lora" / "adapter" / "adapter_config.json").is_file()
    with pytest.raises(FileNotFoundError, match="not a text-tuning run"):
        load_tuned_decoder(tmp_path)
    with pytest.raises(ValueError, match="no training pairs"):
        tune_text_decoder(TextTuningConfig(out=str(tmp_path / "x"), decoder=str(decoder_dir)), [])


def test_qa_pairs_send_the_private_part_transformed_and_the_public_part_as_it_is():
    records = [_record(0, "A 30-year-old woman is tired and pale.", "anemia"),
               _record(1, "A 50-year-old man has heartburn.", "gerd")]  # fmt: skip
    private = private_parts(records)
    assert private[0] == "A 30-year-old woman is tired and pale. What is the likely diagnosis?"
    sent = ["xx yy", "zz"]
    mcqa, open_ = qa_pairs(records, "mcqa", sent), qa_pairs(records, "open", sent)
    for pairs in (mcqa, open_):
        assert [p.prompt.split("\n")[0] for p in pairs] == sent and [p.answer for p in pairs] == ["anemia", "gerd"]
        assert all("tired" not in p.prompt and "heartburn" not in p.prompt for p in pairs)
    assert "Options:" in mcqa[0].prompt and "sarcoidosis" in mcqa[0].prompt and "Options:" not in open_[0].prompt
    labels = ["anemia", "gerd", "sarcoidosis", "panic attack"]
    scored = score_answers(["Anemia.", "panic attack"], records, "open", labels)
    assert scored["accuracy"] == 0.5 and scored["n"] == 2 and scored["predictions"][0]["correct"] is True
    assert score_answers(["anemia", "gerd and anemia"], records, "mcqa", labels)["accuracy"] == 1.0
    with pytest.raises(ValueError, match="1 private texts for 2 records"):
        qa_pairs(records, "mcqa", ["one"])
    with pytest.raises(ValueError, match="task must be one of"):
        qa_pairs(records, "essay")


def test_rapt_qa_trains_on_privatized_prompts_only(decoder_dir, tiny_encoder_dir, tmp_path, monkeypatch):
    """The decoder sees privatized private parts (eta tiny: nearly every word replaced) and clear public parts."""
    from textfree.data import ppft_split
    from textfree.experiments import Cell, run_cell
    from textfree.rapt import generation
    from textfree.rapt.generation import RaptQAConfig
    from textfree.results.files import load_results

    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))
    seen = []
    original = generation.tune_text_decoder

    def recording(cfg, pairs, **kwargs):
        seen.extend(pairs)
        return original(cfg, pairs, **kwargs)

    monkeypatch.setattr(generation, "tune_text_decoder", recording)
    handwritten = (Path(__file__).parent / "fixtures" / "ppft" / "handwritten_ddx.jsonl").read_text().splitlines()
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(handwritten[:3]) + "\n")
    cell = {"name": "qa_test", "kind": "rapt_qa", "encoder": str(tiny_encoder_dir),
            "params": {"decoder": str(decoder_dir), "eta": 1e-3, "pos": None, "epochs": 1, "batch_size": 4,
                       "eval_limit": 2, "max_new_tokens": 2, "prompts": str(prompts), "out": str(tmp_path / "runs")},
            "seeds": [0]}  # fmt: skip
    path = run_cell(Cell.from_dict(cell), tmp_path, progress=False)
    row = {k: v["mean"] for k, v in load_results(path)["results"][0]["metrics"].items()}
    train = ppft_split("pri-ddx")["train"]
    assert len(seen) == 2 * len(train)  # a 4-option and an open prompt per record, one privatized text for both
    for pair, record in zip(seen, train + train, strict=True):
        original_words = set(private_parts([record])[0].lower().split())
        sent_words = pair.prompt.split("\n")[0].lower().split()
        assert len(original_words.intersection(sent_words)) < len(sent_words) / 2  # the private part was replaced
        assert pair.answer == record.answer
    saved = json.loads((tmp_path / "runs" / "qa_test" / "point-s0" / "summary.json").read_text())
    heldout = ppft_split("pri-ddx")["heldout"]
    assert saved["scores"]["heldout"]["mcqa"]["n"] == min(2, len(heldout)) and set(saved["scores"]) == {
        "heldout",
        "prompts",
    }
    assert saved["scores"]["prompts"]["open"]["n"] == 3 and saved["epsilon_per_word"] > 0
    assert saved["eta"] == 1e-3 and saved["mean_privatized_words"] > 0
    assert row["n_test"] == saved["scores"]["heldout"]["mcqa"]["n"] and row["epsilon_per_word"] > 0
    assert row["prompts_open"] == saved["scores"]["prompts"]["open"]["accuracy"]
    with pytest.raises(ValueError, match="eta must be a positive number or null, got -1"):
        RaptQAConfig(out=str(tmp_path / "bad"), decoder=str(decoder_dir), eta=-1)


def test_rapt_qa_cells_are_validated(decoder_dir):
    from textfree.experiments import Cell, CellError, load_cell

    example = Path(__file__).resolve().parents[1] / "examples" / "cells" / "rapt" / "ddx_qa.yaml"
    assert load_cell(example).kind == "rapt_qa"
    cell = {"name": "qa", "kind": "rapt_qa", "params": {"eta": 1.0}}
    with pytest.raises(CellError, match="params.decoder") as info:
        Cell.from_dict(cell)
    assert info.value.field == "params.decoder"
    cell["params"] |= {"decoder": str(decoder_dir)}
    cell["grid"] = {"params.eta": [1.0, -2]}
    with pytest.raises(CellError, match="eta must be a positive number or null, got -2") as info:
        Cell.from_dict(cell)
    assert info.value.field == "grid.params.eta"
