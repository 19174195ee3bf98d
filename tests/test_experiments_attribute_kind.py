"""The attribute_inference cell kind: validation without data; real runs on Pri-DDX / Trustpilot with a tiny encoder."""


import pytest

from textfree.experiments import Cell, CellError, load_results, run_cell

GRANT = {"encoder_queries": True, "training_text": "in_domain", "knows_mechanism": True, "knows_parameters": True}


def _cell(encoder: str = "default", **over) -> dict:
    cell = {
        "name": "attr_test",
        "kind": "attribute_inference",
        "dataset": "pri-ddx",
        "encoder": encoder,
        "mechanism": {"name": "l2_laplace", "epsilon": 75},
        "params": {"k": 4, "epochs": 2, "hidden": 16, "threads": 1},
        "attack": {"threat": dict(GRANT)},
        "seeds": [0],
    }
    cell.update(over)
    return cell


@pytest.mark.parametrize(
    "over, field, message",
    [
        ({"dataset": "sst2"}, "dataset", "supports datasets"),
        ({"mechanism": None}, "mechanism", "needs a `mechanism`"),
        ({"params": {"attackers": ["mlp"]}}, "params.attackers", "distinct values from"),
        ({"params": {"training": []}}, "params.training", "non-empty list"),
        ({"params": {"epochs": 0}}, "params.epochs", "integer >= 1"),
        ({"params": {"depth": 3}}, "params", r"takes no parameter\(s\) \['depth'\]"),
        ({"attack": {"threat": GRANT, "attacks": ["x"]}}, "attack", "takes only `threat`"),
        ({"attack": {"threat": {**GRANT, "knows_parameters": False}}}, "attack.threat", "knows_parameters"),
        ({"attack": {"threat": {"training_text": "public", "encoder_queries": True}}}, "attack.threat", "in_domain"),
    ],
)
def test_cells_are_validated_before_anything_runs(over, field, message):
    with pytest.raises(CellError, match=message) as info:
        Cell.from_dict(_cell(**over))
    assert info.value.field == field


def test_unaware_only_needs_no_mechanism_knowledge():
    Cell.from_dict(_cell(params={"training": ["unaware"]}, attack={"threat": {"encoder_queries": True, "training_text": "in_domain"}}))


@pytest.mark.shared_data
def test_pri_ddx_run_reports_attackers_references_and_guarantee(shared_data, tiny_encoder_dir, tmp_path):
    cell = Cell.from_dict(_cell(str(tiny_encoder_dir), params={"k": 4, "epochs": 2, "hidden": 16, "threads": 1, "train_limit": 120}))
    result = load_results(run_cell(cell, out_dir=tmp_path, progress=False))
    m = {k: v["mean"] for k, v in result["results"][0]["metrics"].items()}
    assert m["n_train"] == 120 and m["n_test"] > 300
    # the formal guarantee: 2*eps per unit slot, times the slots of each prompt
    assert m["slot_epsilon"] == 150.0
    assert m["prompt_epsilon"] == pytest.approx(150.0 * m["slots_per_prompt"])
    assert m["prompt_epsilon_max"] >= m["prompt_epsilon"]
    for score in ("sex_accuracy", "age_accuracy", "symptoms_recall", "symptoms_f1", "antecedents_recall"):
        variants = [m[f"{score}_{a}_{t}"] for a in ("mean", "slots") for t in ("unaware", "aware")]
        assert m[f"{score}_best"] == max(variants)
        assert m[f"{score}_excess"] == pytest.approx(m[f"{score}_best"] - max(m[f"{score}_prior"], m[f"{score}_label"]))
    # the diagnosis alone reveals most symptoms (the reference the issue quotes: ~0.94); the prior much less
    assert m["symptoms_recall_label"] > 0.8 > m["symptoms_recall_prior"]


@pytest.mark.shared_data
def test_trustpilot_run_has_no_label_reference(shared_data, tiny_encoder_dir, tmp_path):
    cell = Cell.from_dict(_cell(str(tiny_encoder_dir), dataset="trustpilot",
                                params={"epochs": 1, "hidden": 8, "attackers": ["mean"], "training": ["unaware"], "train_limit": 100},
                                attack={"threat": {"encoder_queries": True, "training_text": "in_domain"}}))
    m = {k: v["mean"] for k, v in load_results(run_cell(cell, out_dir=tmp_path, progress=False))["results"][0]["metrics"].items()}
    assert 0.0 <= m["gender_accuracy_best"] <= 1.0 and m["gender_accuracy_label"] is None  # NaN in the result file
    assert m["gender_accuracy_excess"] == pytest.approx(m["gender_accuracy_best"] - m["gender_accuracy_prior"])
    assert "sex_accuracy_best" not in m
