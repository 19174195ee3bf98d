"""Learned inversion / restoration: scoring by hand, grants, the cell kind's validation and a real tiny run."""

import pytest

from textfree.attacks import ThreatModel, ThreatModelError
from textfree.attacks.learned import learned_inversion_attack, reconstruct, restoration_attack, score_reconstructions
from textfree.experiments import Cell, CellError, run_cell
from textfree.results.files import load_results

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

GRANT = {"encoder_queries": True, "training_text": "in_domain", "knows_mechanism": True, "knows_parameters": True}


def test_scores_by_hand():
    recon = ["a man with a cough and fever", "nothing here"]
    refs = ["a man with a cough", "a woman with a rash"]
    s = score_reconstructions(recon, refs, {"symptoms": [["cough", "fever"], ["rash"]], "antecedents": [[], []]})
    # pair 1: LCS 5 of 7 / 5 -> P 5/7, R 1, F 2*(5/7)/(12/7) = 10/12; pair 2: no common token -> 0
    assert s["rouge_l"] == pytest.approx((10 / 12 + 0) / 2)
    assert s["rouge_l_recall"] == pytest.approx(0.5)
    assert s["symptoms_recall_text"] == pytest.approx(2 / 3)  # cough, fever found; rash not
    assert s["antecedents_recall_text"] != s["antecedents_recall_text"]  # NaN: no gold antecedents at all
    assert 0.0 <= s["bleu"] <= 1.0
    assert score_reconstructions(refs, refs)["rouge_l"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="1 reconstructions for 2"):
        score_reconstructions(recon[:1], refs)


class _Model:
    def answer(self, payload, **kwargs):
        return ["x"] * len(payload.public)


class _Payload:
    def __init__(self, public):
        self.public = public


def test_grants_and_the_restore_instruction_are_checked():
    from textfree.ppft.batches import RESTORE_INSTRUCTION

    ok = _Payload([RESTORE_INSTRUCTION] * 2)
    assert restoration_attack(_Model(), ok, threat=ThreatModel(), instruction=RESTORE_INSTRUCTION) == ["x", "x"]
    with pytest.raises(ThreatModelError, match="encoder_queries"):
        learned_inversion_attack(_Model(), ok, threat=ThreatModel(), instruction=RESTORE_INSTRUCTION)
    assert learned_inversion_attack(
        _Model(),
        ok,
        threat=ThreatModel(encoder_queries=True, training_text="in_domain"),
        instruction=RESTORE_INSTRUCTION,
    ) == ["x", "x"]
    with pytest.raises(ValueError, match="restore instruction"):
        reconstruct(_Model(), _Payload(["Answer:", RESTORE_INSTRUCTION]), instruction=RESTORE_INSTRUCTION)


def _cell(**params) -> dict:
    return {
        "name": "inv_test",
        "kind": "learned_inversion",
        "dataset": "pri-ddx",
        "params": {
            k: v
            for k, v in {"variant": "aware", "epsilon": 75, "init": "runs/stage1", "out": "runs/x", **params}.items()
            if v is not None
        },  # None drops a default
        "attack": {"threat": dict(GRANT)},
        "seeds": [0],
    }


@pytest.mark.parametrize(
    "over, field, message",
    [
        ({"variant": "clever"}, "params.variant", "variant must be one of"),
        ({"epsilon": None}, "params.epsilon", "needs an epsilon"),
        ({"epsilon": -1}, "params.epsilon", "number > 0 or null"),
        ({"init": {"encoder": "e"}}, "params.init", "takes `init`"),
        ({"variant": "restoration"}, "params.model", "restoration takes `model`"),
        ({"epochs": 0}, "params.epochs", "integer >= 1"),
        ({"train_decoder": "yes"}, "params.train_decoder", "true or false"),
        ({"lr": 0}, "params.lr", "number in \\(0, 1\\)"),
        (
            {"variant": "restoration", "model": "runs/m", "init": None, "out": None, "train_decoder": True},
            "params.train_decoder",
            "takes no train_decoder",
        ),
        ({"fixed_slots": "yes"}, "params.fixed_slots", "fixed_slots must be true or false, got 'yes'"),
        ({"max_private_tokens": 0}, "params.max_private_tokens", "max_private_tokens must be an integer >= 1, got 0"),
        (
            {"variant": "restoration", "model": "runs/m", "init": None, "out": None, "fixed_slots": True},
            "params.fixed_slots",
            "no fixed_slots or max_private_tokens",
        ),
    ],
)
def test_cell_validation(over, field, message):
    with pytest.raises(CellError, match=message) as info:
        Cell.from_dict(_cell(**over))
    assert info.value.field == field


def _public_cell(**params) -> dict:
    return {
        "name": "inv_pupa",
        "kind": "learned_inversion",
        "dataset": "pupa",
        "params": {
            "variant": "unaware",
            "epsilon": 75,
            "init": "runs/stage1",
            "out": "runs/x",
            "train_text": ["alpaca"],
            **params,
        },
        "attack": {"threat": {"encoder_queries": True, "training_text": "public"}},
        "seeds": [0],
    }


