"""docs/results/attacks.md from synthetic token_inversion result files: classification, tables, the target verdict.

The verdict is checked against numbers worked out by hand in each test's comments.
"""

import json

import pytest

from textfree.attacks.report import build_report, collect, target_verdict, write_report


def _result_file(
    directory,
    name,
    mechanism,
    axis,
    points,
    *,
    date="2026-01-01T00:00:00+00:00",
    kind="token_inversion",
    attack=None,
    seeds=(0, 1),
):
    """A result file in the runner's format. ``points``: [(axis value, {metric: [value per seed]})]."""
    cell = {
        "name": name,
        "kind": kind,
        "dataset": "pri-ddx",
        "split": "heldout",
        "limit": 40,
        "texts": None,
        "encoder": "default",
        "mechanism": mechanism,
        "params": {},
        "grid": {axis: [x for x, _ in points]},
        "attack": attack or {"threat": {"embedding_table": True}, "beamclean": {"beam_width": 20, "candidates": 1024}},
        "metrics": [],
        "seeds": list(seeds),
        "notes": "",
    }
    results = [
        {
            "point": {axis: x},
            "resolved": {"mechanism": mechanism, "params": {}, "attack": None},
            "metrics": {m: {"mean": sum(v) / len(v), "stderr": None, "values": v} for m, v in metrics.items()},
        }
        for x, metrics in points
    ]
    data = {
        "format": "textfree.results",
        "format_version": 1,
        "cell": cell,
        "cell_source": None,
        "kind": kind,
        "grid_axes": [axis],
        "seeds": list(seeds),
        "results": results,
        "versions": {},
        "git": None,
        "date": date,
        "elapsed_s": 1.0,
        "host": {},
    }
    path = directory / f"{name}-{date[:10]}-{len(list(directory.iterdir()))}.json"
    path.write_text(json.dumps(data))
    return path


def _point(eps, nn, bc, oracle=None, *, cos=None):
    """Per-seed metrics of one point: NN (L2 = best), BeamClean estimated (and oracle)."""
    m = {
        "recovery_nn_l2": nn,
        "recovery_nn_cosine": cos or nn,
        "recovery_nn_best": [max(a, b) for a, b in zip(nn, cos or nn)],
        "recovery_beamclean_estimated": bc,
        "epsilon_unit": [eps] * len(nn),
        "token_epsilon": [2.36 * eps] * len(nn),
        "token_delta": [0.0] * len(nn),
        "noise_norm": [384 / eps] * len(nn),
    }
    if oracle is not None:
        m["recovery_beamclean_oracle"] = oracle
    return (eps, m)


LAPLACE = {"name": "l2_laplace", "epsilon": 50}


def test_verdict_is_computed_from_the_means(tmp_path):
    # eps 200: NN 0.90 (> 0.2, not eligible); eps 50: NN mean 0.15, BeamClean mean 0.30 -> 2.0x (not met);
    # eps 35: NN mean (0.04 + 0.06)/2 = 0.05, BeamClean (0.18 + 0.22)/2 = 0.20 -> 4.0x (met); per seed 4.5x and 3.67x;
    # eps 25: NN 0 in both seeds (excluded: a ratio over nothing).
    path = _result_file(
        tmp_path,
        "lap",
        LAPLACE,
        "mechanism.epsilon",
        [
            _point(200, [0.9, 0.9], [0.95, 0.95]),
            _point(50, [0.14, 0.16], [0.29, 0.31]),
            _point(35, [0.04, 0.06], [0.18, 0.22]),
            _point(25, [0.0, 0.0], [0.01, 0.02]),
        ],
    )
    (curve,) = collect([path])
    v = target_verdict(curve)
    assert [r.x for r in v.rows] == [50, 35]
    assert v.rows[0].ratio == pytest.approx(2.0) and not v.rows[0].met
    assert v.rows[1].ratio == pytest.approx(4.0) and v.rows[1].met
    assert v.rows[1].seed_ratios == pytest.approx([4.5, 0.22 / 0.06])
    assert v.rows[1].met_every_seed
    assert v.met and v.best.x == 35
    assert v.sentence().startswith("**met**: at epsilon 35") and "in every seed" in v.sentence()


def test_verdict_not_met_and_not_in_every_seed(tmp_path):
    # eps 40: NN (0.10 + 0.10)/2 = 0.10, BeamClean (0.20 + 0.40)/2 = 0.30 -> 3.0x: met (>= 3), but seed 0 is 2.0x.
    met = _result_file(tmp_path, "a", LAPLACE, "mechanism.epsilon", [_point(40, [0.10, 0.10], [0.20, 0.40])])
    # eps 40: NN 0.10, BeamClean 0.29 -> 2.9x: not met.
    not_met = _result_file(tmp_path, "b", LAPLACE, "mechanism.epsilon", [_point(40, [0.10, 0.10], [0.29, 0.29])])
    (a,), (b,) = collect([met]), collect([not_met])
    va, vb = target_verdict(a), target_verdict(b)
    assert va.met and not va.rows[0].met_every_seed and "not in every seed" in va.sentence()
    assert not vb.met and vb.sentence().startswith("**not met**") and "2.90x" in vb.sentence()


def test_verdict_cannot_be_judged_without_the_attacks_or_a_qualifying_point(tmp_path):
    no_bc = _result_file(
        tmp_path,
        "nn_only",
        LAPLACE,
        "mechanism.epsilon",
        [(50, {"recovery_nn_l2": [0.1, 0.1], "recovery_nn_best": [0.1, 0.1]})],
    )
    high = _result_file(tmp_path, "high", LAPLACE, "mechanism.epsilon", [_point(100, [0.8, 0.9], [0.9, 0.9])])
    by_name = {c.name: target_verdict(c) for c in collect([tmp_path])}
    assert "no BeamClean with estimated noise" in by_name["nn_only"].reason
    assert "no grid point" in by_name["high"].reason and not by_name["high"].met
    text = build_report([no_bc, high])
    assert "cannot be judged" in text and "BeamClean run): **cannot be judged**" in text


