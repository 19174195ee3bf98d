"""The token_inversion cell kind on a tiny encoder (29-token WordPiece vocabulary, d = 16, N(0, 1) table).

Every test runs real cells through ``run_cell`` / ``Cell.from_dict``. Table rows have norm ~4 and lie a few units
apart, so the noise levels below (noise norm 0.04 and 400) are far from the boundary either way.
"""

import json

import pytest
import torch
from test_attacks_beamclean import tiny_llama  # noqa: F401  (fixture: a 2-layer Llama with its own BPE tokenizer)

from textfree.attacks import ThreatModelError
from textfree.experiments import Cell, CellError, run_cell
from textfree.results.files import load_results

WORDS = (
    "the patient has a cough and fever with pain in chest since two days she he reports history of smoking "
    "diabetes mild severe no"
).split()
TEXTS = [
    "the patient has a cough and fever",
    "she reports pain in chest since two days",
    "he has a history of smoking and diabetes",
    "the patient reports mild fever with no pain",
]
PUBLIC = [
    "he has a cough",
    "she has a fever and pain",
    "the history of the patient",
    "no pain since two days",
    "he reports severe pain in chest",
    "mild cough with fever",
]
FULL_GRANT = {"embedding_table": True, "training_text": "public", "knows_mechanism": True, "knows_parameters": True}


