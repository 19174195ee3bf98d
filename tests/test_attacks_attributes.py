"""Attribute inference: specs, references by hand, scoring by hand, and attackers that must find a planted leak."""

import math

import pytest
import torch

from textfree.attacks import ThreatModel, ThreatModelError
from textfree.attacks.attributes import (
    AttributeAttackConfig,
    AttributeSpec,
    age_bucket,
    attribute_inference_attack,
    attribute_metric_names,
    build_specs,
    label_predictions,
    predict_attributes,
    prior_predictions,
    score_attributes,
    train_attribute_attacker,
)
from textfree.mechanisms.transforms import l2_normalize

KINDS = {"sex": "categorical", "symptoms": "multilabel"}
TRAIN = [
    {"sex": "M", "symptoms": ["cough", "fever"]},
    {"sex": "M", "symptoms": ["cough"]},
    {"sex": "F", "symptoms": ["rash"]},
    {"sex": "M", "symptoms": ["cough", "rash"]},
]
LABELS = ["flu", "flu", "measles", "flu"]


def test_age_buckets():
    assert [age_bucket(a) for a in (0, 17, 18, 46, 59, 60, 74, 75, 99)] == [
        "0-17", "0-17", "18-29", "45-59", "45-59", "60-74", "60-74", "75+", "75+"]
    for bad in (-1, float("nan"), "46", True):
        with pytest.raises(ValueError, match="age"):
            age_bucket(bad)


def test_specs_order_by_frequency_then_name():
    sex, symptoms = build_specs(TRAIN, KINDS)
    assert sex == AttributeSpec("sex", "categorical", ("M", "F"))
    assert symptoms.classes == ("cough", "rash", "fever")  # 3, 2, 1 rows
    with pytest.raises(ValueError, match="multi-label attribute 'symptoms' must be a list of strings"):
        build_specs([{"sex": "M", "symptoms": "cough"}], KINDS)
    with pytest.raises(ValueError, match="has no attribute 'sex'"):
        build_specs([{"symptoms": []}], KINDS)
    with pytest.raises(ValueError, match="kind must be"):
        AttributeSpec("x", "ordinal", ("a",))


def test_references_by_hand():
    specs = build_specs(TRAIN, KINDS)
    # prior: majority sex M; symptoms in more than half of 4 rows: cough (3) only
    assert prior_predictions(specs, TRAIN, 2) == [{"sex": "M", "symptoms": ["cough"]}] * 2
    # label: flu rows (M, M, M; cough 3/3, fever 1/3, rash 1/3) -> M, [cough]; measles -> F, [rash]; unknown -> prior
    got = label_predictions(specs, TRAIN, LABELS, ["measles", "flu", "ebola"])
    assert got == [{"sex": "F", "symptoms": ["rash"]}, {"sex": "M", "symptoms": ["cough"]}, {"sex": "M", "symptoms": ["cough"]}]
    with pytest.raises(ValueError, match="3 training labels for 4"):
        label_predictions(specs, TRAIN, LABELS[:3], ["flu"])