def test_classification_newest_file_wins_other_kinds_are_skipped(tmp_path):
    _result_file(
        tmp_path,
        "lap",
        LAPLACE,
        "mechanism.epsilon",
        [_point(50, [0.5, 0.5], [0.6, 0.6])],
        date="2026-01-01T00:00:00+00:00",
    )
    _result_file(
        tmp_path,
        "lap",
        LAPLACE,
        "mechanism.epsilon",
        [_point(50, [0.1, 0.1], [0.4, 0.4])],
        date="2026-02-01T00:00:00+00:00",
    )
    _result_file(
        tmp_path,
        "gauss",
        {"name": "gaussian", "sigma": 0.3, "delta": 1e-5},
        "mechanism.sigma",
        [_point(16.1, [0.1, 0.1], [0.2, 0.2], [0.25, 0.25])],
    )
    _result_file(
        tmp_path,
        "clip",
        {"name": "clipped", "inner": {"name": "l2_laplace", "epsilon": 50}, "max_norm": 1.69},
        "mechanism.inner.epsilon",
        [_point(50, [0.02, 0.02], [0.1, 0.1], cos=[0.3, 0.3])],
    )
    _result_file(
        tmp_path,
        "indomain",
        LAPLACE,
        "mechanism.epsilon",
        [_point(50, [0.1, 0.1], [0.5, 0.5])],
        attack={"threat": {}, "prior": {"kind": "bigram", "training_text": "in_domain"}},
    )
    _result_file(tmp_path, "other", LAPLACE, "mechanism.epsilon", [(50, {"cosine": [0.5, 0.5]})], kind="privatization")
    curves = {c.name: c for c in collect([tmp_path])}
    assert sorted(curves) == ["clip", "gauss", "indomain", "lap"]
    assert curves["indomain"].title == "L2-Laplace, in-domain prior" and curves["lap"].title == "L2-Laplace"
    assert curves["lap"].points[0].mean("recovery_nn_best") == pytest.approx(0.1)  # the February file
    assert (curves["gauss"].family, curves["gauss"].title, curves["gauss"].axis_label) == (
        "gaussian",
        "Gaussian",
        "sigma",
    )
    assert curves["clip"].family == "clipped l2_laplace" and curves["clip"].title == "L2-Laplace, clipped to 1.69"
    gv = target_verdict(curves["gauss"])  # NN 0.1, BeamClean 0.2: 2x; the axis is sigma, so eps is named too
    assert not gv.met and "at sigma 16.1 (eps per unit distance 16.1) NN recovers 10.0%" in gv.sentence()
    # clipped: cosine (0.3) is the stronger NN, BeamClean 0.1 / 0.3 = 0.33x
    assert not target_verdict(curves["clip"]).rows  # NN best 0.3 > 0.2: no qualifying point


def test_report_tables_keep_estimated_and_oracle_apart(tmp_path):
    # eps 50: NN 0.10, BeamClean est 0.35 (3.5x), oracle 0.40 (4.0x); sd over seeds 0.30/0.40 -> 7.1 points
    path = _result_file(
        tmp_path,
        "lap",
        LAPLACE,
        "mechanism.epsilon",
        [_point(50, [0.1, 0.1], [0.30, 0.40], [0.40, 0.40]), _point(200, [1.0, 1.0], [1.0, 1.0], [1.0, 1.0])],
    )
    out = write_report([path], tmp_path / "docs" / "attacks.md")
    text = out.read_text()
    assert (
        "| epsilon | eps / unit distance | token eps (diameter) | noise norm | NN L2 | NN cosine | BeamClean, "
        "estimated noise | BeamClean, oracle noise |" in text
    )
    assert "| 50 | 50 | 118 | 7.68 | 10.0 ± 0.0 | 10.0 ± 0.0 | 35.0 ± 7.1 | 40.0 ± 0.0 | 3.50x | 4.00x |" in text
    assert "BeamClean run): **met**" in text and "do not edit by hand" in text
    assert (tmp_path / "docs" / "attacks" / "token_inversion.png").stat().st_size > 1000
    assert "![token_inversion](attacks/token_inversion.png)" in text


def test_cli_report(tmp_path):
    from typer.testing import CliRunner

    from textfree.cli import app

    path = _result_file(tmp_path, "lap", LAPLACE, "mechanism.epsilon", [_point(35, [0.05, 0.05], [0.2, 0.2])])
    res = CliRunner().invoke(app, ["attacks", "report", str(path), "--out", str(tmp_path / "r.md")])
    assert res.exit_code == 0, res.output
    assert "**met**: at epsilon 35" in (tmp_path / "r.md").read_text()
    res = CliRunner().invoke(
        app, ["attacks", "report", str(tmp_path / "missing.json"), "--out", str(tmp_path / "r.md")]
    )
    assert res.exit_code == 2


def _cli(*args):
    from typer.testing import CliRunner

    from textfree.cli import app

    return CliRunner().invoke(app, ["attacks", "report", *map(str, args)])


def _one_error_line(res, fragment):
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert res.exit_code == 2 and len(errors) == 1 and fragment in errors[0], res.output
    assert "Traceback" not in res.output


