"""Attribute inference: specs, references by hand, scoring by hand, and attackers that must find a planted leak."""

import math

import pytest
import torch

from textfree.attacks import ThreatModel, ThreatModelError
from textfree.attacks.attributes import (
    age_bucket,
    attribute_inference_attack,
    attribute_metric_names,
    build_specs,
    label_predictions,
    prior_predictions,
    score_attributes,
)
from textfree.heads.classifier import (
    AttributeAttackConfig,
    AttributeClassifier,
    AttributeSpec,
    predict_attributes,
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
        "0-17",
        "0-17",
        "18-29",
        "45-59",
        "45-59",
        "60-74",
        "60-74",
        "75+",
        "75+",
    ]
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
    assert got == [
        {"sex": "F", "symptoms": ["rash"]},
        {"sex": "M", "symptoms": ["cough"]},
        {"sex": "M", "symptoms": ["cough"]},
    ]
    with pytest.raises(ValueError, match="3 training labels for 4"):
        label_predictions(specs, TRAIN, LABELS[:3], ["flu"])


def test_length_reference_is_the_label_rule_over_unit_counts():
    from textfree.attacks.attributes import length_predictions

    specs = build_specs(TRAIN, KINDS)
    # the 4 training rows release 2, 2, 2 and 3 units: the count plays the label's part
    train_mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    test_mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    got = length_predictions(specs, TRAIN, train_mask, test_mask)
    # count 3: row 3 alone (M; cough, rash); count 2: rows 0-2 (M, M, F -> M; cough in 2 of 3); count 1 unseen -> prior
    assert got == [
        {"sex": "M", "symptoms": ["cough", "rash"]},
        {"sex": "M", "symptoms": ["cough"]},
        {"sex": "M", "symptoms": ["cough"]},
    ]


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
    targets = [
        {"sex": "MF"[s], "symptoms": ["cough"] * int(c) + ["pain"]} for s, c in zip(sex.tolist(), cough.tolist())
    ]
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
    control = train_attribute_attacker(
        x, m, [y[i] for i in perm], specs, config, noise=None, generator=torch.Generator().manual_seed(1)
    )
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
        pred = attribute_inference_attack(
            (x, m), y, (observed, mt), specs, config, threat=grant, noise=fn, generator=torch.Generator().manual_seed(5)
        )
        scores[name] = score_attributes(specs, pred, yt)["sex_accuracy"]
    assert scores["aware"] > 0.8, scores


def test_grant_is_checked():
    x, m, y = _planted(8, torch.Generator().manual_seed(0))
    specs = build_specs(y, KINDS)
    config = AttributeAttackConfig(epochs=1)
    with pytest.raises(ThreatModelError, match="encoder_queries"):
        attribute_inference_attack(
            (x, m),
            y,
            (x, m),
            specs,
            config,
            threat=ThreatModel(training_text="in_domain"),
            noise=None,
            generator=torch.Generator(),
        )
    with pytest.raises(ThreatModelError, match="knows_parameters"):
        attribute_inference_attack(
            (x, m),
            y,
            (x, m),
            specs,
            config,
            threat=ThreatModel(encoder_queries=True, training_text="in_domain"),
            noise=lambda v, g: v,
            generator=torch.Generator(),
        )


def test_config_and_input_validation():
    for bad in ({"pooling": "max"}, {"epochs": 0}, {"lr": 0}, {"dropout": 1.0}, {"hidden": True}, {"lr": math.inf}):
        with pytest.raises(ValueError, match="AttributeAttackConfig"):
            AttributeAttackConfig(**bad)
    with pytest.raises(ValueError, match="AttributeAttackConfig.standardize must be true or false, got 1"):
        AttributeAttackConfig(standardize=1)
    with pytest.raises(ValueError, match=r"AttributeAttackConfig.hidden must be an integer >= 0 \(0: linear\), got -1"):
        AttributeAttackConfig(hidden=-1)
    x, m, y = _planted(8, torch.Generator().manual_seed(0))
    specs = build_specs(y, KINDS)
    with pytest.raises(ValueError, match="8 payload rows but 7 targets"):
        train_attribute_attacker(
            x, m, y[:7], specs, AttributeAttackConfig(epochs=1), noise=None, generator=torch.Generator()
        )
    empty = m.clone()
    empty[0] = False
    with pytest.raises(ValueError, match="at least one valid slot"):
        train_attribute_attacker(
            x, empty, y, specs, AttributeAttackConfig(epochs=1), noise=None, generator=torch.Generator()
        )


