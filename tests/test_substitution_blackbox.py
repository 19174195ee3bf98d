"""Black-box readers of T2T text (MLP, autoencoder) on a tiny random table: a near-identity channel is inverted, a
channel that forgets its input leaves no more than the best constant guess, the autoencoder removes part of the
noise; their params are checked; the kind adds their metrics only with ``blackbox: true``; Fig. 4 gets their rows."""

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch

from textfree.attacks import ThreatModel, ThreatModelError
from textfree.attacks.substitution import aligned_word_recovery
from textfree.attacks.substitution_blackbox import (
    WordBlackBoxConfig,
    released_rows,
    substitution_autoencoder_attack,
    substitution_mlp_attack,
    train_word_inverter,
    vector_mse,
)
from textfree.experiments import Cell, CellError, run_cell
from textfree.results.files import load_results
from textfree.substitution.embeddings import WordEmbeddingTable
from textfree.substitution.t2t import TextToText

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

GRANT = {"training_text": "in_domain", "knows_mechanism": True, "knows_parameters": True}
CONFIG = WordBlackBoxConfig(hidden=32, epochs=10, batch_size=32, lr=1e-2)


@pytest.fixture(scope="module")
def tiny():
    """A 30-word random table (dim 8); Zipf-distributed texts of 8 table words and one word outside the table."""
    g = torch.Generator().manual_seed(0)
    table = WordEmbeddingTable([f"w{i}" for i in range(30)], torch.randn(30, 8, generator=g))
    weights = 1 / torch.arange(1, 31, dtype=torch.float64)

    def texts(n):
        ids = torch.multinomial(weights.expand(n, -1), 8, replacement=True, generator=g)
        return [" ".join(f"w{i}" for i in row.tolist()) + " zzz" for row in ids]

    train, evaluated = texts(200), texts(50)
    return table, train, evaluated, [t.split() for t in evaluated]


def _attack(table, train, evaluated, original, eta):
    mech = TextToText(table, eta)
    released = mech.privatize_detailed(evaluated, generator=torch.Generator().manual_seed(1))
    threat = ThreatModel(**GRANT)
    mlp = train_word_inverter("mlp", mech, train, CONFIG, generator=torch.Generator().manual_seed(2))
    ae = train_word_inverter("autoencoder", mech, train, CONFIG, generator=torch.Generator().manual_seed(3))
    out = released.output_words
    return {
        "mlp": aligned_word_recovery(original, substitution_mlp_attack(out, mlp, table, threat=threat)),
        "ae": aligned_word_recovery(original, substitution_autoencoder_attack(out, ae, table, threat=threat)),
        "identity": aligned_word_recovery(original, out),
        "mse": vector_mse(ae, table, original, out),
        "replaced": released.replacement_rate,
    }


def test_huge_eta_is_inverted_and_tiny_eta_leaves_the_best_constant_guess(tiny):
    table, train, evaluated, original = tiny
    high = _attack(table, train, evaluated, original, 1e6)
    assert high["replaced"] == 0.0 and high["mlp"] == high["ae"] == 1.0 and high["mse"][1] == 0.0
    low = _attack(table, train, evaluated, original, 1e-3)
    assert low["replaced"] > 0.9
    # chance level: the most frequent table word guessed everywhere, the word outside the table (released verbatim,
    # which the attacker knows) read as it is
    counts = Counter(w for words in original for w in words)
    n = sum(counts.values())
    chance = (max(c for w, c in counts.items() if w != "zzz") + counts["zzz"]) / n
    assert low["mlp"] <= chance + 0.03 and low["mlp"] < 0.5 * high["mlp"]


def test_autoencoder_removes_part_of_moderate_noise(tiny):
    table, train, evaluated, original = tiny
    mid = _attack(table, train, evaluated, original, 2.0)
    assert 0.3 < mid["replaced"] < 0.9
    denoised, raw = mid["mse"]
    assert denoised < 0.8 * raw
    assert mid["mlp"] > mid["identity"]  # the noise-aware classifier beats reading the text


