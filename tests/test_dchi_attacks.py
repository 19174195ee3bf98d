"""Attack rows for PPFT's word-level d_chi baseline: the T2T release of the attack kinds (``substitution_inversion``,
``attribute_inference`` with ``release: t2t``) with the baseline's ``oov_word`` (every out-of-table word mapped to a
table word before the mechanism, :class:`textfree.experiments.kinds._t2t.FoldedT2T`), and the attack figures beside
the d_chi row of the PPFT report's baselines table."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _result_files import write_result

from textfree.experiments.kinds._attribute_params import _text_params
from textfree.experiments.kinds._t2t import FoldedT2T, check_t2t_params, t2t_guarantee, t2t_mechanism
from textfree.experiments.kinds.substitution_inversion import _mechanism_spec
from textfree.experiments.registry import RunContext
from textfree.results.cell import CellError
from textfree.substitution.text import split_text, words_of

_WORDS = ["the", "of", "a", "has", "history", "male", "and", "symptoms", "is", "unknown"] + [f"w{i}" for i in range(30)]
#: Out-of-table words (a clinical term, punctuation, a number, a made-up word) beside table words.
_TEXTS = [
    "The male has a history of pneumothorax, and 42 symptoms.",
    "Zzqx is the history; unknown symptoms of a male!",
]


def _glove(tmp_path: Path) -> str:
    vectors = torch.randn(len(_WORDS), 5, generator=torch.Generator().manual_seed(0))
    path = tmp_path / "glove.txt"
    path.write_text("".join(f"{w} {' '.join(f'{x:.5f}' for x in v.tolist())}\n" for w, v in zip(_WORDS, vectors)))
    return f"glove:{path}"


def _mech(tmp_path: Path, **params):
    return t2t_mechanism({"eta": 1.0, "table": _glove(tmp_path)} | params, RunContext(cell=None))


@pytest.mark.parametrize("word", [3, "", " unknown", "two words", ["unknown"]])
def test_a_malformed_oov_word_is_refused_naming_the_field(word):
    with pytest.raises(CellError, match="oov_word must be null or one word") as err:
        check_t2t_params({"eta": 1.0, "oov_word": word})
    assert err.value.field == "params.oov_word"


def test_oov_word_is_a_param_of_both_attack_kinds():
    check_t2t_params({"eta": 1.0, "oov_word": "unknown"})
    check_t2t_params({"eta": 1.0, "oov_word": None})
    assert _text_params({"eta": 1.0, "oov_word": "unknown", "k": 4}, "t2t") == {"eta": 1.0, "oov_word": "unknown"}
    # the learned inverter's recorded mechanism says the client folds (a reused run must match it)
    assert _mechanism_spec({"eta": 2.0, "train_etas": None, "oov_word": "unknown"})["oov_word"] == "unknown"
    assert "oov_word" not in _mechanism_spec({"eta": 2.0, "train_etas": None})


def test_an_oov_word_outside_the_table_is_refused_when_the_mechanism_is_built(tmp_path):
    with pytest.raises(CellError, match="not a word of the table") as err:
        _mech(tmp_path, oov_word="pneumothorax")
    assert err.value.field == "params.oov_word"


def test_under_oov_word_no_out_of_table_word_is_ever_sent_as_it_is(tmp_path):
    mech = _mech(tmp_path, oov_word="unknown")
    assert isinstance(mech, FoldedT2T)
    table = set(_WORDS)
    for eta in (1e-3, 1.0, 1e9):  # near-uniform draws ... the nearest word (the input itself)
        m = mech.with_eta(eta)
        assert isinstance(m, FoldedT2T) and m.eta == eta
        released = m.privatize_detailed(_TEXTS, generator=torch.Generator().manual_seed(1))
        assert released.n_kept == 0 and released.n_substituted == released.n_words
        for text, out, words in zip(_TEXTS, released.texts, released.output_words):
            assert all(w.lower() in table for w in words)  # only table words leave the client
            assert len(words) == len(words_of(split_text(text)))  # aligned with the original's words
            assert all(w.lower() in table for w in words_of(split_text(out)))
        assert t2t_guarantee(m, released)["kept_rate"] == 0.0
        assert t2t_guarantee(m, released)["word_epsilon"] == pytest.approx(eta * m.table.diameter())
    # eta 1e9: no noise to speak of, so each out-of-table word comes out as the oov word, each table word as itself
    exact = mech.with_eta(1e9).privatize(_TEXTS[:1], generator=torch.Generator().manual_seed(2))[0]
    assert exact.lower() == "the male has a history of unknown unknown and unknown symptoms unknown"
    # without oov_word the same words are released verbatim (T2T's default), outside the guarantee
    plain = _mech(tmp_path).with_eta(1e9).privatize_detailed(_TEXTS, generator=torch.Generator().manual_seed(2))
    assert "pneumothorax" in plain.texts[0] and plain.n_kept > 0


def test_a_folded_release_feeds_the_channel_inverter_position_by_position(tmp_path):
    from textfree.attacks.substitution import ChannelInverter

    mech = _mech(tmp_path, oov_word="unknown").with_eta(1e9)
    inverter = ChannelInverter.fit(mech, _TEXTS, rounds=2, generator=torch.Generator().manual_seed(0))
    assert inverter.n_pairs == 2 * sum(len(words_of(split_text(t))) for t in _TEXTS)
    assert inverter.invert(["history"]) == ["history"]


# ------------------------------------------------------------------------------------------------ the report row


def _result(directory: Path, name: str, kind: str, dataset: str | None, points: list[dict], rows: list[dict], date):
    write_result(directory, name, kind, {"_dataset": dataset}, points, rows, date)


_TABLE = "glove:t.txt"
_CLIENT = {"table": _TABLE, "oov_word": "unknown"}
_INVERSION = {"rouge_l_best": 0.132, "rouge_l_prior": 0.638, "word_recovery_best": 0.097, "word_recovery_prior": 0.614,
              "n_texts": 100.0}  # fmt: skip
_ATTRIBUTES = {"sex_accuracy_best": 0.55, "sex_accuracy_best_val": 0.9, "sex_accuracy_prior": 0.52,
               "symptoms_recall_best": 0.16, "symptoms_recall_prior": 0.15, "symptoms_f1_best": 0.4,
               "symptoms_f1_prior": 0.3, "n_test": 526.0}  # fmt: skip


def _files(tmp_path: Path, attacks: bool = True) -> tuple[Path, Path]:
    ppft, att = tmp_path / "ppft", tmp_path / "attacks"
    ppft.mkdir()
    att.mkdir()
    qa = {"decoder": "runs/fast/decoder", "dataset": "pri-ddx", "pos": None} | _CLIENT
    _result(ppft, "ppft_ddx_baseline_dchi", "rapt_qa", None, [qa | {"eta": 0.1296}], [
        {"mcqa": 0.77, "open": 0.59, "epsilon_per_word": 2.0, "mean_privatized_words": 51.0, "n_test": 300.0}],
        "2026-01-02T00:00:00+00:00")  # fmt: skip
    _result(ppft, "pipe", "ppft_pipeline", "pri-ddx", [{"out": "runs/fast", "epsilon": 28, "k": 4}],
            [{"acc_mcqa": 0.95, "acc_open": 0.79, "n_heldout": 582.0}], "2026-01-01T00:00:00+00:00")  # fmt: skip
    if attacks:
        _result(att, "substitution_dchi", "substitution_inversion", "pri-ddx",
                [_CLIENT | {"eta": 0.1296}, _CLIENT | {"eta": 1.0}],
                [_INVERSION, _INVERSION | {"rouge_l_best": 0.235}], "2026-01-03T00:00:00+00:00")  # fmt: skip
        _result(
            att,
            "attributes_ddx_dchi",
            "attribute_inference",
            "pri-ddx",
            [_CLIENT | {"release": "t2t", "eta": 0.1296}],
            [_ATTRIBUTES],
            "2026-01-03T00:00:00+00:00",
        )
    # another client (out-of-table words verbatim, another table), newer: never read for this row
    _result(att, "substitution_t2t", "substitution_inversion", "pri-ddx", [{"eta": 0.1296}],
            [_INVERSION | {"rouge_l_best": 0.999}], "2026-01-04T00:00:00+00:00")  # fmt: skip
    _result(att, "attributes_ddx_pct2t", "attribute_inference", "pri-ddx",
            [_CLIENT | {"release": "pct2t", "pos": "default", "eta": 0.1296}],
            [_ATTRIBUTES | {"sex_accuracy_best": 0.999}], "2026-01-04T00:00:00+00:00")  # fmt: skip
    return ppft, att


def _dchi_row(paths: list[Path]) -> str:
    from textfree.ppft.report import build_report

    text = build_report(paths)  # the attack folder among the paths: its kinds are not PPFT entries
    section = text.split("### Pri-DDX: Baselines (Table 1)")[1].split("\n## ")[0]
    return next(line for line in section.splitlines() if line.startswith("| d_chi"))


def test_the_dchi_row_shows_the_attacks_on_its_own_client_at_its_eta(tmp_path):
    row = _dchi_row(list(_files(tmp_path)))
    attacks = row.rsplit(" | ", 1)[1]
    assert attacks == (
        "inversion (`substitution_dchi-2026-01-03.json`, 100 prompts, eta 0.1296): ROUGE-L 0.132 (prior 0.638), "
        "word recovery 0.097 (prior 0.614); at eta 1: ROUGE-L 0.235 (prior 0.638), word recovery 0.097 (prior 0.614); "
        "attributes (best attacker) (`attributes_ddx_dchi-2026-01-03.json`, 526 prompts, eta 0.1296): "
        "sex accuracy 0.550 (prior 0.520), symptoms recall 0.160, F1 0.400 (prior 0.150, F1 0.300) |"
    )
    assert "0.999" not in row


def test_the_dchi_row_says_not_run_without_attack_files_on_its_client(tmp_path):
    row = _dchi_row(list(_files(tmp_path, attacks=False)))
    assert row.endswith("| inversion: not run; attributes (best attacker): not run |")