def test_an_inverter_trained_on_public_text_needs_only_public_text():
    Cell.from_dict(_public_cell())  # public text suffices with train_text
    in_domain = _cell(variant="unaware")
    in_domain["attack"] = {"threat": {"encoder_queries": True, "training_text": "public"}}
    with pytest.raises(CellError, match="needs training_text='in_domain'") as info:
        Cell.from_dict(in_domain)  # without train_text the inverter trains on the Pri-* train part
    assert info.value.field == "attack.threat"
    in_domain["params"]["train_text"] = ["alpaca", "gsm8k:train"]
    Cell.from_dict(in_domain)


@pytest.mark.parametrize(
    "over, field, message",
    [
        ({"train_text": None}, "params.train_text", "only evaluated"),
        ({"train_text": "alpaca"}, "params.train_text", "non-empty list"),
        ({"train_text": []}, "params.train_text", "non-empty list"),
        ({"train_text_limit": 0}, "params.train_text_limit", "integer >= 1"),
        ({"train_text": None, "train_text_limit": 5}, "params.train_text_limit", "train_text only"),
    ],
)
def test_public_text_cell_validation(over, field, message):
    cell = _public_cell(**over)
    if over.get("train_text", "x") is None:
        del cell["params"]["train_text"]
    with pytest.raises(CellError, match=message) as info:
        Cell.from_dict(cell)
    assert info.value.field == field


def test_restoration_takes_no_training_text():
    cell = _public_cell(variant="restoration", model="runs/m")
    del cell["params"]["init"], cell["params"]["out"]
    with pytest.raises(CellError, match="takes no train_text") as info:
        Cell.from_dict(cell)
    assert info.value.field == "params.train_text"
    del cell["params"]["train_text"]
    Cell.from_dict(cell)  # restoration on PUPA payloads: nothing to train


def test_cell_grant_must_cover_the_variant():
    cell = _cell()
    cell["attack"] = {"threat": {"encoder_queries": True, "training_text": "in_domain"}}
    with pytest.raises(CellError, match="knows_parameters") as info:
        Cell.from_dict(cell)
    assert info.value.field == "attack.threat"
    cell["params"]["variant"] = "unaware"
    Cell.from_dict(cell)  # unaware needs no mechanism knowledge


@pytest.mark.shared_data
def test_tiny_unaligned_inverter_trains_and_restoration_runs(shared_data, tiny_run_dir, tiny_encoder_dir, tmp_path):
    import json

    decoder = json.loads((tiny_run_dir / "decoder_ref.json").read_text())["name_or_path"]
    cell = Cell.from_dict(
        {
            "name": "inv_tiny",
            "kind": "learned_inversion",
            "dataset": "pri-ddx",
            "params": {
                "variant": "aware",
                "init": {"encoder": str(tiny_encoder_dir), "decoder": decoder},
                "out": str(tmp_path / "inv-{variant}-{epsilon}"),
                "epochs": 1,
                "train_limit": 8,
                "eval_limit": 3,
                "max_new_tokens": 6,
                "max_target_tokens": 24,
                "prior_sample": 5,
            },
            "attack": {"threat": dict(GRANT)},
            "grid": {"params.epsilon": [75]},
            "seeds": [0],
        }
    )
    m = {
        k: v["mean"]
        for k, v in load_results(run_cell(cell, out_dir=tmp_path, progress=False))["results"][0]["metrics"].items()
    }
    assert (
        m["n_eval"] == 3 and m["train_steps"] >= 1 and m["reused"] == 0.0 and m["init_stage"] == 0.0
    )  # built, not trained
    assert 0.0 <= m["rouge_l"] <= 1.0 and m["slot_epsilon"] == 150.0 and m["prompt_epsilon"] > 150.0
    assert m["rouge_l_prior"] > 0.2  # one Pri-DDX prompt already shares much of the template with any other
    assert (tmp_path / "inv-aware-75" / "summary.json").is_file() and (tmp_path / "inv-aware-75-init").is_dir()
    # a second run reuses the finished inverter
    again = load_results(run_cell(cell, out_dir=tmp_path, progress=False))["results"][0]["metrics"]
    assert again["reused"]["mean"] == 1.0
    # an inverter of padded payloads: every payload has ceil(96 / 4) = 24 slots, and the result says so
    padded = Cell.from_dict(
        {
            **cell.to_dict(),
            "name": "inv_tiny_padded",
            "params": {
                **cell.params,
                "out": str(tmp_path / "inv-padded-{epsilon}"),
                "fixed_slots": True,
                "max_private_tokens": 96,
            },
        }
    )
    (row,) = load_results(run_cell(padded, out_dir=tmp_path, progress=False))["results"]
    m = {k: v["mean"] for k, v in row["metrics"].items()}
    assert "provenance" not in row  # its init is an encoder and a decoder, no PPFT run: no build to name
    assert m["padded_slots"] == 24.0 and m["prompt_epsilon"] == 150.0 * 24 and m["n_eval"] == 3
    assert json.loads((tmp_path / "inv-padded-75" / "textfree_config.json").read_text())["fixed_slots"] is True
    # restoration from a served run that a stage-1 summary marks as a build: the result names that build
    import shutil

    from textfree.training.runs import run_fingerprint

    served = tmp_path / "served"
    shutil.copytree(tiny_run_dir, served)
    (served / "summary.json").write_text('{"stage": "stage1"}')
    restoration = Cell.from_dict(
        {
            "name": "rest_tiny",
            "kind": "learned_inversion",
            "dataset": "pri-ddx",
            "params": {
                "variant": "restoration",
                "model": str(served),
                "epsilon": 75,
                "eval_limit": 2,
                "max_new_tokens": 4,
                "prior_sample": 5,
            },
            "attack": {"threat": {}},
            "seeds": [0],
        }
    )
    (row,) = load_results(run_cell(restoration, out_dir=tmp_path, progress=False))["results"]
    assert row["metrics"]["n_eval"]["mean"] == 2.0 and "train_steps" not in row["metrics"]
    assert row["provenance"] == {"stage1_build": run_fingerprint(served)}


