"""The attribute attack's honesty rules: the attacker is chosen on the validation part (never on the evaluated one),
numeric attributes are bucketed on the attacker's part, the validation part is a stable hash of the text, and the
clean-text reader finds a signal the text has and none where it has none."""

import math
import random
from pathlib import Path

import pytest

from textfree.attacks.attributes import (
    AttributeSpec,
    attribute_targets,
    complete_rows,
    numeric_bucket,
    numeric_edges,
    select_attacker,
    selection_metric,
    validation_mask,
)
from textfree.attacks.clean_text import clean_text_reference
from textfree.data import AttributeColumn
from textfree.experiments import Cell, run_cell
from textfree.results.files import load_results

TSV = Path(__file__).parent / "fixtures" / "audit" / "reviews_headerless.tsv"


def test_select_attacker_reads_only_the_scores_it_is_given():
    val = {"a": {"x_accuracy": 0.6}, "b": {"x_accuracy": 0.9}, "c": {"x_accuracy": 0.9}, "d": {"x_accuracy": math.nan}}
    assert select_attacker(val, "x_accuracy") == "b"  # ties go to the first; NaN never wins
    assert selection_metric(AttributeSpec("s", "multilabel", ("a",))) == "s_f1"
    with pytest.raises(ValueError):
        select_attacker({}, "x_accuracy")


def test_numeric_buckets_come_from_the_attackers_part():
    assert numeric_edges(list(range(100))) == (25, 50, 75)
    assert numeric_edges([0, 1, 1, 0, 1]) is None  # a binary age: each value its own class
    assert numeric_bucket(46, (18, 30, 45, 60, 75)) == "45-59" and numeric_bucket(80, (18, 75)) == "75+"
    assert numeric_bucket(0.7, (0.5, 1.5)) == "[0.5, 1.5)" and numeric_bucket(3, (18,)) == "<18"
    columns = [AttributeColumn.parse("age:numeric"), AttributeColumn.parse("tags:multilabel")]
    train = [{"age": a, "tags": ["x"]} for a in range(10, 90)]
    test = [{"age": 200, "tags": []}]  # far outside: the edges never move to fit the evaluated part
    kinds, (t_train, t_test) = attribute_targets(columns, train, test)
    assert kinds == {"age": "categorical", "tags": "multilabel"}
    assert t_test[0]["age"] == numeric_bucket(200, numeric_edges(list(range(10, 90))))
    assert complete_rows([{"a": 1}, {"a": None}, {}], ["a"]) == [0]


def test_validation_mask_is_a_stable_hash_of_the_text():
    texts = [f"text {i}" for i in range(2000)]
    mask = validation_mask(texts, 0.2)
    assert mask == validation_mask(list(texts), 0.2) and 0.17 < sum(mask) / len(mask) < 0.23
    assert validation_mask(["text 5", "text 5"], 0.5)[0] == validation_mask(["text 5", "text 5"], 0.5)[1]
    with pytest.raises(ValueError):
        validation_mask(texts, 1.0)


def test_clean_text_reader_finds_a_signal_the_text_has_and_not_one_it_lacks():
    rng = random.Random(0)
    words = ["apple", "river", "stone", "cloud", "green", "table"]
    rows = []
    for i in range(240):
        g = "F" if i % 2 else "M"
        cue = "she" if g == "F" else "he"
        noise = " ".join(rng.choice(words) for _ in range(6))
        rows.append((f"{cue} wrote {noise}", {"g": g, "coin": rng.choice("HT")}))
    specs = [AttributeSpec("g", "categorical", ("F", "M")), AttributeSpec("coin", "categorical", ("H", "T"))]
    texts, targets = [t for t, _ in rows], [y for _, y in rows]
    scores = clean_text_reference(
        specs, texts[:140], targets[:140], texts[140:180], targets[140:180], texts[180:], targets[180:]
    )
    assert scores["g_accuracy"] == 1.0
    assert 0.3 < scores["coin_accuracy"] < 0.7  # a coin flip has no signal in the text


def test_the_kind_chooses_on_validation_not_on_the_evaluated_part(tiny_encoder_dir, tmp_path, monkeypatch):
    """A rigged pair of attackers: `mean` is perfect on the validation part and wrong on the evaluated one, `slots`
    the reverse. Choosing on the evaluated part would report `slots`' perfect score; the kind reports `mean`'s."""
    from textfree.experiments.kinds import attributes as kind

    seen = {}
    real_data = kind._data

    def data(*args, **kwargs):
        seen["data"] = real_data(*args, **kwargs)
        return seen["data"]

    def rigged(train, targets, observed, specs, config, **_):
        d = seen["data"]
        flip = {"F": "M", "M": "F"}
        good_val = config.pooling == "mean"
        val = [{"gender": t["gender"] if good_val else flip[t["gender"]]} for t in d.validation.targets]
        test = [{"gender": flip[t["gender"]] if good_val else t["gender"]} for t in d.test.targets]
        return val + test

    monkeypatch.setattr(kind, "_data", data)
    monkeypatch.setattr(kind, "attribute_inference_attack", rigged)
    cell = Cell.from_dict(
        {
            "name": "rigged",
            "kind": "attribute_inference",
            "dataset": str(TSV),
            "encoder": str(tiny_encoder_dir),
            "mechanism": {"name": "l2_laplace", "epsilon": 75},
            "params": {
                "columns": {"text": "text", "names": ["rating", "gender", "age", "text"]},
                "attributes": {"gender": "categorical"},
                "training": ["unaware"],
                "epochs": 1,
                "clean_reference": False,
            },
            "attack": {"threat": {"encoder_queries": True, "training_text": "in_domain"}},
            "seeds": [0],
        }
    )
    m = {
        k: v["mean"]
        for k, v in load_results(run_cell(cell, out_dir=tmp_path, progress=False))["results"][0]["metrics"].items()
    }
    assert m["gender_accuracy_mean_unaware_val"] == 1.0 and m["gender_accuracy_slots_unaware"] == 1.0
    assert m["gender_choice"] == 0.0 and m["gender_accuracy_best"] == 0.0 and m["gender_accuracy_best_val"] == 1.0
    assert m["gender_accuracy_clean"] is None  # clean_reference: false -> NaN -> null