def test_variants_replace_the_clean_slots_and_epochs_cycle_over_them(monkeypatch):
    """Every training batch of epoch e comes from variants[e % 2] (one batch per epoch here), never the clean slots."""
    x, m, y = _planted(8, torch.Generator().manual_seed(0))
    specs = build_specs(y, KINDS)
    seen = []
    forward = AttributeClassifier.forward

    def record(self, slots, mask):
        seen.append(sorted(set(slots[mask].flatten().tolist())))
        return forward(self, slots, mask)

    monkeypatch.setattr(AttributeClassifier, "forward", record)
    first, second = torch.full_like(x, 1.0), torch.full_like(x, 2.0)
    short = m.clone()
    short[:, 2] = False  # a variant may have other slot counts than the clean slots
    train_attribute_attacker(
        x,
        m,
        y,
        specs,
        AttributeAttackConfig(epochs=5, hidden=8, batch_size=8),
        noise=None,
        variants=[(first, m), (second, short)],
        generator=torch.Generator().manual_seed(1),
    )
    assert seen == [[1.0], [2.0], [1.0], [2.0], [1.0]]


def test_callable_variants_make_each_epochs_release_when_needed():
    """A callable gives epoch e's release on demand (e = 0, 1, ...), checked like a listed one."""
    x, m, y = _planted(8, torch.Generator().manual_seed(0))
    specs = build_specs(y, KINDS)
    asked = []

    def release(epoch):
        asked.append(epoch)
        return torch.full_like(x, float(epoch)), m

    train_attribute_attacker(
        x,
        m,
        y,
        specs,
        AttributeAttackConfig(epochs=4, hidden=8),
        noise=None,
        variants=release,
        generator=torch.Generator().manual_seed(1),
    )
    assert asked == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="width 5, the training slots 16"):
        train_attribute_attacker(
            x,
            m,
            y,
            specs,
            AttributeAttackConfig(epochs=1),
            noise=None,
            generator=torch.Generator(),
            variants=lambda e: (torch.zeros(8, 3, 5), m),
        )


def test_aware_training_learns_from_the_variants():
    """The clean slots carry nothing (random unit vectors); two noisy releases of them carry the planted sex: trained
    on the variants the attacker reads held-out releases, trained on the clean slots it cannot (fixed seeds)."""
    gen = torch.Generator().manual_seed(6)
    x, m, y = _planted(300, gen)
    xt, mt, yt = _planted(200, gen)
    clean = l2_normalize(torch.randn(x.shape, generator=gen))
    variants = [(l2_normalize(x + 0.2 * torch.randn(x.shape, generator=gen)), m) for _ in range(2)]
    specs = build_specs(y, KINDS)
    config = AttributeAttackConfig(pooling="slots", epochs=20, hidden=32)
    grant = ThreatModel(training_text="in_domain", knows_mechanism=True, knows_parameters=True)
    scores = {}
    for name, v in (("unaware", None), ("aware", variants)):
        pred = attribute_inference_attack(
            (clean, m),
            y,
            (xt, mt),
            specs,
            config,
            threat=grant,
            noise=None,
            variants=v,
            release="text",
            generator=torch.Generator().manual_seed(7),
        )
        scores[name] = score_attributes(specs, pred, yt)["sex_accuracy"]
    assert scores["aware"] > 0.9 and scores["unaware"] < 0.65, scores


def test_each_release_needs_its_own_grant():
    x, m, y = _planted(8, torch.Generator().manual_seed(0))
    specs = build_specs(y, KINDS)
    config = AttributeAttackConfig(epochs=1)
    text_only = ThreatModel(training_text="in_domain")

    def attack(threat, **kwargs):
        return attribute_inference_attack(
            (x, m), y, (x, m), specs, config, threat=threat, generator=torch.Generator(), **kwargs
        )

    assert len(attack(text_only, noise=None, release="text")) == 8  # the attacker encodes text itself
    with pytest.raises(ThreatModelError, match="needs embedding_table"):
        attack(text_only, noise=None, release="tokens")
    attack(ThreatModel(embedding_table=True, training_text="in_domain"), noise=None, release="tokens")
    with pytest.raises(ThreatModelError, match="needs knows_mechanism, knows_parameters"):
        attack(text_only, noise=None, release="text", variants=[(x, m)])
    with pytest.raises(ValueError, match="release must be one of"):
        attack(text_only, noise=None, release="words")