def test_scores_by_hand():
    specs = build_specs(TRAIN, KINDS)
    gold = [{"sex": "M", "symptoms": ["cough", "fever"]}, {"sex": "F", "symptoms": ["rash", "itch"]}]
    pred = [{"sex": "M", "symptoms": ["cough"]}, {"sex": "M", "symptoms": ["rash", "fever"]}]
    s = score_attributes(specs, pred, gold)
    # TP cough, rash = 2; FP fever (row 2) = 1; FN fever (row 1), itch (unseen in training, still a miss) = 2
    assert s["sex_accuracy"] == 0.5
    assert s["symptoms_precision"] == pytest.approx(2 / 3)
    assert s["symptoms_recall"] == pytest.approx(2 / 4)
    assert s["symptoms_f1"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert set(s) == set(attribute_metric_names(KINDS))
    with pytest.raises(ValueError, match="1 predictions for 2"):
        score_attributes(specs, pred[:1], gold)


def _planted(n: int, gen: torch.Generator, d: int = 16, slots: int = 3):
    """Unit slots where slot 1's first coordinate carries the sex and slot 2's second one a symptom."""
    x = torch.randn(n, slots, d, generator=gen) * 0.3
    sex = torch.randint(0, 2, (n,), generator=gen)
    cough = torch.randint(0, 2, (n,), generator=gen)
    x[:, 1, 0] += 2.0 * (2 * sex - 1)
    x[:, 2, 1] += 2.0 * (2 * cough - 1)
    targets = [{"sex": "MF"[s], "symptoms": ["cough"] * int(c) + ["pain"]} for s, c in zip(sex.tolist(), cough.tolist())]
    return l2_normalize(x), torch.ones(n, slots, dtype=torch.bool), targets


@pytest.mark.parametrize("pooling", ["mean", "slots"])
def test_attacker_finds_a_planted_leak_and_a_shuffled_control_does_not(pooling):
    gen = torch.Generator().manual_seed(0)
    x, m, y = _planted(300, gen)
    xt, mt, yt = _planted(200, gen)
    specs = build_specs(y, KINDS)
    config = AttributeAttackConfig(pooling=pooling, epochs=20, hidden=32)
    model = train_attribute_attacker(x, m, y, specs, config, noise=None, generator=torch.Generator().manual_seed(1))
    s = score_attributes(specs, predict_attributes(model, xt, mt), yt)
    assert s["sex_accuracy"] > 0.95 and s["symptoms_f1"] > 0.9
    # control: the same attacker trained on shuffled targets cannot beat chance by much (binomial, n=200)
    perm = torch.randperm(300, generator=gen).tolist()
    control = train_attribute_attacker(x, m, [y[i] for i in perm], specs, config, noise=None, generator=torch.Generator().manual_seed(1))
    assert score_attributes(specs, predict_attributes(control, xt, mt), yt)["sex_accuracy"] < 0.65


def test_noise_aware_training_reads_through_heavy_noise():
    """Noise comparable to the signal: trained on noisy copies of its own payloads, the attacker still reads the sex
    (fixed seeds)."""
    gen = torch.Generator().manual_seed(3)
    x, m, y = _planted(300, gen)
    xt, mt, yt = _planted(200, gen)

    def noise(v, g):
        return l2_normalize(v + 0.5 * torch.randn(v.shape, generator=g, dtype=v.dtype))

    observed = noise(xt, torch.Generator().manual_seed(4))
    specs = build_specs(y, KINDS)
    config = AttributeAttackConfig(pooling="mean", epochs=20, hidden=32)
    grant = ThreatModel(encoder_queries=True, training_text="in_domain", knows_mechanism=True, knows_parameters=True)
    scores = {}
    for name, fn in (("unaware", None), ("aware", noise)):
        pred = attribute_inference_attack((x, m), y, (observed, mt), specs, config, threat=grant, noise=fn,
                                          generator=torch.Generator().manual_seed(5))
        scores[name] = score_attributes(specs, pred, yt)["sex_accuracy"]
    assert scores["aware"] > 0.8, scores


def test_grant_is_checked():
    x, m, y = _planted(8, torch.Generator().manual_seed(0))
    specs = build_specs(y, KINDS)
    config = AttributeAttackConfig(epochs=1)
    with pytest.raises(ThreatModelError, match="encoder_queries"):
        attribute_inference_attack((x, m), y, (x, m), specs, config, threat=ThreatModel(training_text="in_domain"),
                                   noise=None, generator=torch.Generator())
    with pytest.raises(ThreatModelError, match="knows_parameters"):
        attribute_inference_attack((x, m), y, (x, m), specs, config,
                                   threat=ThreatModel(encoder_queries=True, training_text="in_domain"),
                                   noise=lambda v, g: v, generator=torch.Generator())


def test_config_and_input_validation():
    for bad in ({"pooling": "max"}, {"epochs": 0}, {"lr": 0}, {"dropout": 1.0}, {"hidden": True}, {"lr": math.inf}):
        with pytest.raises(ValueError, match="AttributeAttackConfig"):
            AttributeAttackConfig(**bad)
    x, m, y = _planted(8, torch.Generator().manual_seed(0))
    specs = build_specs(y, KINDS)
    with pytest.raises(ValueError, match="8 payload rows but 7 targets"):
        train_attribute_attacker(x, m, y[:7], specs, AttributeAttackConfig(epochs=1), noise=None, generator=torch.Generator())
    empty = m.clone()
    empty[0] = False
    with pytest.raises(ValueError, match="at least one valid slot"):
        train_attribute_attacker(x, empty, y, specs, AttributeAttackConfig(epochs=1), noise=None, generator=torch.Generator())