def test_pairs_align_and_training_is_seeded(tiny):
    table, train, _, _ = tiny
    mech = TextToText(table, 2.0)
    released, original = released_rows(mech, train[:3], generator=torch.Generator().manual_seed(0))
    assert len(released) == len(original) == 27 and (original[8::9] == -1).all() and (released[8::9] == -1).all()
    a, b = (
        train_word_inverter("mlp", mech, train[:20], CONFIG, generator=torch.Generator().manual_seed(5))
        for _ in range(2)
    )
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_bad_params_name_the_param(tiny):
    table, train, _, _ = tiny
    mech = TextToText(table, 2.0)
    for bad, name in (({"hidden": 0}, "hidden"), ({"epochs": True}, "epochs"), ({"lr": math.inf}, "lr")):
        with pytest.raises(ValueError, match=f"WordBlackBoxConfig.{name} must be"):
            WordBlackBoxConfig(**bad)
    with pytest.raises(ValueError, match="kind must be one of"):
        train_word_inverter("gru", mech, train, CONFIG, generator=torch.Generator())
    with pytest.raises(TypeError, match="generator"):
        released_rows(mech, train, generator=0)
    mlp = train_word_inverter("mlp", mech, train[:5], WordBlackBoxConfig(epochs=1), generator=torch.Generator())
    with pytest.raises(ThreatModelError, match="knows_parameters"):
        substitution_mlp_attack(
            [["w1"]], mlp, table, threat=ThreatModel(training_text="in_domain", knows_mechanism=True)
        )


# ------------------------------------------------------------------------------------------------ the cell kind
def _cell(table_dir, **params):
    notes = Path(__file__).parent / "fixtures" / "audit" / "notes.jsonl"
    return {"name": "s", "kind": "substitution_inversion", "dataset": str(notes),
            "params": {"eta": 1e6, "rounds": 1, "table": str(table_dir), "columns": {"text": "note"},
                       "test_share": 0.5, "attacks": ["identity"]} | params,
            "attack": {"threat": GRANT}, "seeds": [0]}  # fmt: skip


def test_the_kind_adds_the_blackbox_metrics_only_when_asked(tmp_path, tiny_encoder_dir):
    on = _cell(tiny_encoder_dir, blackbox=True, blackbox_epochs=2, blackbox_hidden=16)
    row = load_results(run_cell(on, tmp_path / "on", progress=False))["results"][0]["metrics"]
    mean = {k: v["mean"] for k, v in row.items()}
    new = ("word_recovery_mlp", "word_recovery_autoencoder", "rouge_l_mlp", "mse_autoencoder", "mse_released")
    assert all(k in mean for k in new) and 0 <= mean["word_recovery_mlp"] <= 1
    assert mean["mse_released"] == 0.0 and mean["word_recovery_identity"] == 1.0  # eta 1e6: nothing replaced
    assert mean["word_recovery_best"] == 1.0
    off = load_results(run_cell(_cell(tiny_encoder_dir), tmp_path / "off", progress=False))["results"][0]["metrics"]
    assert not any(k in off for k in new) and "word_recovery_prior" not in off


@pytest.mark.parametrize(
    "params, field, message",
    [
        ({"blackbox": "yes"}, "params.blackbox", "blackbox must be true or false"),
        ({"blackbox_epochs": 2}, "params.blackbox_epochs", "set `blackbox: true`"),
        ({"blackbox": True, "blackbox_hidden": 0}, "params.blackbox_hidden", "blackbox_hidden must be an integer"),
        ({"blackbox": True, "blackbox_lr": -1}, "params.blackbox_lr", "blackbox_lr must be a finite number"),
        ({"blackbox": True, "blackbox_seed": -1}, "params.blackbox_seed", "blackbox_seed must be an integer"),
    ],
)
def test_cell_validation(tmp_path, params, field, message):
    with pytest.raises(CellError, match=message) as info:
        Cell.from_dict(_cell(tmp_path, **params))
    assert info.value.field == field