@pytest.fixture(scope="module")
def tiny_table_dir(tmp_path_factory):
    """A BERT with a tiny WordPiece vocabulary ([PAD] [UNK] [CLS] [SEP] [MASK] + 24 words) and a N(0, 1) table."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    out = tmp_path_factory.mktemp("tiny-table")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=1,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = BertModel(config)
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.copy_(
            torch.randn(len(vocab), 16, generator=torch.Generator().manual_seed(1))
        )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def _cell(encoder: str, **over) -> dict:
    cell = {
        "name": "ti_test",
        "kind": "token_inversion",
        "texts": TEXTS,
        "encoder": encoder,
        "mechanism": {"name": "gaussian", "sigma": 0.01},
        "params": {"threads": 1},
        "attack": {
            "threat": dict(FULL_GRANT),
            "attacks": ["nn_l2", "nn_cosine", "beamclean"],
            "beamclean": {"beam_width": 4, "candidates": 8, "noise": ["estimated"]},
            "prior": {"kind": "bigram", "texts": PUBLIC},
        },
        "seeds": [0],
    }
    cell.update(over)
    return cell


def _metrics(path) -> dict[str, float]:
    rows = load_results(path)["results"]
    return [{k: v["mean"] for k, v in r["metrics"].items()} for r in rows]


def test_refuses_attacks_the_grant_does_not_cover(tiny_table_dir):
    cell = _cell(tiny_table_dir)
    cell["attack"]["beamclean"]["noise"] = ["estimated", "oracle"]
    cell["attack"]["threat"] = {"embedding_table": True, "training_text": "public", "knows_mechanism": True}
    with pytest.raises(CellError, match="knows_parameters") as exc:
        Cell.from_dict(cell)
    assert exc.value.field == "attack.threat"
    cell["attack"]["threat"] = {"training_text": "public"}  # no table: nearest neighbour is refused too
    cell["attack"]["attacks"] = ["nn_cosine"]
    with pytest.raises(CellError, match="'nn_cosine' needs embedding_table"):
        Cell.from_dict(cell)
    cell["attack"]["attacks"] = ["beamclean"]  # a public-text prior without a training-text grant
    cell["attack"]["threat"] = {"embedding_table": True, "knows_mechanism": True}
    cell["attack"]["beamclean"]["noise"] = "estimated"
    with pytest.raises(CellError, match="training_text='public'"):
        Cell.from_dict(cell)
    # the kind checks again when it runs (a cell edited after validation): ThreatModelError naming the capability
    from textfree.experiments import get_cell_kind

    bad = Cell.from_dict(_cell(tiny_table_dir), strict=False)
    bad.attack["threat"] = {"embedding_table": True, "training_text": "public"}
    with pytest.raises(ThreatModelError, match="knows_mechanism"):  # family 'auto' reads the mechanism
        get_cell_kind("token_inversion")(bad, {}, 0, None)


def test_checks_the_attack_section_and_the_prior_source(tiny_table_dir):
    cell = _cell(tiny_table_dir)
    cell["attack"]["attacks"] = ["nn_l2", "gpt"]
    with pytest.raises(CellError, match="attack.attacks"):
        Cell.from_dict(cell)
    cell = _cell(tiny_table_dir)
    cell["attack"]["beamclean"]["noise"] = "exact"
    with pytest.raises(CellError, match="noise must be"):
        Cell.from_dict(cell)
    cell = _cell(tiny_table_dir)
    cell["attack"]["prior"] = {"kind": "bigram", "sources": [{"dataset": "pri-ddx", "split": "train"}]}
    with pytest.raises(CellError, match="in-domain"):  # Pri-* text is never 'public'
        Cell.from_dict(cell)
    cell["attack"]["prior"] = {
        "kind": "bigram",
        "training_text": "in_domain",
        "sources": [{"dataset": "pri-ddx", "split": "test"}],
    }
    cell["attack"]["threat"]["training_text"] = "in_domain"
    with pytest.raises(CellError, match="only the PPFT train part"):
        Cell.from_dict(cell)
    cell = _cell(tiny_table_dir, params={"max_tokens": 0})
    with pytest.raises(CellError, match="max_tokens"):
        Cell.from_dict(cell)


def test_prior_may_not_contain_the_evaluated_texts(tiny_table_dir, tmp_path):
    cell = _cell(tiny_table_dir)
    cell["attack"]["prior"]["texts"] = PUBLIC + [TEXTS[1]]
    with pytest.raises(ValueError, match="contains 1 of the evaluated texts"):
        run_cell(cell, tmp_path, progress=False)


def test_oracle_metrics_exist_only_when_asked_for_and_granted(tiny_table_dir, tmp_path):
    (est,) = _metrics(run_cell(_cell(tiny_table_dir), tmp_path, progress=False))
    assert "recovery_beamclean_estimated" in est and "scale_rel_error_estimated" in est
    assert not any("oracle" in k for k in est)
    cell = _cell(tiny_table_dir)
    cell["attack"]["beamclean"]["noise"] = ["estimated", "oracle"]
    (both,) = _metrics(run_cell(cell, tmp_path, progress=False))
    assert {"recovery_beamclean_oracle", "beamclean_oracle_over_nn", "seconds_per_sequence_beamclean_oracle"} <= set(
        both
    )
    assert not any("oracle" in k and "error" in k for k in both)  # the scale error is an estimated-noise figure only


def test_no_noise_recovers_everything_extreme_noise_almost_nothing(tiny_table_dir, tmp_path):
    """sigma 0.01 (noise norm 0.04, rows a few units apart) and sigma 100 (norm 400): 24 words, chance ~4%."""
    cell = _cell(tiny_table_dir, grid={"mechanism.sigma": [0.01, 100.0]}, seeds=[0, 1])
    cell["attack"]["beamclean"]["noise"] = ["estimated", "oracle"]
    low, high = _metrics(run_cell(cell, tmp_path, progress=False))
    for name in (
        "recovery_nn_l2",
        "recovery_nn_cosine",
        "recovery_nn_best",
        "recovery_beamclean_estimated",
        "recovery_beamclean_oracle",
    ):
        assert low[name] == 1.0, name
        assert high[name] <= 0.25, (name, high[name])  # measured (seeds 0-5): NN 0.02-0.05, BeamClean 0.03-0.11
    assert abs(low["scale_rel_error_estimated"]) < 0.2
    # special tokens are noised but not scored: 4 texts of 7, 8, 8, 8 words -> 31 scored tokens ([CLS], [SEP] not)
    assert low["n_tokens"] == 31 and low["n_sequences"] == 4
    # the formal guarantee: the Gaussian's exact (analytic) loss per unit distance at delta 1e-5 and at the table's
    # diameter (not linear in the distance: eps ~ D^2 / (2 sigma^2) when sigma is small)
    from textfree.mechanisms import analytic_epsilon

    table = torch.randn(29, 16, generator=torch.Generator().manual_seed(1))
    diameter = torch.cdist(table.double(), table.double()).max().item()
    assert low["table_diameter"] == pytest.approx(diameter, rel=1e-6)
    assert low["epsilon_unit"] == pytest.approx(analytic_epsilon(0.01, 1e-5, 1.0))
    assert low["epsilon_unit"] > 0.99 / (2 * 0.01**2)  # far above the classic formula's 484
    assert low["token_epsilon"] == pytest.approx(analytic_epsilon(0.01, 1e-5, diameter), rel=1e-6)
    assert low["token_delta"] == 1e-5


def test_max_tokens_cuts_the_texts_and_repeats_are_dropped(tiny_table_dir, tmp_path):
    cell = _cell(tiny_table_dir, texts=TEXTS + [TEXTS[0]], params={"max_tokens": 3, "threads": 1})
    cell["attack"]["attacks"] = ["nn_l2"]
    (m,) = _metrics(run_cell(cell, tmp_path, progress=False))
    assert m["n_sequences"] == 4 and m["n_tokens"] == 12
    assert not any("beamclean" in k for k in m)
    saved = json.loads(next(tmp_path.glob("ti_test-*.json")).read_text())
    assert saved["cell"]["attack"]["attacks"] == ["nn_l2"]


def test_causal_lm_prior_through_the_cell(tiny_table_dir, tiny_llama, tmp_path):  # noqa: F811
    """A causal LM with another tokenizer as BeamClean's prior (cross-tokenizer mode); tiny noise: all recovered."""
    cell = _cell(tiny_table_dir)
    cell["attack"]["attacks"] = ["beamclean"]
    cell["attack"]["prior"] = {"kind": "causal_lm", "path": str(tiny_llama)}
    (m,) = _metrics(run_cell(cell, tmp_path, progress=False))
    assert m["recovery_beamclean_estimated"] == 1.0
    assert "recovery_nn_best" not in m and "beamclean_over_nn" not in m


