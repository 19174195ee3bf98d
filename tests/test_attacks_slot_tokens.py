"""Slot-token inversion (textfree.attacks.slot_tokens): targets and logits by hand, recovery with no noise and none
with extreme noise on a synthetic pooled table, the grant, and the learned_inversion cell kind's slot_tokens
inverter."""

import json
import math

import pytest
import torch

from textfree.attacks import ThreatModel, ThreatModelError
from textfree.attacks.slot_tokens import (
    SlotTokenConfig,
    SlotTokenInverter,
    slot_targets,
    slot_tokens_attack,
    train_slot_inverter,
)
from textfree.experiments import Cell, CellError, run_cell
from textfree.mechanisms import L2Laplace
from textfree.results.files import load_results

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hidden": 0}, "SlotTokenConfig.hidden must be an integer >= 1, got 0"),
        ({"epochs": 1.5}, "SlotTokenConfig.epochs must be an integer >= 1, got 1.5"),
        ({"lr": 0}, "SlotTokenConfig.lr must be a finite number > 0, got 0"),
        ({"scale": float("inf")}, "SlotTokenConfig.scale must be a finite number > 0, got inf"),
    ],
)
def test_config_names_the_bad_value(change, message):
    with pytest.raises(ValueError) as info:
        SlotTokenConfig(**change)
    assert message in str(info.value)


def test_slot_targets_by_hand():
    got = slot_targets([torch.tensor([1, 2, 3, 4, 5]), torch.tensor([7, 8])], [3, 2], k=2, pad_id=0)
    assert got.tolist() == [[1, 2], [3, 4], [5, 0], [7, 8], [0, 0]]  # the second text's payload has a filler slot
    with pytest.raises(ValueError, match="a text of 5 tokens needs 3 slots of k=2, its payload has 2"):
        slot_targets([torch.tensor([1, 2, 3, 4, 5])], [2], k=2, pad_id=0)