def test_variants_are_checked():
    x, m, y = _planted(8, torch.Generator().manual_seed(0))
    specs = build_specs(y, KINDS)
    config = AttributeAttackConfig(epochs=1)

    def train(**kwargs):
        return train_attribute_attacker(x, m, y, specs, config, generator=torch.Generator(), **kwargs)

    with pytest.raises(ValueError, match="not both"):
        train(noise=lambda v, g: v, variants=[(x, m)])
    with pytest.raises(ValueError, match="at least one"):
        train(noise=None, variants=[])
    with pytest.raises(ValueError, match="got one pair"):
        train(noise=None, variants=(x, m))
    with pytest.raises(ValueError, match="7 payload rows but 8 targets"):
        train(noise=None, variants=[(x, m), (x[:7], m[:7])])
    with pytest.raises(ValueError, match="variant 0 has width 4, the training slots 16"):
        train(noise=None, variants=[(x[..., :4], m)])


def test_standardize_reads_the_pooled_vector_standardised_by_hand():
    """standardize: the trunk reads (v - mean(v)) / std(v) of the pooled vector v (biased variance), then the count;
    so scaling every slot by c > 0 leaves the logits unchanged, which the unstandardised classifier does not."""
    from textfree.heads.classifier import AttributeClassifier, AttributeSpec

    spec = AttributeSpec("y", "categorical", ("a", "b"))
    torch.manual_seed(0)
    model = AttributeClassifier(
        3, [spec], AttributeAttackConfig(count=True, standardize=True, hidden=4), max_count=2
    ).eval()
    x = torch.tensor([[[0.0, 2.0, 4.0], [2.0, 2.0, 2.0]]])  # mean slot [1, 2, 3]: mean 2, variance 2/3
    m = torch.tensor([[True, True]])
    r = 1.5**0.5 / (1 + 1.5e-5) ** 0.5  # 1 / sqrt(2/3 + 1e-5), LayerNorm's eps
    torch.testing.assert_close(model.features(x, m), torch.tensor([[-r, 0.0, r, 0.0, 1.0]]))
    torch.testing.assert_close(model(3.0 * x, m)["y"], model(x, m)["y"])
    torch.manual_seed(0)
    plain = AttributeClassifier(3, [spec], AttributeAttackConfig(count=True, hidden=4), max_count=2).eval()
    torch.testing.assert_close(plain.features(x, m), torch.tensor([[1.0, 2.0, 3.0, 0.0, 1.0]]))
    assert not torch.allclose(plain(3.0 * x, m)["y"], plain(x, m)["y"])


def test_hidden_zero_is_a_linear_reader_of_the_features_by_hand():
    """hidden 0: no trunk; each head is one linear map of [pooled (standardised if asked), count one-hot]."""
    from textfree.heads.classifier import AttributeClassifier, AttributeSpec

    spec = AttributeSpec("y", "categorical", ("a", "b"))
    model = AttributeClassifier(3, [spec], AttributeAttackConfig(count=True, hidden=0), max_count=2).eval()
    assert model.hidden == 0 and not list(model.trunk.parameters()) and model.heads["y"].in_features == 5
    with torch.no_grad():
        model.heads["y"].weight.copy_(torch.tensor([[1.0, 0.0, 0.0, 10.0, 20.0], [0.0, 1.0, -1.0, 0.0, 0.0]]))
        model.heads["y"].bias.copy_(torch.tensor([0.5, -0.5]))
    x = torch.tensor([[[0.0, 2.0, 4.0], [2.0, 2.0, 2.0]]])  # mean slot [1, 2, 3], 2 slots: one-hot [0, 1]
    m = torch.tensor([[True, True]])
    torch.testing.assert_close(model(x, m)["y"], torch.tensor([[1.0 + 20.0 + 0.5, 2.0 - 3.0 - 0.5]]))
    # the same weights read the count alone when one slot is real: one-hot [1, 0], mean slot [0, 2, 4]
    torch.testing.assert_close(
        model(x, torch.tensor([[True, False]]))["y"], torch.tensor([[0.0 + 10.0 + 0.5, 2.0 - 4.0 - 0.5]])
    )


def test_a_linear_reader_finds_a_planted_leak():
    gen = torch.Generator().manual_seed(0)
    x, m, y = _planted(300, gen)
    xt, mt, yt = _planted(200, gen)
    specs = build_specs(y, KINDS)
    config = AttributeAttackConfig(pooling="mean", epochs=40, hidden=0, standardize=True)
    model = train_attribute_attacker(x, m, y, specs, config, noise=None, generator=torch.Generator().manual_seed(1))
    s = score_attributes(specs, predict_attributes(model, xt, mt), yt)
    assert s["sex_accuracy"] > 0.95 and s["symptoms_f1"] > 0.9, s