@pytest.mark.shared_data
def test_pii_units_are_counted_in_decoded_guesses(shared_data, tmp_path):
    """PUPA with MiniLM's table and nearest neighbour only: with almost no noise every released PII unit is found in
    the decoded guess; with overwhelming noise none is. Units cut off by max_tokens are not counted."""
    cell = Cell.from_dict(
        {
            "name": "pii_test",
            "kind": "token_inversion",
            "dataset": "pupa",
            "limit": 6,
            "encoder": "default",
            "mechanism": {"name": "gaussian", "sigma": 0.001},
            "params": {"max_tokens": 48, "threads": 1},
            "attack": {"threat": {"embedding_table": True}, "attacks": ["nn_l2", "nn_cosine"]},
            "grid": {"mechanism.sigma": [0.001, 50.0]},
            "seeds": [0],
        }
    )
    clean, noisy = (
        {k: v["mean"] for k, v in r["metrics"].items()}
        for r in load_results(run_cell(cell, out_dir=tmp_path, progress=False))["results"]
    )
    assert clean["n_pii_units"] > 0 and clean["recovery_nn_best"] == 1.0
    assert clean["pii_exact_nn_best"] == 1.0 and clean["pii_fuzzy_nn_best"] == 1.0
    assert noisy["pii_exact_nn_best"] == 0.0 and noisy["recovery_nn_best"] < 0.01


def test_blackbox_attacks_need_queries_and_recover_under_weak_noise(tiny_table_dir, tmp_path):
    grant = {"encoder_queries": True, "training_text": "public", "knows_mechanism": True, "knows_parameters": True}
    cell = _cell(tiny_table_dir)
    cell["attack"] = {
        "threat": grant,
        "attacks": ["mlp", "autoencoder"],
        "blackbox": {
            "texts": PUBLIC + [" ".join(WORDS)],
            "vocab_size": 64,
            "samples": 4000,
            "hidden": 32,
            "epochs": 30,
        },
    }
    cell["grid"] = {"mechanism.sigma": [0.01, 400.0]}
    weak, strong = (
        {k: v["mean"] for k, v in r["metrics"].items()}
        for r in load_results(run_cell(Cell.from_dict(cell), out_dir=tmp_path, progress=False))["results"]
    )
    # every evaluated word is among the public words (the queried vocabulary): weak noise -> all recovered
    assert weak["recovery_mlp"] > 0.95 and weak["recovery_autoencoder"] > 0.95
    assert weak["autoencoder_mse"] <= weak["noisy_mse"] + 1e-3
    assert strong["recovery_mlp"] < 0.5 and strong["noisy_mse"] > 1000
    no_queries = dict(cell, attack=dict(cell["attack"], threat={**grant, "encoder_queries": False}))
    with pytest.raises(CellError, match="encoder_queries"):
        Cell.from_dict(no_queries)


@pytest.mark.shared_data
def test_pri_ddx_heldout_texts_run_and_carry_no_pii(shared_data, tiny_table_dir, tmp_path):
    cell = _cell(tiny_table_dir)
    del cell["texts"]
    cell.update({"dataset": "pri-ddx", "split": "heldout", "limit": 2})
    cell["attack"] = {"threat": {"embedding_table": True}, "attacks": ["nn_l2"]}
    m = load_results(run_cell(Cell.from_dict(cell), out_dir=tmp_path, progress=False))["results"][0]["metrics"]
    assert m["n_sequences"]["mean"] == 2.0 and "n_pii_units" not in m
