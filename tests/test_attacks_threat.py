"""Threat models as data: validation, round trips, and attacks refusing what the grant does not allow."""

import pytest
import torch

from textfree.attacks import (
    BeamCleanConfig,
    BigramPrior,
    ThreatModel,
    ThreatModelError,
    UniformPrior,
    available_attacks,
    beamclean_attack,
    check_grant,
    get_attack,
    missing_capabilities,
    nearest_neighbour_attack,
    register_attack,
    resolve_noise_knowledge,
    run_attack,
)
from textfree.mechanisms import Gaussian

PAYLOAD_ONLY = ThreatModel()
WHITE_BOX = ThreatModel(embedding_table=True)
ORACLE = ThreatModel(embedding_table=True, training_text="public", knows_mechanism=True, knows_parameters=True)


@pytest.fixture(scope="module")
def tiny():
    g = torch.Generator().manual_seed(0)
    table = torch.randn(20, 4, generator=g)
    ids = torch.randint(20, (6,), generator=g)
    return table, ids, table[ids] + 0.01 * torch.randn(6, 4, generator=g)


def test_round_trip_and_defaults():
    tm = ThreatModel(
        embedding_table=True,
        encoder_queries=True,
        training_text="in_domain",
        knows_mechanism=True,
        knows_parameters=True,
    )
    assert ThreatModel.from_dict(tm.to_dict()) == tm
    assert ThreatModel.from_dict({}) == PAYLOAD_ONLY
    assert PAYLOAD_ONLY.to_dict() == {
        "payload_vectors": True,
        "embedding_table": False,
        "encoder_queries": False,
        "training_text": None,
        "knows_mechanism": False,
        "knows_parameters": False,
    }


@pytest.mark.parametrize(
    "kwargs, names",
    [
        ({"training_text": "private"}, "'private'"),
        ({"embedding_table": 1}, "embedding_table"),
        ({"payload_vectors": False}, "payload_vectors"),
        ({"knows_parameters": True}, "knows_parameters"),
    ],
)
def test_validation_names_the_bad_value(kwargs, names):
    with pytest.raises(ThreatModelError, match=names):
        ThreatModel(**kwargs)
    assert issubclass(ThreatModelError, ValueError)


def test_from_dict_rejects_unknown_fields():
    with pytest.raises(ThreatModelError, match="knows_seed"):
        ThreatModel.from_dict({"knows_seed": True})
    with pytest.raises(ThreatModelError, match="mapping"):
        ThreatModel.from_dict(["embedding_table"])


def test_check_grant_names_every_missing_capability():
    needs = ThreatModel(embedding_table=True, training_text="in_domain", knows_mechanism=True, knows_parameters=True)
    with pytest.raises(ThreatModelError) as err:
        check_grant("probe", needs, ThreatModel(training_text="public"))
    msg = str(err.value)
    for name in ("'probe'", "embedding_table", "training_text='in_domain'", "knows_mechanism", "knows_parameters"):
        assert name in msg
    assert "encoder_queries" not in msg.split("which")[0]
    check_grant("probe", needs, needs)  # a grant covers itself


def test_training_text_order_and_union():
    assert ThreatModel(training_text="in_domain").grants(ThreatModel(training_text="public"))
    assert not ThreatModel(training_text="public").grants(ThreatModel(training_text="in_domain"))
    assert missing_capabilities(ThreatModel(training_text="public"), PAYLOAD_ONLY) == [
        "training_text='public' (granted: None)"
    ]
    u = ThreatModel(embedding_table=True, training_text="public").union(
        ThreatModel(training_text="in_domain", knows_mechanism=True)
    )
    assert u == ThreatModel(embedding_table=True, training_text="in_domain", knows_mechanism=True)


def test_registry():
    assert {"nearest_neighbour", "beamclean"} <= set(available_attacks())
    assert get_attack("nearest_neighbour").requires == WHITE_BOX
    with pytest.raises(ValueError, match="unknown attack 'nope'.*nearest_neighbour"):
        get_attack("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_attack("beamclean", requires=WHITE_BOX)(lambda *a, **k: None)


def test_nearest_neighbour_refuses_without_embedding_table(tiny):
    table, ids, y = tiny
    for call in (
        lambda: nearest_neighbour_attack(y, table, threat=PAYLOAD_ONLY),
        lambda: run_attack("nearest_neighbour", y, table, threat=PAYLOAD_ONLY),
    ):
        with pytest.raises(ThreatModelError, match="needs embedding_table"):
            call()
    assert run_attack("nearest_neighbour", y, table, threat=WHITE_BOX, true_ids=ids).recovery == {
        "l2": 1.0,
        "cosine": 1.0,
    }


def test_oracle_noise_refused_without_knows_parameters(tiny):
    table, ids, y = tiny
    prior, mech, cfg = UniformPrior(20), Gaussian(0.01), BeamCleanConfig(beam_width=2, candidates=3)
    knows_family = ThreatModel(embedding_table=True, knows_mechanism=True)
    with pytest.raises(ThreatModelError, match="needs knows_parameters") as err:
        beamclean_attack(y, table, prior, threat=knows_family, noise="oracle", mechanism=mech, config=cfg)
    assert "embedding_table" not in str(err.value).split("which")[0]
    with pytest.raises(ThreatModelError, match="knows_parameters"):
        resolve_noise_knowledge("x", "oracle", knows_family)
    with pytest.raises(ValueError, match="'true'"):
        resolve_noise_knowledge("x", "true", ORACLE)
    # family="auto" reads the family off the mechanism: that needs knows_mechanism.
    with pytest.raises(ThreatModelError, match="needs knows_mechanism"):
        beamclean_attack(y, table, prior, threat=WHITE_BOX, mechanism=mech, config=cfg)
    # An explicit family is the attacker's guess and needs only the table.
    out = beamclean_attack(y, table, prior, threat=WHITE_BOX, family="gaussian", config=cfg, true_ids=ids)
    assert out.noise_knowledge == "estimated" and out.recovery == 1.0
    assert out.requires == WHITE_BOX.to_dict()
    oracle = beamclean_attack(y, table, prior, threat=ORACLE, noise="oracle", mechanism=mech, config=cfg)
    assert oracle.noise_knowledge == "oracle" and oracle.noise[0].scale == 0.01


def test_prior_provenance_is_part_of_the_requirement(tiny):
    table, _, y = tiny
    in_domain = BigramPrior.from_sequences([[1, 2, 3]], 20, training_text="in_domain")
    with pytest.raises(ThreatModelError, match="training_text='in_domain'"):
        beamclean_attack(y, table, in_domain, threat=ORACLE, family="gaussian")
    granted = ThreatModel(embedding_table=True, training_text="in_domain")
    assert (
        beamclean_attack(y, table, in_domain, threat=granted, family="gaussian").requires["training_text"]
        == "in_domain"
    )