def test_logits_are_the_scaled_cosine_with_the_table_plus_a_bias():
    torch.manual_seed(0)
    table = torch.tensor([[3.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    model = SlotTokenInverter(dim=2, k=2, hidden=4, table=table, scale=10.0)
    with torch.no_grad():
        model.bias.copy_(torch.tensor([0.5, 0.0, -1.0]))
    x = torch.tensor([[0.6, 0.8]])
    queries = torch.nn.functional.normalize(model.net(x).view(1, 2, 2), dim=-1)
    unit = table / table.norm(dim=-1, keepdim=True)
    assert torch.allclose(model(x), 10.0 * queries @ unit.T + model.bias, atol=1e-5)
    assert model(x).shape == (1, 2, 3) and model.invert(x).shape == (1, 2)
    assert not model.table.requires_grad and "table" not in dict(model.named_parameters())


def test_invert_assigns_distinct_tokens_greedily_and_lets_the_pad_token_repeat():
    model = SlotTokenInverter(dim=2, k=3, hidden=4, table=torch.eye(4, 2) + 0.1)
    logits = torch.log(
        torch.tensor(
            [
                [
                    [0.1, 0.6, 0.3, 0.0],
                    [0.1, 0.7, 0.2, 0.0],
                    [0.8, 0.1, 0.1, 0.0],
                ],  # positions 0 and 1 both prefer token 1
                [[0.9, 0.1, 0.0, 0.0], [0.8, 0.2, 0.0, 0.0], [0.1, 0.0, 0.0, 0.9]],  # token 0 is the pad: it may repeat
            ]
        )
        + 1e-9
    )
    model.forward = lambda x: logits[: len(x)]
    got = model.invert(torch.zeros(2, 2), pad_id=0)
    # row 0: (pos 2, tok 0) 0.8 first, then (pos 1, tok 1) 0.7; pos 0 may not take token 1 again -> token 2 (0.3)
    assert got[0].tolist() == [2, 1, 0]
    assert got[1].tolist() == [0, 0, 3]
    no_pad = model.invert(torch.zeros(2, 2))  # without a pad id every token is used once per slot
    assert no_pad[1].tolist() == [0, 1, 3]


def _synthetic(n_vocab=40, dim=24, k=2, n=3000, seed=0):
    """Pooled slots of a random table: slot = unit mean of k random token vectors (no context), targets = the tokens."""
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(n_vocab, dim, generator=g)
    ids = torch.randint(1, n_vocab, (n, k), generator=g)  # id 0 plays the pad token, never drawn here
    slots = torch.nn.functional.normalize(table[ids].mean(1), dim=-1)
    return table, ids, slots


def _train(slots, ids, table, k, mechanism, epochs=25):
    def releases(epoch):
        if mechanism is None:
            return slots
        return torch.nn.functional.normalize(
            mechanism.sample(slots.double(), generator=torch.Generator().manual_seed(epoch)).float(), dim=-1
        )

    return train_slot_inverter(
        releases,
        ids,
        table,
        k,
        SlotTokenConfig(hidden=128, epochs=epochs, batch_size=128, lr=3e-3),
        generator=torch.Generator().manual_seed(1),
    )


def test_recovers_nearly_every_token_without_noise_and_about_chance_under_extreme_noise():
    table, ids, slots = _synthetic()
    test_table_ids = ids[2500:]
    model, stats = _train(slots[:2500], ids[:2500], table, 2, None)
    # order-free accuracy: each slot is a mean, so which token came first is not in it
    guess = model.invert(slots[2500:])
    hit = (guess.sort(-1).values == test_table_ids.sort(-1).values).float().mean().item()
    assert hit > 0.9, hit
    assert stats["final_loss"] < stats["first_loss"] and stats["steps"] == 25 * math.ceil(2500 / 128)
    # eps 0.05 per unit distance on 24 dims: noise norm ~480 against unit slots, so nothing is left to read
    noisy_model, _ = _train(slots[:2500], ids[:2500], table, 2, L2Laplace(0.05), epochs=5)
    noisy = torch.nn.functional.normalize(
        L2Laplace(0.05).sample(slots[2500:].double(), generator=torch.Generator().manual_seed(99)).float(), dim=-1
    )
    hit = (noisy_model.invert(noisy).sort(-1).values == test_table_ids.sort(-1).values).float().mean().item()
    assert hit < 0.15, hit  # chance is about 1/39 per position; the per-token prior adds little here


class _Tok:
    all_special_ids = [0, 101, 102]
    pad_token_id = 0

    def decode(self, ids, clean_up_tokenization_spaces=True):
        return " ".join(f"w{i}" for i in ids)


class _Payload:
    def __init__(self, vectors, lengths):
        self.vectors, self.lengths = vectors, lengths


def test_attack_checks_the_grant_and_writes_each_row_without_special_tokens():
    table = torch.eye(4)[[0, 1, 2, 3, 3, 3]] + 0.01  # 6 tokens
    model = SlotTokenInverter(dim=4, k=2, hidden=8, table=table)
    payload = _Payload(torch.randn(2, 3, 4), [3, 1])
    with pytest.raises(ThreatModelError, match="encoder_queries"):
        slot_tokens_attack(model, payload, _Tok(), threat=ThreatModel())
    model.invert = lambda rows, pad_id: torch.tensor(
        [[101, 5], [4, 3], [2, 0], [1, 102]]
    )  # 3 slots of row 0, 1 of row 1
    out = slot_tokens_attack(model, payload, _Tok(), threat=ThreatModel(encoder_queries=True, training_text="public"))
    assert out == ["w5 w4 w3 w2", "w1"]


# ------------------------------------------------------------------------------------------------ the cell kind
def _cell(**params) -> dict:
    base = {"variant": "aware", "inverter": "slot_tokens", "epsilon": 75, "init": "runs/stage1", "out": "runs/x"}
    return {
        "name": "slot_test",
        "kind": "learned_inversion",
        "dataset": "pri-ddx",
        "params": {k: v for k, v in (base | params).items() if v is not None},
        "attack": {
            "threat": {
                "encoder_queries": True,
                "training_text": "in_domain",
                "knows_mechanism": True,
                "knows_parameters": True,
            }
        },
        "seeds": [0],
    }


@pytest.mark.parametrize(
    "over, field, message",
    [
        (
            {"inverter": "lstm"},
            "params.inverter",
            "inverter must be one of ['decoder', 'slot_tokens', 'iterative'], got 'lstm'",
        ),
        (
            {"variant": "restoration", "model": "runs/m", "init": None, "out": None},
            "params.inverter",
            "restoration trains nothing",
        ),
        ({"init": {"encoder": "e", "decoder": "d"}}, "params.init", "run directory"),
        ({"train_decoder": True}, "params.train_decoder", "has no decoder"),
        ({"max_new_tokens": 10}, "params.max_new_tokens", "has no decoder"),
        ({"max_private_tokens": 64}, "params.max_private_tokens", "has no decoder"),
        ({"hidden": 0}, "params.hidden", "hidden must be an integer >= 1, got 0"),
        ({"inverter": None, "hidden": 64}, "params.hidden", "hidden applies to the slot_tokens inverter only"),
    ],
)
def test_cell_validation(over, field, message):
    with pytest.raises(CellError) as info:
        Cell.from_dict(_cell(**over))
    assert info.value.field == field and message in str(info.value)


def test_cell_grant_names_the_slot_tokens_attack():
    cell = _cell()
    cell["attack"]["threat"] = {"training_text": "in_domain", "knows_mechanism": True, "knows_parameters": True}
    with pytest.raises(CellError, match="slot_tokens .*encoder_queries") as info:
        Cell.from_dict(cell)
    assert info.value.field == "attack.threat"


@pytest.mark.shared_data
def test_tiny_slot_inverter_trains_saves_and_is_reused(shared_data, tiny_run_dir, tmp_path):
    cell = Cell.from_dict(
        _cell(
            init=str(tiny_run_dir),
            out=str(tmp_path / "slot-{variant}-{epsilon}"),
            epochs=2,
            hidden=32,
            train_limit=16,
            eval_limit=3,
            prior_sample=5,
        )
        | {"grid": {"params.epsilon": [75]}}
    )
    m = {
        k: v["mean"]
        for k, v in load_results(run_cell(cell, out_dir=tmp_path, progress=False))["results"][0]["metrics"].items()
    }
    assert m["n_eval"] == 3 and m["reused"] == 0.0 and m["train_steps"] >= 2
    assert 0.0 <= m["rouge_l"] <= 1.0 and m["slot_epsilon"] == 150.0 and m["prompt_epsilon"] > 150.0
    saved = json.loads((tmp_path / "slot-aware-75" / "slot_tokens.json").read_text())
    assert saved["settings"]["epsilon"] == 75 and saved["settings"]["hidden"] == 32 and saved["texts"] == 16
    assert (tmp_path / "slot-aware-75" / "slot_tokens.safetensors").is_file()
    again = {
        k: v["mean"]
        for k, v in load_results(run_cell(cell, out_dir=tmp_path, progress=False))["results"][0]["metrics"].items()
    }
    assert again["reused"] == 1.0 and again["rouge_l"] == m["rouge_l"]  # the same classifier, the same noise seed
    changed = Cell.from_dict(cell.to_dict() | {"params": {**cell.params, "epochs": 3}})
    third = load_results(run_cell(changed, out_dir=tmp_path, progress=False))["results"][0]["metrics"]
    assert (
        third["reused"]["mean"] == 0.0
        and json.loads((tmp_path / "slot-aware-75" / "slot_tokens.json").read_text())["settings"]["epochs"] == 3
    )


@pytest.mark.shared_data
def test_tiny_slot_inverter_on_padded_payloads_trains_on_filler_slots(shared_data, tiny_run_dir, tmp_path):
    from textfree.ppft.model import TextFreeLM

    config = TextFreeLM.load(tiny_run_dir).config
    pad_to = -(-config.max_private_tokens // config.k)
    cell = Cell.from_dict(
        _cell(
            init=str(tiny_run_dir),
            out=str(tmp_path / "slot-pad"),
            epochs=1,
            hidden=32,
            train_limit=8,
            eval_limit=3,
            prior_sample=5,
            fixed_slots=True,
        )
    )
    m = {
        k: v["mean"]
        for k, v in load_results(run_cell(cell, out_dir=tmp_path, progress=False))["results"][0]["metrics"].items()
    }
    assert m["padded_slots"] == pad_to and m["prompt_epsilon"] == pad_to * m["slot_epsilon"]
    saved = json.loads((tmp_path / "slot-pad" / "slot_tokens.json").read_text())
    assert saved["settings"]["fixed_slots"] is True and saved["slots"] == 8 * pad_to  # every text's filler slots too


@pytest.mark.shared_data
def test_tiny_slot_inverter_on_a_centring_client_names_its_run_and_reports_centred(shared_data, tiny_run_dir, tmp_path):
    import torch

    from textfree.mechanisms import center_sha256
    from textfree.ppft.model import TextFreeLM

    centred_run = tmp_path / "centred-run"
    lm = TextFreeLM.load(tiny_run_dir)
    center = torch.zeros(lm.config.encoder_dim)
    center[0] = 0.5
    lm.center = center  # as stage 2 with center_mu sets it
    lm.server.config = lm.config.replace(center_mu=1.0, center_sha256=center_sha256(center))
    lm.save(centred_run)
    cell = Cell.from_dict(
        _cell(
            out=str(tmp_path / "slot-{epsilon}-{init_name}"),
            epochs=1,
            hidden=32,
            train_limit=8,
            eval_limit=3,
            prior_sample=5,
            epsilon=75,
        )
        | {"grid": {"params.init": [str(tiny_run_dir), str(centred_run)]}}
    )
    results = load_results(run_cell(cell, out_dir=tmp_path, progress=False))["results"]
    assert [r["metrics"]["centred"]["mean"] for r in results] == [0.0, 1.0]
    # one classifier per init run, each in its own directory (not the first one reused for the second)
    assert [r["metrics"]["reused"]["mean"] for r in results] == [0.0, 0.0]
    for init in (tiny_run_dir, centred_run):
        saved = json.loads((tmp_path / f"slot-75-{init.name}" / "slot_tokens.json").read_text())
        assert saved["settings"]["init"] == str(init)