def test_the_blackbox_readers_need_their_grant(tmp_path):
    with pytest.raises(CellError, match="drop `blackbox`") as info:
        Cell.from_dict(_cell(tmp_path, blackbox=True) | {"attack": {"threat": {}}})
    assert info.value.field == "attack.threat"
    Cell.from_dict(_cell(tmp_path) | {"attack": {"threat": {}}})  # identity alone needs nothing


# ------------------------------------------------------------------------------------------------ Fig. 4 rows
def _result(directory, name, base, etas, rows):
    metrics = [{m: {"mean": v, "stderr": None, "values": [v]} for m, v in r.items()} for r in rows]
    results = [
        {"point": {"params.eta": e}, "resolved": {"mechanism": None, "params": base | {"eta": e}, "attack": None},
         "metrics": m}
        for e, m in zip(etas, metrics)
    ]  # fmt: skip
    cell = {"name": name, "kind": "substitution_inversion", "dataset": "pri-ddx", "encoder": "default",
            "params": base, "grid": {"params.eta": etas}, "seeds": [0]}  # fmt: skip
    data = {"format": "textfree.results", "format_version": 1, "cell": cell, "cell_source": None,
            "kind": "substitution_inversion", "grid_axes": ["params.eta"], "seeds": [0], "results": results,
            "versions": {}, "git": None, "date": "2026-01-01T00:00:00+00:00", "host": {}}  # fmt: skip
    path = Path(directory) / f"{name}-20260101T000000Z.json"
    path.write_text(json.dumps(data))
    return path


def test_fig4_rows_for_the_blackbox_readers(tmp_path):
    from textfree.rapt.report_privacy import collect_privacy, privacy_figure, privacy_section

    words = [{"word_recovery_identity": 0.1, "word_recovery_channel": 0.2, "word_recovery_prior": 0.6,
              "n_texts": 100.0, "kept_rate": 0.1}, {"word_recovery_identity": 0.5, "word_recovery_channel": 0.6,
              "word_recovery_prior": 0.6, "n_texts": 100.0, "kept_rate": 0.1}]  # fmt: skip
    plain = _result(tmp_path, "sub_t2t", {"eta": 75}, [25, 75], words)
    figures = zip(words, (0.25, 0.65), (0.15, 0.55), (0.003, 0.001), (0.006, 0.002))
    bb = [
        {k: w[k] for k in ("word_recovery_identity", "word_recovery_prior", "n_texts")}
        | {"word_recovery_mlp": m, "word_recovery_autoencoder": a, "mse_autoencoder": mse, "mse_released": raw}
        for w, m, a, mse, raw in figures
    ]
    blackbox = _result(tmp_path, "sub_bb_t2t", {"eta": 75, "blackbox": True}, [25, 75], bb)
    rows, used = collect_privacy([plain, blackbox])
    lines = privacy_section(rows)
    table = [line for line in lines if line.startswith("| word inversion")]
    assert table == [  # the first row unchanged by the new cell (its identity reader recovers less than the channel)
        "| word inversion: read / channel | T2T | Pri-DDX, 100 | 80.0 | 40.0 | 0.0 | 40.0 |",
        "| word inversion: MLP (black box) | T2T | Pri-DDX, 100 | 75.0 | 35.0 | 0.0 | 40.0 |",
        "| word inversion: autoencoder (black box) | T2T | Pri-DDX, 100 | 85.0 | 45.0 | 0.0 | 40.0 |",
    ]
    note = next(line for line in lines if line.startswith("* *word inversion: autoencoder (black box)*"))
    assert "T2T eta 25 0.003 (0.006), eta 75 0.001 (0.002)." in note
    assert {u[1] for u in used} == {"sub_t2t", "sub_bb_t2t"}
    assert privacy_figure(rows, tmp_path / "fig.png") and (tmp_path / "fig.png").stat().st_size > 1000
