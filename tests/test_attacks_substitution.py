"""Readers of T2T text: word recovery by hand, the channel inverter on a mechanism with a known channel, the kind."""

from pathlib import Path

import pytest
import torch

from textfree.attacks import ThreatModel, ThreatModelError
from textfree.attacks.substitution import (
    ChannelInverter,
    substitution_channel_attack,
    substitution_identity_attack,
    word_recovery,
)
from textfree.experiments import Cell, CellError, run_cell
from textfree.results.files import load_results

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

GRANT = {"training_text": "in_domain", "knows_mechanism": True, "knows_parameters": True}


def test_word_recovery_by_hand():
    assert word_recovery([["I", "ate", "a", "burger"], ["no"]], [["i", "eat", "a", "burger"], ["yes"]]) == 3 / 5
    with pytest.raises(ValueError, match="2 original words but 1"):
        word_recovery([["a", "b"]], [["a"]])
    with pytest.raises(ValueError, match="no words"):
        word_recovery([[]], [[]])


class _Swap:
    """A fake mechanism with a known channel: 'cough' always comes out as 'cold'; 'fever' as 'cold' 1 time in 4."""

    def privatize_detailed(self, texts, generator):
        out = []
        for t in texts:
            words = []
            for w in t.split():
                if w == "cough":
                    words.append("cold")
                elif w == "fever":
                    words.append("cold" if torch.rand((), generator=generator) < 0.25 else "fever")
                else:
                    words.append(w)
            out.append(words)
        return type("R", (), {"output_words": out})()


def test_channel_inverter_maps_each_output_to_its_most_likely_input():
    train = ["cough and fever", "a cough", "cough now", "fever"]
    inv = ChannelInverter.fit(_Swap(), train, rounds=20, generator=torch.Generator().manual_seed(0))
    # 'cold' comes from cough 3x20 = 60 times and from fever ~0.25 x 40 = 10 times: cough wins
    assert inv.table["cold"] == "cough" and inv.table["fever"] == "fever" and inv.table["and"] == "and"
    assert inv.n_pairs == 20 * 8  # 8 words per round
    assert inv.invert(["Cold", "unseen"]) == ["cough", "unseen"]
    grant = ThreatModel(**GRANT)
    assert substitution_channel_attack([["cold"]], inv, threat=grant) == [["cough"]]
    with pytest.raises(ThreatModelError, match="knows_parameters"):
        substitution_channel_attack(
            [["cold"]], inv, threat=ThreatModel(training_text="in_domain", knows_mechanism=True)
        )
    assert substitution_identity_attack([("a", "b")], threat=ThreatModel()) == [["a", "b"]]
    with pytest.raises(ValueError, match="rounds"):
        ChannelInverter.fit(_Swap(), train, rounds=0, generator=torch.Generator())


@pytest.mark.parametrize(
    "params, field, message",
    [
        ({"eta": 0}, "params.eta", "eta must be"),
        ({"eta": 50, "attacks": ["bert"]}, "params.attacks", "distinct values"),
        ({"eta": 50, "pos": 5}, "params.pos", "pos must be"),
        ({"eta": 50, "pos": "noun,banana"}, "params.pos", "unknown categories"),
        ({"eta": 50, "rounds": 0}, "params.rounds", "integer >= 1"),
    ],
)
def test_cell_validation(params, field, message):
    with pytest.raises(CellError, match=message) as info:
        Cell.from_dict(
            {
                "name": "s",
                "kind": "substitution_inversion",
                "dataset": "pri-ddx",
                "params": params,
                "attack": {"threat": GRANT},
                "seeds": [0],
            }
        )
    assert info.value.field == field


def test_channel_attack_needs_its_grant():
    with pytest.raises(CellError, match="training_text") as info:
        Cell.from_dict(
            {
                "name": "s",
                "kind": "substitution_inversion",
                "dataset": "pri-ddx",
                "params": {"eta": 50},
                "attack": {"threat": {}},
                "seeds": [0],
            }
        )
    assert info.value.field == "attack.threat"
    Cell.from_dict(
        {
            "name": "s",
            "kind": "substitution_inversion",
            "dataset": "pri-ddx",
            "params": {"eta": 50, "attacks": ["identity"]},
            "attack": {"threat": {}},
            "seeds": [0],
        }
    )


@pytest.mark.shared_data
def test_real_run_on_pri_ddx(shared_data, tmp_path):
    """Large eta: nothing is replaced and both readers recover every word; small eta: most words change and the
    channel inverter recovers more than reading the text."""
    cell = Cell.from_dict(
        {
            "name": "s",
            "kind": "substitution_inversion",
            "dataset": "pri-ddx",
            "split": "heldout",
            "limit": 12,
            "params": {"eta": 50, "rounds": 1, "train_limit": 60},
            "attack": {"threat": GRANT},
            "grid": {"params.eta": [30, 1000]},
            "seeds": [0],
        }
    )
    results = load_results(run_cell(cell, out_dir=tmp_path, progress=False))["results"]
    low, high = ({k: v["mean"] for k, v in r["metrics"].items()} for r in results)
    assert (
        high["replacement_rate"] == 0.0
        and high["word_recovery_identity"] == 1.0
        and high["word_recovery_channel"] == 1.0
    )
    assert low["replacement_rate"] > 0.9 and low["word_recovery_best"] == max(
        low["word_recovery_identity"], low["word_recovery_channel"]
    )
    assert low["word_epsilon"] == pytest.approx(30 / 1000 * high["word_epsilon"])
    assert low["prompt_epsilon"] > low["word_epsilon"] and low["n_texts"] == 12


def test_a_table_by_path_and_column_mapping(tmp_path, tiny_encoder_dir):
    """A file in its own layout: its distinct texts split by a stable hash into the attacker's and the evaluated part;
    at a large eta nothing is replaced and reading the text recovers every word."""
    from textfree.experiments import run_cell
    from textfree.results.files import load_results

    notes = Path(__file__).parent / "fixtures" / "audit" / "notes.jsonl"
    cell = {"name": "s", "kind": "substitution_inversion", "dataset": str(notes),
            "params": {"eta": 1e6, "rounds": 1, "table": str(tiny_encoder_dir), "columns": {"text": "note"},
                       "test_share": 0.5},
            "attack": {"threat": GRANT}, "seeds": [0]}  # fmt: skip
    row = load_results(run_cell(cell, tmp_path, progress=False))["results"][0]["metrics"]
    assert row["word_recovery_identity"]["mean"] == 1.0 and row["n_texts"]["mean"] >= 1
    with pytest.raises(CellError, match="test_share must be a number in") as info:
        Cell.from_dict(cell | {"params": cell["params"] | {"test_share": 1.5}})
    assert info.value.field == "params.test_share"
    with pytest.raises(CellError) as info:
        Cell.from_dict(cell | {"params": cell["params"] | {"columns": {"bogus": "x"}}})
    assert info.value.field == "params.columns"
