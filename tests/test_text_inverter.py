"""The learned inverter for text clients (textfree.attacks.text_inverter) and its cell kind's params
(textfree.experiments.kinds.text_inversion)."""

from __future__ import annotations

import pytest

from textfree.attacks.text_inverter import attribute_scores, generate_batched, inversion_pairs, names_in
from textfree.data import MCQARecord


def _record(age: int, sex: str, symptoms: list[str], antecedents: list[str]) -> MCQARecord:
    attrs = {"age": age, "sex": sex, "symptoms": symptoms, "antecedents": antecedents}
    return MCQARecord(f"r{age}", "ctx", "What?", ["a", "b"], 0, attrs)


def test_attribute_scores_read_names_age_and_sex_from_the_text():
    records = [_record(31, "M", ["cough", "fever"], ["asthma"]), _record(8, "F", ["rash"], [])]
    texts = ["A 31-year-old male has a history of asthma. He presents the symptoms of fever, coughing.",
             "A 9-year-old girl presents the symptoms of rash."]  # fmt: skip
    names = ["cough", "fever", "asthma", "rash", "coughing"]
    scores = attribute_scores(texts, records, names)
    assert scores["recall_symptoms"] == pytest.approx(2 / 3)  # "coughing" is not "cough": whole words only
    assert scores["recall_antecedents"] == 1.0
    assert scores["age_accuracy"] == 0.5 and scores["sex_accuracy"] == 1.0
    assert names_in("Fever, and COUGH.", names) == {"fever", "cough"}
    with pytest.raises(ValueError, match="1 texts for 2 records"):
        attribute_scores(texts[:1], records, names)


def test_inversion_pairs_and_batched_generation_match_one_by_one(tmp_path):
    from textfree.lm.generate import generate_text
    from textfree.lm.loading import load_decoder, make_tiny_decoder_dir

    pairs = inversion_pairs(["a paraphrase", "  "], ["the original", "another original"])
    assert pairs[0].prompt == "a paraphrase\nThe original text:" and pairs[1].prompt.startswith("(empty)")
    assert pairs[0].answer == "the original"
    with pytest.raises(ValueError, match="1 releases for 2 private texts"):
        inversion_pairs(["x"], ["a", "b"])
    model, tok = load_decoder(make_tiny_decoder_dir(tmp_path, hidden=32, layers=2, heads=2, seed=0))
    prompts = ["short", "a rather longer prompt than the first", "mid length one"]
    batched = generate_batched(model, tok, prompts, max_new_tokens=5, batch_size=2)
    single = [generate_text(model, tok, [p], max_new_tokens=5, add_special_tokens=False)[0].strip() for p in prompts]
    assert batched == single


def test_text_inversion_params_fail_with_the_param_named():
    from textfree.experiments.kinds.text_inversion import _check

    base = {"decoder": "d", "temperature": 1.49}
    assert _check(base) is None
    assert _check({"temperature": 1.0})[0] == "decoder"
    assert _check(base | {"privatizer": "t2t"})[0] == "privatizer"
    assert _check(base | {"temperature": 0})[0] == "temperature"
    assert _check(base | {"epochs": 0})[0] == "epochs"
    assert _check(base | {"bogus": 1})[1].startswith("unknown param 'bogus'")


def test_generate_ids_samples_each_prompt_from_its_own_seed_whatever_the_batch(tmp_path):
    from textfree.lm.generate import generate_ids
    from textfree.lm.loading import load_decoder, make_tiny_decoder_dir

    model, tok = load_decoder(make_tiny_decoder_dir(tmp_path, hidden=32, layers=2, heads=2, seed=0))
    ids = [tok(p, add_special_tokens=False).input_ids for p in ("one", "two words here", "three")]
    caps = [6, 3, 5]
    alone = generate_ids(model, tok, ids, max_new_tokens=caps, batch_size=1, temperature=1.0, seeds=[1, 2, 3])
    together = generate_ids(model, tok, ids, max_new_tokens=caps, batch_size=3, temperature=1.0, seeds=[1, 2, 3])
    assert alone == together and [len(r) <= c for r, c in zip(alone, caps)] == [True] * 3
    assert generate_ids(model, tok, ids, max_new_tokens=caps, temperature=1.0, seeds=[9, 2, 3])[0] != alone[0]
    with pytest.raises(ValueError, match="3 prompts need as many max_new_tokens"):
        generate_ids(model, tok, ids, max_new_tokens=[1])