def test_cli_report_refuses_paths_without_attack_results_and_writes_nothing(tmp_path):
    out = tmp_path / "attacks.md"
    out.write_text("the report of an earlier run\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    _one_error_line(_cli(empty, "--out", out), "no attack result files in")
    # a parent of the results: only *.json directly inside a directory is read
    nested = tmp_path / "results" / "attacks"
    nested.mkdir(parents=True)
    _result_file(nested, "lap", LAPLACE, "mechanism.epsilon", [_point(35, [0.05, 0.05], [0.2, 0.2])])
    _one_error_line(_cli(tmp_path / "results", "--out", out), "no attack result files in")
    # a result file of a kind the report does not read
    other = _result_file(
        tmp_path, "priv", LAPLACE, "mechanism.epsilon", [_point(35, [0.05, 0.05], [0.2, 0.2])], kind="privatization"
    )
    _one_error_line(_cli(other, "--out", out), "no attack result files in")
    assert out.read_text() == "the report of an earlier run\n"
    assert not (tmp_path / "attacks").exists()  # no figures either
    res = _cli(nested, "--out", out)
    assert res.exit_code == 0 and "**met**" in out.read_text(), res.output


def test_cli_report_out_that_cannot_be_a_file_is_one_error_line(tmp_path):
    path = _result_file(tmp_path, "lap", LAPLACE, "mechanism.epsilon", [_point(35, [0.05, 0.05], [0.2, 0.2])])
    _one_error_line(_cli(path, "--out", tmp_path), "is a directory")
    afile = tmp_path / "afile"
    afile.write_text("x")
    _one_error_line(_cli(path, "--out", afile / "r.md"), "is a file, not a directory")
    _one_error_line(_cli(path, "--out", afile / "sub" / "r.md"), "is a file, not a directory")
    _one_error_line(_cli(path, "--out", tmp_path / "afile.md"), "its figures folder")  # <out stem>/ is the file
    assert afile.read_text() == "x" and not (tmp_path / "afile.md").exists()


# ------------------------------------------------------------------------------------ PPFT-payload sections
def _payload_file(directory, name, kind, params, points, *, mechanism=None, seeds=(0, 1), axis=None):
    axis = axis or ("params.epsilon" if mechanism is None else "mechanism.epsilon")
    path = _result_file(directory, name, mechanism, axis, points, kind=kind, attack={"threat": {}}, seeds=seeds)
    data = json.loads(path.read_text())
    data["cell"]["params"] = params
    path.write_text(json.dumps(data))
    return path


def test_attribute_and_inversion_sections(tmp_path):
    attr = {"slot_epsilon": [150.0], "prompt_epsilon": [2250.0]}
    for m, best in (("sex_accuracy", 0.97), ("symptoms_recall", 0.5)):
        attr |= {
            f"{m}_{v}": [best - d]
            for v, d in (("mean_unaware", 0.1), ("mean_aware", 0.0), ("slots_unaware", 0.2), ("slots_aware", 0.05))
        }
        attr |= {
            f"{m}_best": [best],
            f"{m}_prior": [0.5],
            f"{m}_label": [0.9 if m == "symptoms_recall" else 0.55],
            f"{m}_excess": [best - (0.9 if m == "symptoms_recall" else 0.55)],
        }
    attr["sex_accuracy_length"] = [0.6]  # symptoms: a cell from before the length reference (shown as –)
    _payload_file(tmp_path, "attr", "attribute_inference", {"k": 4}, [(75, attr)], mechanism=LAPLACE, seeds=(0,))
    inv = lambda r: {
        "rouge_l": r,
        "bleu": [0.0, 0.0],
        "slot_epsilon": [150.0] * 2,
        "prompt_epsilon": [2250.0] * 2,  # noqa: E731
        "n_eval": [100.0] * 2,
        "symptoms_recall_text": [0.1, 0.2],
    }
    _payload_file(
        tmp_path,
        "inv_u",
        "learned_inversion",
        {"variant": "unaware", "k": 4, "init": {"encoder": "e", "decoder": "d"}},
        [(75, inv([0.20, 0.22])), (None, inv([0.9, 0.9]))],
    )
    _payload_file(
        tmp_path,
        "inv_a",
        "learned_inversion",
        {"variant": "aware", "k": 4, "init": "runs/stage1"},
        [(75, inv([0.3, 0.5]))],
    )
    text = build_report([tmp_path])
    # attribute table: the best (97.0) and the excess over the larger reference (97 - 55 = 42.0) of sex; symptoms below
    # label
    assert (
        "| 75 | 4 | 150 | 2250 | sex (accuracy) | 50.0 | – | 55.0 | 60.0 | 87.0 | 97.0 | 77.0 | 92.0 | **97.0** "
        "| **42.0** |" in text
    )
    assert "| symptoms recall | 50.0 | – | 90.0 | – |" in text and "**-40.0** |" in text
    # inversion: mean ± sd over seeds; the unaware target 0.21 < 0.25 is met; clean payloads say so
    assert (
        "| `inv_u` | learned, noise-unaware | 75 | 4 | 150 | 2250 | 0.210 ± 0.014 | – | – |" in text
    )  # no reference: no gain
    assert "| `inv_u` | learned, noise-unaware | clean |" in text
    assert (
        "ROUGE-L < 0.25 at eps 75, k 4, on pri-ddx, attacker's text in-domain (Pri-* train part): 0.210 "
        "(the same inverter on clean payloads: 0.900), **met**"
    ) in text
    assert (
        "learned, noise-aware, stage-1-aligned init at eps 75, k 4, on pri-ddx, attacker's text in-domain (Pri-* train "
        "part): ROUGE-L 0.400 (PPFT reports 0.4397" in text
    )
    assert "Free text with PII units" not in text


def test_attribute_learning_curve_rows_name_their_training_rows(tmp_path):
    path = _payload_file(
        tmp_path,
        "curve",
        "attribute_inference",
        {"target": "answer", "k": 4},
        [(28, {}), (28, {})],
        mechanism=LAPLACE,
        seeds=(0,),
    )
    data = json.loads(path.read_text())
    data["cell"]["grid"] = {"mechanism.epsilon": [28], "params.train_limit": [97, 387]}
    data["grid_axes"] = ["mechanism.epsilon", "params.train_limit"]
    for r, (rows, best) in zip(data["results"], ((97, 0.12), (387, 0.23))):
        r["point"]["params.train_limit"] = rows
        r["metrics"] = {
            n: {"mean": v, "stderr": None, "values": [v]}
            for n, v in (
                ("answer_accuracy_best", best),
                ("answer_accuracy_prior", 0.09),
                ("answer_accuracy_excess", best - 0.09),
                ("slot_epsilon", 56.0),
                ("prompt_epsilon", 1706.0),
            )
        }
    path.write_text(json.dumps(data))
    text = build_report([tmp_path])
    assert "| eps | k | training rows | slot eps | prompt eps (mean) | attribute |" in text
    assert "| 28 | 4 | 97 | 56 | 1706 |" in text and "| 28 | 4 | 387 | 56 | 1706 |" in text
    assert "**12.0**" in text and "**23.0**" in text


def test_inversion_of_free_text_has_its_own_table_with_pii(tmp_path):
    inv = lambda r: {
        "rouge_l": r,
        "rouge_l_prior": [0.05] * 2,
        "bleu": [0.0, 0.0],
        "slot_epsilon": [150.0] * 2,  # noqa: E731
        "prompt_epsilon": [3000.0] * 2,
        "n_eval": [100.0] * 2,
        "pii_exact": [0.1, 0.3],
        "pii_fuzzy": [0.4, 0.4],
        "pii_exact_prior": [0.0, 0.0],
        "n_pii_units": [120.0] * 2,
    }
    path = _payload_file(
        tmp_path,
        "inv_pupa",
        "learned_inversion",
        {
            "variant": "unaware",
            "k": 4,
            "init": {"encoder": "e", "decoder": "d"},
            "train_text": ["alpaca", "gsm8k:train"],
        },
        [(75, inv([0.30, 0.32]))],
    )
    data = json.loads(path.read_text())
    data["cell"]["dataset"] = "pupa"
    path.write_text(json.dumps(data))
    text = build_report([tmp_path])
    # gain over the no-input reference: (0.31 - 0.05) / (1 - 0.05) = 0.2737
    assert (
        "| `inv_pupa` | learned, noise-unaware | public: alpaca, gsm8k:train | 75 | 4 | 150 | 3000 | 0.310 ± 0.014 | "
        "0.050 | "
        "+0.274 | 0.000 | 20.0 ± 14.1 | 40.0 | 0.0 | 120 | 100 |"
    ) in text
    assert (
        "ROUGE-L < 0.25 at eps 75, k 4, on pupa, attacker's text public: alpaca, gsm8k:train: 0.310 (no-input "
        "reference 0.050) "
        "(gain over the no-input reference +0.274), **NOT met**"
    ) in text
    assert "pooled PPFT slots" not in text  # the cross matrix compares mechanisms on Pri-DDX prompts only


def test_cross_matrix_rows_columns_and_na(tmp_path):
    _result_file(
        tmp_path,
        "lap",
        LAPLACE,
        "mechanism.epsilon",
        [_point(50, [0.14, 0.16], [0.29, 0.31]), _point(35, [0.04, 0.06], [0.18, 0.22])],
    )
    sub = lambda ident, chan: {
        "word_recovery_identity": ident,
        "word_recovery_channel": chan,
        "word_epsilon": [117.0] * 2,
    }  # noqa: E731
    _payload_file(tmp_path, "pct", "substitution_inversion", {"pos": "default"}, [(50, sub([0.2, 0.2], [0.3, 0.3]))])
    _payload_file(
        tmp_path,
        "rest",
        "learned_inversion",
        {"variant": "restoration", "k": 4},
        [(75, {"rouge_l": [0.01, 0.03], "slot_epsilon": [150.0] * 2}), (None, {"rouge_l": [0.5, 0.5]})],
    )
    text = build_report([tmp_path])
    header = next(line for line in text.splitlines() if line.startswith("| attack \\ mechanism"))
    assert header == "| attack \\ mechanism | token noise, L2-Laplace | pooled PPFT slots (k = 4) | PCT2T text |"
    nn = next(line for line in text.splitlines() if line.startswith("| NN (L2) (%)"))
    # NN means 15% and 5% at token eps 2.36 x 50 = 118 and 2.36 x 35 = 82.6; text and pooled rows are n/a
    assert nn == (
        "| NN (L2) (%) | 5.0%–15.0% (unit eps 82.6–118) | n/a (slots are pooled, not token rows) | "
        "n/a (the attacker sees words, not vectors) |"
    )
    channel = next(line for line in text.splitlines() if line.startswith("| channel inverter"))
    assert channel.endswith("| 30.0% (unit eps 117) |")
    restoration = next(line for line in text.splitlines() if line.startswith("| restoration instruction"))
    assert "| 0.020 (unit eps 150) |" in restoration  # the clean-payload point (no mechanism) is left out
    out = write_report([tmp_path], tmp_path / "docs" / "attacks.md")
    assert (
        out.parent / "attacks" / "cross_matrix.png"
    ).is_file() and "![cross matrix](attacks/cross_matrix.png)" in out.read_text()


def _attr(best: float, prior: float, unit: str, eps: float) -> dict:
    """Per-seed metrics of one attribute_inference point: sex accuracy of the four attackers, references, guarantee."""
    m = {
        f"sex_accuracy_{v}": [best - d]
        for v, d in (("mean_unaware", 0.1), ("mean_aware", 0.0), ("slots_unaware", 0.2), ("slots_aware", 0.05))
    }
    return m | {
        "sex_accuracy_best": [best],
        "sex_accuracy_prior": [prior],
        "sex_accuracy_label": [prior + 0.02],
        "sex_accuracy_excess": [best - prior - 0.02],
        unit: [eps],
        "prompt_epsilon": [eps * 60],
    }


def test_attributes_of_token_noise_and_t2t_text_in_their_section_and_the_matrix(tmp_path):
    gauss = {"name": "gaussian", "sigma": 0.3, "delta": 1e-5}
    # token inversion on Gaussian noise: the row exists already; attribute inference joins it by the mechanism label
    _result_file(tmp_path, "gauss", gauss, "mechanism.sigma", [_point(38.1, [0.3, 0.3], [0.4, 0.4])])
    _payload_file(
        tmp_path,
        "attr_tok",
        "attribute_inference",
        {"release": "tokens", "max_tokens": 128},
        [(0.3, _attr(0.9, 0.54, "token_epsilon", 38.1)), (0.8, _attr(0.6, 0.54, "token_epsilon", 14.3))],
        mechanism=gauss,
        seeds=(0,),
        axis="mechanism.sigma",
    )
    # clipped token noise with no token_inversion cell: a row of its own, labelled as token_inversion would label it
    clipped = {"name": "clipped", "max_norm": 1.694, "inner": LAPLACE}
    _payload_file(
        tmp_path,
        "attr_clip",
        "attribute_inference",
        {"release": "tokens"},
        [(50, _attr(0.7, 0.54, "token_epsilon", 118.0))],
        mechanism=clipped,
        seeds=(0,),
        axis="mechanism.inner.epsilon",
    )
    _payload_file(
        tmp_path,
        "attr_t2t",
        "attribute_inference",
        {"release": "t2t", "eta": 75},
        [(25, _attr(0.55, 0.54, "word_epsilon", 58.5)), (150, _attr(0.99, 0.54, "word_epsilon", 351.0))],
        seeds=(0,),
        axis="params.eta",
    )
    _payload_file(
        tmp_path,
        "attr_pct2t",
        "attribute_inference",
        {"release": "pct2t", "eta": 75, "pos": "default"},
        [(75, _attr(0.8, 0.54, "word_epsilon", 175.5))],
        seeds=(0,),
        axis="params.eta",
    )
    _payload_file(
        tmp_path,
        "attr_slots",
        "attribute_inference",
        {"k": 4},
        [(75, _attr(0.97, 0.54, "slot_epsilon", 150.0))],
        mechanism=LAPLACE,
        seeds=(0,),
    )
    lines = build_report([tmp_path]).splitlines()
    # the section names each cell's release and puts the release's own unit eps beside the figures
    assert "### `attr_tok` (pri-ddx, encoder `default`; release: token noise, Gaussian, max 128 tokens)" in lines
    assert "### `attr_t2t` (pri-ddx, encoder `default`; release: T2T text)" in lines
    assert "### `attr_pct2t` (pri-ddx, encoder `default`; release: PCT2T text (default))" in lines
    assert "### `attr_slots` (pri-ddx, encoder `default`; release: PPFT slots)" in lines
    assert any(
        line.startswith("| sigma | token eps | prompt eps (mean) | attribute | prior | clean text | label |")
        for line in lines
    )
    assert any(
        line.startswith("| eta | word eps | prompt eps (mean) | attribute | prior | clean text | label |")
        for line in lines
    )
    assert (
        "| 0.3 | 38.1 | 2286 | sex (accuracy) | 54.0 | – | 56.0 | – | 80.0 | 90.0 | 70.0 | 85.0 | **90.0** | **34.0** |"
        in lines
    )
    assert "| 25 | 58.5 | 3510 | sex (accuracy) | 54.0 | – | 56.0 |" in " ".join(lines)
    header = next(line for line in lines if line.startswith("| attack \\ mechanism"))
    assert header == (
        "| attack \\ mechanism | token noise, Gaussian | clipped token noise (l2_laplace, C = 1.694) | "
        "pooled PPFT slots (k = 4) | T2T text | PCT2T text |"
    )
    sex = next(line for line in lines if line.startswith("| attributes: sex (best)"))
    # each on its row's unit-eps axis: token eps (Gaussian 14.3-38.1), word eps (T2T 58.5-351), slot eps (150)
    assert sex == (
        "| attributes: sex (best) (%) | 60.0%–90.0% (unit eps 14.3–38.1) | 70.0% (unit eps 118) | "
        "97.0% (unit eps 150) | 55.0%–99.0% (unit eps 58.5–351) | 80.0% (unit eps 176) |"
    )
    assert "not run" not in sex
    nn = next(line for line in lines if line.startswith("| NN (L2) (%)"))
    # the token_inversion cell's own point (token eps 2.36 x 38.1 = 89.9); the clipped row has attributes only
    assert nn.startswith("| NN (L2) (%) | 30.0% (unit eps 89.9) | not measured |")


def test_overall_verdict_counts_only_the_targets_cells(tmp_path):
    # a met Pri-DDX L2-Laplace cell and a not-met clipped one: the clipped cell is listed but does not decide
    _result_file(tmp_path, "lap", LAPLACE, "mechanism.epsilon", [_point(35, [0.04, 0.06], [0.18, 0.22])])
    clipped = {"name": "clipped", "max_norm": 1.7, "inner": LAPLACE}
    _result_file(tmp_path, "clip", clipped, "mechanism.inner.epsilon", [_point(50, [0.10, 0.12], [0.0, 0.01])])
    text = build_report([tmp_path])
    assert "clipped to 1.7 (`clip`): **not met**" in text
    assert "BeamClean run): **met**." in text


def test_two_surrogate_families_on_one_mechanism_the_matrix_keeps_the_stronger(tmp_path):
    clipped = {"name": "clipped", "max_norm": 1.7, "inner": LAPLACE}
    _result_file(
        tmp_path,
        "clip",
        clipped,
        "mechanism.inner.epsilon",
        [_point(50, [0.0, 0.0], [0.0, 0.02]), _point(75, [0.2, 0.2], [0.1, 0.1])],
    )
    vmf_attack = {
        "threat": {"embedding_table": True},
        "beamclean": {"beam_width": 20, "candidates": 1024, "family": "vmf"},
    }
    _result_file(
        tmp_path,
        "clip_vmf",
        clipped,
        "mechanism.inner.epsilon",
        [_point(50, [0.0, 0.0], [0.3, 0.5])],
        attack=vmf_attack,
    )
    text = build_report([tmp_path])
    assert "### L2-Laplace, clipped to 1.7, BeamClean von Mises-Fisher (direction-only) surrogate (`clip_vmf`)" in text
    assert "### L2-Laplace, clipped to 1.7 (`clip`)" in text
    bc = next(line for line in text.splitlines() if line.startswith("| BeamClean (estimated noise) (%)"))
    # at token eps 2.36 x 50 = 118: 1.0% (L2-Laplace surrogate) and 40.0% (vMF) -> 40.0%; at 177: 10.0% (one cell)
    assert bc == "| BeamClean (estimated noise) (%) | 10.0%–40.0% (unit eps 118–177) |"


def test_substitution_section(tmp_path):
    m = {
        "word_epsilon": [117.0] * 2,
        "prompt_epsilon": [5000.0] * 2,
        "replacement_rate": [0.8, 0.9],
        "kept_rate": [0.1, 0.1],
        "word_recovery_identity": [0.2, 0.2],
        "word_recovery_channel": [0.3, 0.4],
        "rouge_l_identity": [0.2, 0.2],
        "rouge_l_channel": [0.4, 0.4],
    }
    _payload_file(tmp_path, "t2t", "substitution_inversion", {"pos": None}, [(50, m)], axis="params.eta")
    text = build_report([tmp_path])
    assert "### `t2t` (T2T)" in text
    assert "| 50 | 117 | 5000 | 85.0 ± 7.1 | 10.0 | 20.0 | 35.0 ± 7.1 | 0.200 | 0.400 |" in text


def test_learned_reader_of_t2t_text_in_its_section_and_the_matrix(tmp_path):
    m = {
        "word_epsilon": [117.0] * 2,
        "prompt_epsilon": [5000.0] * 2,
        "replacement_rate": [0.8, 0.8],
        "kept_rate": [0.1, 0.1],
        "word_recovery_identity": [0.2, 0.2],
        "word_recovery_channel": [0.3, 0.3],
        "word_recovery_learned": [0.5, 0.7],
        "word_recovery_prior": [0.4, 0.4],
        "rouge_l_identity": [0.2, 0.2],
        "rouge_l_channel": [0.4, 0.4],
        "rouge_l_learned": [0.6, 0.6],
        "rouge_l_prior": [0.5, 0.5],
    }
    _payload_file(tmp_path, "t2t", "substitution_inversion", {"pos": None}, [(50, m)], axis="params.eta")
    lines = build_report([tmp_path]).splitlines()
    header = next(line for line in lines if line.startswith("| eta | word eps"))
    assert header == (
        "| eta | word eps | prompt eps (mean) | replaced | kept | recovery, identity | recovery, channel | "
        "recovery, learned | recovery, no input | ROUGE-L, identity | ROUGE-L, channel | ROUGE-L, learned | "
        "ROUGE-L, no input |"
    )
    assert (
        "| 50 | 117 | 5000 | 80.0 | 10.0 | 20.0 | 30.0 | 60.0 ± 14.1 | 40.0 | 0.200 | 0.400 | 0.600 | 0.500 |" in lines
    )
    aware = next(line for line in lines if line.startswith("| learned inverter, aware"))
    assert aware == "| learned inverter, aware (ROUGE-L) | 0.600 (unit eps 117) |"
    unaware = next(line for line in lines if line.startswith("| learned inverter, unaware"))
    assert "n/a (trained on clean text it learns the identity: read the text)" in unaware


def test_padded_slots_are_their_own_cross_matrix_row(tmp_path):
    _payload_file(
        tmp_path,
        "rest",
        "learned_inversion",
        {"variant": "restoration", "k": 4},
        [(75, {"rouge_l": [0.01, 0.03], "slot_epsilon": [150.0] * 2})],
    )
    _payload_file(
        tmp_path,
        "rest_fixed",
        "learned_inversion",
        {"variant": "restoration", "k": 4},
        [(28, {"rouge_l": [0.05, 0.07], "slot_epsilon": [56.0] * 2, "padded_slots": [24.0] * 2})],
    )
    _payload_file(
        tmp_path,
        "attr",
        "attribute_inference",
        {"k": 4},
        [(75, _attr(0.97, 0.5, "slot_epsilon", 150.0))],
        mechanism=LAPLACE,
        seeds=(0,),
    )
    _payload_file(
        tmp_path,
        "attr_fixed",
        "attribute_inference",
        {"k": 4, "pad_to": 24},
        [(28, _attr(0.67, 0.5, "slot_epsilon", 56.0))],
        mechanism=LAPLACE,
        seeds=(0,),
    )
    text = build_report([tmp_path])
    header = next(line for line in text.splitlines() if line.startswith("| attack \\ mechanism"))
    assert (
        header == "| attack \\ mechanism | pooled PPFT slots (k = 4) | pooled slots padded to a fixed count (k = 4) |"
    )
    restoration = next(line for line in text.splitlines() if line.startswith("| restoration instruction"))
    assert restoration == "| restoration instruction (ROUGE-L) | 0.020 (unit eps 150) | 0.060 (unit eps 56) |"
    sex = next(line for line in text.splitlines() if line.startswith("| attributes: sex (best)"))
    assert sex == "| attributes: sex (best) (%) | 97.0% (unit eps 150) | 67.0% (unit eps 56) |"
    assert "release: PPFT slots, padded to 24 slots (count hidden))" in text  # attackers as before: nothing more said
    # the inversion table names the padding too; the unpadded restoration row does not
    assert "| `rest_fixed` | restoration instruction (served PPFT model), payloads padded to 24 slots | 28 |" in text
    assert "| `rest` | restoration instruction (served PPFT model) | 75 |" in text


def test_centred_slots_get_a_client_column_and_stay_out_of_the_matrix_ppft_row(tmp_path):
    path = _payload_file(
        tmp_path, "attr_center", "attribute_inference", {"k": 4}, [(28, {}), (28, {})], mechanism=LAPLACE, seeds=(0,)
    )
    data = json.loads(path.read_text())
    data["cell"]["grid"] = {"params.center": [None, "runs/ppft/x-center1", "runs/ppft/x-sub"]}
    data["grid_axes"] = ["params.center"]
    data["results"].append(json.loads(json.dumps(data["results"][1])))
    for r, (center, sex, rank) in zip(
        data["results"], ((None, 0.60, None), ("runs/ppft/x-center1", 0.80, 0), ("runs/ppft/x-sub", 0.90, 39))
    ):
        r["point"] = {"params.center": center}
        r["metrics"] = {
            n: {"mean": v[0], "stderr": None, "values": v} for n, v in _attr(sex, 0.5, "slot_epsilon", 56.0).items()
        }
        if rank is not None:
            r["metrics"]["subspace_rank"] = {"mean": rank, "stderr": None, "values": [rank]}
    path.write_text(json.dumps(data))
    text = build_report([tmp_path])
    assert "| eps | k | client | slot eps | prompt eps (mean) | attribute |" in text
    assert "| 50 | 4 | PPFT (as encoded) | 56 |" in text and "| 50 | 4 | slots centred | 56 |" in text
    assert "| 50 | 4 | slots centred, class subspace (m 39) | 56 |" in text
    # the cross matrix's PPFT row takes only the uncentred point (60%), not the centring client's (80%)
    sex = next(line for line in text.splitlines() if line.startswith("| attributes: sex (best)"))
    assert sex == "| attributes: sex (best) (%) | 60.0% (unit eps 56) |"


def test_inversion_on_centred_slots_is_labelled_and_stays_out_of_the_matrix_and_the_target(tmp_path):
    inv = lambda r, c: {"rouge_l": [r], "slot_epsilon": [150.0], "prompt_epsilon": [2250.0], "centred": [c]}  # noqa: E731
    _payload_file(
        tmp_path,
        "slots_u",
        "learned_inversion",
        {"variant": "unaware", "inverter": "slot_tokens", "k": 4},
        [(75, inv(0.30, 0.0))],
        seeds=(0,),
    )
    _payload_file(
        tmp_path,
        "slots_c",
        "learned_inversion",
        {"variant": "unaware", "inverter": "slot_tokens", "k": 4},
        [(75, inv(0.10, 1.0))],
        seeds=(0,),
    )
    lines = build_report([tmp_path]).splitlines()
    assert any(
        l.startswith(
            "| `slots_c` | slot-token classifier (no decoder), noise-unaware, slots centred by the client | 75 |"
        )
        for l in lines
    )
    assert any(l.startswith("| `slots_u` | slot-token classifier (no decoder), noise-unaware | 75 |") for l in lines)
    # the target is judged on PPFT's client only: one verdict line, the uncentred 0.300 (not met)
    targets = [l for l in lines if l.startswith("* Target (issue 4): slot-token classifier")]
    assert len(targets) == 1 and ": 0.300" in targets[0] and "**NOT met**" in targets[0]
    row = next(l for l in lines if l.startswith("| slot-token classifier (ROUGE-L)"))
    assert row == "| slot-token classifier (ROUGE-L) | 0.300 (unit eps 150) |"


def test_a_decoder_inverter_names_what_it_started_from_per_grid_point(tmp_path):
    """init_stage, recorded per point, names the init of a grid over params.init (the served stage-2 model here); a
    result from before init_stage keeps the cell's own reading (a string init: stage-1-aligned)."""
    inv = lambda r, stage, c: {
        "rouge_l": [r],
        "slot_epsilon": [56.0],
        "prompt_epsilon": [840.0],
        "centred": [c],  # noqa: E731
        "init_stage": [stage],
    }
    _payload_file(
        tmp_path,
        "served",
        "learned_inversion",
        {"variant": "aware", "k": 4, "epsilon": 28},
        [("runs/ppft/a", inv(0.40, 2.0, 0.0)), ("runs/ppft/a-center1", inv(0.45, 2.0, 1.0))],
        axis="params.init",
        seeds=(0,),
    )
    _payload_file(
        tmp_path,
        "aligned",
        "learned_inversion",
        {"variant": "aware", "k": 4, "epsilon": 28},
        [("runs/stage1", inv(0.30, 1.0, 0.0))],
        axis="params.init",
        seeds=(0,),
    )
    old = {"rouge_l": [0.2], "slot_epsilon": [56.0], "prompt_epsilon": [840.0]}
    _payload_file(
        tmp_path,
        "old",
        "learned_inversion",
        {"variant": "aware", "k": 4, "init": "runs/stage1"},
        [(28, old)],
        seeds=(0,),
    )
    lines = build_report([tmp_path]).splitlines()
    rows = {l.split(" | ")[0] + " | " + l.split(" | ")[1] for l in lines if l.startswith("| `")}
    assert "| `served` | learned, noise-aware, init from the served stage-2 model" in rows
    assert "| `served` | learned, noise-aware, init from the served stage-2 model, slots centred by the client" in rows
    assert "| `aligned` | learned, noise-aware, stage-1-aligned init" in rows
    assert "| `old` | learned, noise-aware, stage-1-aligned init" in rows


def test_a_cell_whose_attackers_standardise_says_so_in_its_heading(tmp_path):
    _payload_file(
        tmp_path,
        "attr_std",
        "attribute_inference",
        {"k": 4, "standardize": True},
        [(28, _attr(0.67, 0.5, "slot_epsilon", 56.0))],
        mechanism=LAPLACE,
        seeds=(0,),
    )
    assert (
        "### `attr_std` (pri-ddx, encoder `default`; release: PPFT slots; attackers read the pooled vector "
        "standardised)" in build_report([tmp_path]).splitlines()
    )


def test_a_cell_whose_attackers_are_linear_says_so_in_its_heading(tmp_path):
    _payload_file(
        tmp_path,
        "attr_lin",
        "attribute_inference",
        {"k": 4, "standardize": True, "hidden": 0},
        [(28, _attr(0.67, 0.5, "slot_epsilon", 56.0))],
        mechanism=LAPLACE,
        seeds=(0,),
    )
    assert (
        "### `attr_lin` (pri-ddx, encoder `default`; release: PPFT slots; attackers read the pooled vector "
        "standardised;"
        " linear attackers (no hidden layer))" in build_report([tmp_path]).splitlines()
    )


def test_payload_result_files_name_the_stage1_builds_their_points_read(tmp_path):
    inv = {"rouge_l": [0.3], "slot_epsilon": [150.0], "prompt_epsilon": [2250.0], "n_eval": [10.0]}
    one = _payload_file(
        tmp_path,
        "inv_one",
        "learned_inversion",
        {"variant": "aware", "k": 4, "init": "runs/stage1"},
        [(75, inv), (28, inv)],
        seeds=(0,),
    )
    two = _payload_file(
        tmp_path,
        "inv_two",
        "learned_inversion",
        {"variant": "aware", "k": 4, "init": "runs/stage1"},
        [(75, inv), (28, inv)],
        seeds=(0,),
    )
    old = _payload_file(
        tmp_path,
        "inv_old",
        "learned_inversion",
        {"variant": "aware", "k": 4, "init": "runs/stage1"},
        [(75, inv)],
        seeds=(0,),
    )
    for path, builds in ((one, ["a" * 64, "a" * 64]), (two, ["b" * 64, "c" * 64 + ", " + "d" * 64])):
        data = json.loads(path.read_text())
        data["git"] = {"commit": "0123456789abcdef", "dirty": False}
        for row, build in zip(data["results"], builds):
            row["provenance"] = {"stage1_build": build}
        path.write_text(json.dumps(data))
    text = build_report([tmp_path])
    assert "## Result files of the payload attacks" in text
    assert (
        f"| `inv_one` | learned_inversion | `{one.name}` | 2026-01-01T00:00:00+00:00 | 0123456789 | {'a' * 12} |"
        in text
    )
    # points of two builds (one of them reading two runs of different builds): each named once, sorted
    assert (
        f"| `inv_two` | learned_inversion | `{two.name}` | 2026-01-01T00:00:00+00:00 | 0123456789 | {'b' * 12}, "
        f"{'c' * 12}, {'d' * 12} |" in text
    )
    assert (
        f"| `inv_old` | learned_inversion | `{old.name}` | 2026-01-01T00:00:00+00:00 | unknown | not recorded |" in text
    )


def test_a_repeated_mean_slot_client_gets_a_client_column_and_stays_out_of_the_matrix_ppft_row(tmp_path):
    path = _payload_file(
        tmp_path, "attr_repeat", "attribute_inference", {"k": 4}, [(28, {}), (28, {})], mechanism=LAPLACE, seeds=(0,)
    )
    data = json.loads(path.read_text())
    data["cell"]["grid"] = {"params.repeat_mean": [False, True]}
    data["grid_axes"] = ["params.repeat_mean"]
    for r, (repeat, sex) in zip(data["results"], ((False, 0.60), (True, 0.85))):
        r["point"] = {"params.repeat_mean": repeat}
        r["metrics"] = {
            n: {"mean": v[0], "stderr": None, "values": v} for n, v in _attr(sex, 0.5, "slot_epsilon", 56.0).items()
        }
    path.write_text(json.dumps(data))
    text = build_report([tmp_path])
    assert (
        "| 50 | 4 | its own slots (as PPFT) | 56 |" in text
        and "| 50 | 4 | each prompt's mean slot repeated | 56 |" in text
    )
    # the cross matrix's PPFT row takes only PPFT's own client (60%), not the repeating one's (85%)
    sex = next(line for line in text.splitlines() if line.startswith("| attributes: sex (best)"))
    assert sex == "| attributes: sex (best) (%) | 60.0% (unit eps 56) |"