@pytest.mark.shared_data
def test_tiny_inverter_trained_on_public_text_inverts_pupa_and_counts_pii(
    shared_data, tiny_run_dir, tiny_encoder_dir, tmp_path
):
    import json

    from textfree.data import load_dataset
    from textfree.ppft.model import TextFreeLM

    decoder = json.loads((tiny_run_dir / "decoder_ref.json").read_text())["name_or_path"]
    cell = Cell.from_dict(
        {
            "name": "inv_pupa_tiny",
            "kind": "learned_inversion",
            "dataset": "pupa",
            "params": {
                "variant": "unaware",
                "init": {"encoder": str(tiny_encoder_dir), "decoder": decoder},
                "train_text": ["alpaca"],
                "train_text_limit": 12,
                "train_decoder": True,
                "lr": 3e-4,
                "out": str(tmp_path / "inv-pupa"),
                "epochs": 1,
                "eval_limit": 4,
                "max_new_tokens": 6,
                "max_target_tokens": 24,
                "prior_sample": 5,
            },
            "attack": {"threat": {"encoder_queries": True, "training_text": "public"}},
            "grid": {"params.epsilon": [None, 75]},
            "seeds": [0],
        }
    )
    results = load_results(run_cell(cell, out_dir=tmp_path, progress=False))["results"]
    clean, noisy = ({k: v["mean"] for k, v in r["metrics"].items()} for r in results)
    summary = json.loads((tmp_path / "inv-pupa" / "summary.json").read_text())
    assert 1 <= summary["examples"] <= 12 and clean["train_steps"] >= 1 and noisy["train_steps"] == clean["train_steps"]
    assert (tmp_path / "inv-pupa" / "decoder" / "config.json").is_file()  # full fine-tuning: the run holds its decoder
    # the four evaluated queries: the first PUPA texts that the client does not cut, each with its PII units
    lm = TextFreeLM.load(tmp_path / "inv-pupa")
    limit = lm.config.max_private_tokens
    fitting = [r for r in load_dataset("pupa") if len(lm.encoder.tokenizer(r.text)["input_ids"]) <= limit][:4]
    assert lm.sends_whole(fitting[0].text) and not lm.sends_whole(
        load_dataset("pupa")[0].text
    )  # the first query is long
    assert clean["n_eval"] == 4 and clean["n_pii_units"] == float(sum(len(set(r.pii)) for r in fitting))
    for m in (clean, noisy):
        assert all(
            0.0 <= m[name] <= 1.0 for name in ("pii_exact", "pii_fuzzy", "pii_exact_prior", "rouge_l", "rouge_l_prior")
        )
        assert m["pii_exact"] <= m["pii_fuzzy"]
    assert clean["slot_epsilon"] is None and noisy["slot_epsilon"] == 150.0  # clean payloads carry no guarantee


def test_medoid_text_is_the_text_closest_to_the_others():
    from textfree.attacks.learned import medoid_text

    texts = ["a man with a cough", "a man with a rash", "a woman with a cough", "nothing alike here"]
    assert medoid_text(texts) == "a man with a cough"  # ROUGE-L 0.8 / 0.8 / 0 to the others: the highest sum
    assert medoid_text(texts + texts, n=100) == "a man with a cough"  # duplicates count once
    with pytest.raises(ValueError, match="at least one"):
        medoid_text([])


def test_init_stage_reads_the_init_runs_summary(tmp_path):
    """A decoder inverter's result names what it started from: the init run's summary.json stage (stage1: 1, stage2:
    the served model, 2), 0 for a model built and never trained (no summary); any other stage is refused."""
    import json

    from textfree.experiments.kinds.inversion import _init_stage

    for name, stage, want in (("s1", "stage1", 1.0), ("s2", "stage2", 2.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"stage": stage}))
        assert _init_stage(str(tmp_path / name)) == want
    (tmp_path / "built").mkdir()
    assert _init_stage(str(tmp_path / "built")) == 0.0
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "summary.json").write_text(json.dumps({"stage": "pretrain"}))
    with pytest.raises(CellError, match="names stage 'pretrain', not stage1 or stage2") as info:
        _init_stage(str(tmp_path / "odd"))
    assert info.value.field == "params.init"
