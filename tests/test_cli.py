"""The command line, run as a user runs it, and the README's commands run verbatim."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from textfree.cli import app
from textfree.payload import Payload

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def run_cli(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_privatize_then_inspect_with_tiny_encoder(tiny_encoder_dir, tmp_path):
    out = tmp_path / "q.safetensors"
    r = run_cli(
        "privatize",
        "A 46-year-old male has a history of cluster headaches",
        "--epsilon",
        75,
        "--k",
        4,
        "--encoder",
        tiny_encoder_dir,
        "--out",
        out,
    )
    assert r.exit_code == 0, r.output
    p = Payload.load(out)
    assert p.privatization.noise.epsilon == 75.0 and p.privatization.k == 4
    r = run_cli("inspect", out)
    assert r.exit_code == 0
    assert "l2_laplace" in r.output and "eps = 150" in r.output
    for word in ("headaches", "cluster", "male"):
        assert word not in r.output
    r = run_cli("inspect", out, "--json")
    header = json.loads(r.output)
    assert header["privacy"]["slot"]["epsilon"] == 150.0


def test_privatize_gaussian_and_file_input(tiny_encoder_dir, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("first prompt here\n\nsecond prompt is longer than the first\n", encoding="utf-8")
    out = tmp_path / "g.safetensors"
    r = run_cli(
        "privatize",
        "--file",
        prompts,
        "--mechanism",
        "gaussian",
        "--epsilon",
        2,
        "--delta",
        1e-6,
        "--encoder",
        tiny_encoder_dir,
        "--out",
        out,
        "--k",
        2,
    )
    assert r.exit_code == 0, r.output
    p = Payload.load(out)
    assert p.batch_size == 2 and p.privatization.noise.name == "gaussian"
    # calibrated like L2-Laplace at --epsilon 2 on unit slots (diameter 2): (2 x 2, delta) per slot
    assert p.privatization.slot_loss().epsilon == pytest.approx(4.0)


@pytest.mark.parametrize(
    "args,message",
    [
        (["privatize"], "at least one prompt"),
        (["privatize", "x", "--k", "0"], "--k"),
        (["privatize", "x", "--epsilon", "-3"], "epsilon"),
        (["privatize", "x", "--mechanism", "laplacian", "--epsilon", "3"], "unknown --mechanism"),
        (["privatize", "x", "--mechanism", "gaussian"], "--sigma"),
        (["privatize", "x", "--epsilon", "3", "--encoder", "/no/such/encoder"], "could not load"),
        (["account", "--dataset", "/no/such/file.jsonl", "--budget", "150"], "no/such"),
        (["account", "--dataset", "pri-ddx", "--budget", "0"], "--budget"),
        # the client's flags: one error line, never a traceback (and nothing sent)
        (["ask", "hi", "--model", "m", "--url", "http://127.0.0.1:9", "--epsilon", "-1"], "--epsilon must be"),
        (["ask", "hi", "--model", "m", "--url", "http://127.0.0.1:9", "--epsilon", "nan"], "--epsilon must be"),
        (["ask", "hi", "--model", "m", "--url", "http://127.0.0.1:9", "--timeout", "0"], "--timeout must be"),
        (["ask", "hi", "--model", "m", "--url", "http://127.0.0.1:9", "--retries", "-1"], "--retries must be"),
        (["ask", "hi", "--model", "m", "--url", "http://127.0.0.1:9", "--k", "0"], "--k must be"),
        (["ask", "hi", "--model", "m", "--url", "http://127.0.0.1:9", "--max-epsilon", "0"], "--max-epsilon must be"),
        (
            ["finetune", "--data", "x.jsonl", "--model", "m", "--url", "http://127.0.0.1:9", "--timeout", "0"],
            "--timeout must be",
        ),
    ],
)
def test_bad_flags_give_clear_errors(args, message):
    r = runner.invoke(app, args)
    assert r.exit_code == 2
    assert message in r.output


def test_inspect_rejects_a_garbage_file(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    r = runner.invoke(app, ["inspect", str(bad)])
    assert r.exit_code == 2 and "not valid UTF-8 JSON" in r.output
    r = runner.invoke(app, ["inspect", str(tmp_path / "missing.safetensors")])
    assert r.exit_code == 2 and "cannot read" in r.output
    r = runner.invoke(app, ["inspect", str(tmp_path)])  # a directory: an error line, not a traceback
    assert r.exit_code == 2 and "cannot read" in r.output


def test_privatize_into_a_directory_charges_no_ledger(tiny_encoder_dir, tmp_path):
    ledger = tmp_path / "ledger.json"
    r = runner.invoke(
        app,
        [
            "privatize",
            "one two three",
            "--epsilon",
            "75",
            "--encoder",
            str(tiny_encoder_dir),
            "--ledger",
            str(ledger),
            "--budget",
            "400",
            "--out",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 2 and "is a directory" in r.output
    assert not ledger.exists() or json.loads(ledger.read_text())["entries"] == []
    r = runner.invoke(app, ["privatize", "x", "--epsilon", "3", "--out", str(tmp_path / "missing" / "q.safetensors")])
    assert r.exit_code == 2 and "no such directory" in r.output


def test_ledger_refusal_writes_nothing(tiny_encoder_dir, tmp_path):
    ledger, out = tmp_path / "ledger.json", tmp_path / "q.safetensors"
    # [CLS] one two three [SEP] = 5 tokens -> 2 slots of k=4 -> 2 * 2 * 75 = 300 per release
    base = [
        "privatize",
        "one two three",
        "--epsilon",
        75,
        "--encoder",
        tiny_encoder_dir,
        "--ledger",
        ledger,
        "--budget",
        400,
        "--ledger-key",
        "alice",
        "--out",
        out,
    ]
    assert run_cli(*base).exit_code == 0
    first = out.read_bytes()
    r = runner.invoke(app, [str(a) for a in base])
    assert r.exit_code == 3 and "budget exceeded" in r.output
    assert out.read_bytes() == first
    entries = json.loads(ledger.read_text())["entries"]
    assert [e["epsilon"] for e in entries] == [300.0]


def test_ledger_delta_budget_from_the_cli(tiny_encoder_dir, tmp_path):
    ledger, out = tmp_path / "ledger.json", tmp_path / "q.safetensors"
    base = [
        "privatize",
        "one two three",
        "--mechanism",
        "gaussian",
        "--sigma",
        "0.5",
        "--delta",
        "1e-5",
        "--encoder",
        str(tiny_encoder_dir),
        "--ledger",
        str(ledger),
        "--delta-budget",
        "3e-5",
        "--out",
        str(out),
    ]
    # 5 tokens -> 2 slots, each a Gaussian release at delta 1e-5: 2e-5 per prompt, so the second prompt passes 3e-5
    assert runner.invoke(app, base).exit_code == 0
    r = runner.invoke(app, base)
    assert r.exit_code == 3 and "delta: spent" in r.output
    assert len(json.loads(ledger.read_text())["entries"]) == 1
    r = runner.invoke(app, base[:-4] + ["--delta-budget", "2", "--out", str(out)])
    assert r.exit_code == 2 and "delta_budget" in r.output


def test_account_on_fixture_dataset(tmp_path, tiny_encoder_dir):
    r = runner.invoke(
        app,
        [
            "account",
            "--dataset",
            "pri-ddx",
            "--split",
            "dev",
            "--budget",
            "150",
            "--encoder",
            str(tiny_encoder_dir),
            "--json",
        ],
        env={"TEXTFREE_DATA": str(ROOT / "tests" / "fixtures" / "data")},
    )
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    row = res["at_n_max"]
    assert row["eps_ppft"] == 75.0 and row["eps_pr"] == 75.0
    assert row["eps_dchi"] == pytest.approx(150 / (row["n"] * row["d_max"]))
    assert row["tau"] == pytest.approx(2 * row["n"] / 150)
    text = runner.invoke(
        app,
        ["account", "--dataset", "pri-ddx", "--split", "dev", "--budget", "150", "--encoder", str(tiny_encoder_dir)],
        env={"TEXTFREE_DATA": str(ROOT / "tests" / "fixtures" / "data"), "COLUMNS": "400"},
    ).output
    assert "spends B per slot" in " ".join(text.split()) and "s x B" in text  # the table's units are stated


def readme_commands(section: str) -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    body = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", body, re.S)
    return [
        line.strip() for block in blocks for line in block.splitlines() if line.strip() and not line.startswith("#")
    ]


def test_readme_main_commands_run_verbatim(tmp_path):
    """Every `textfree ...` line of the README's run section, exactly as written (the real default encoder)."""
    commands = [c for c in readme_commands("Install and run") if c.startswith("textfree ")]
    assert len(commands) >= 2
    env = dict(
        os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""), HF_HUB_OFFLINE="1"
    )
    outputs = []
    for cmd in commands:
        argv = [sys.executable, "-m", "textfree.cli", *shlex.split(cmd)[1:]]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{cmd}\n{proc.stdout}\n{proc.stderr}"
        outputs.append(proc.stdout)
    assert (tmp_path / "q.safetensors").is_file()
    assert "l2_laplace" in outputs[-1] and "cluster" not in outputs[-1]


def test_readme_test_command_is_what_ci_runs():
    test_cmds = readme_commands("Test")
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmds and all(cmd in ci for cmd in test_cmds)
    install = [c for c in readme_commands("Install and run") if c.startswith("pip install")]
    assert install and install[0].replace("pip install", "python -m pip install --quiet") in ci


def test_run_and_plot_commands(tiny_encoder_dir, tmp_path):
    cell = tmp_path / "cell.yaml"
    cell.write_text(
        "name: tiny\nkind: privatization\n"
        f"encoder: {tiny_encoder_dir}\n"
        "texts: ['a first short prompt about a cough', 'second prompt with more words in it than the first']\n"
        "mechanism: {name: l2_laplace, epsilon: 10}\nparams: {k: 2}\n"
        "grid: {mechanism.epsilon: [1, 1000]}\nseeds: [0, 1]\n",
        encoding="utf-8",
    )
    r = run_cli("run", cell, "--out-dir", tmp_path / "res")
    assert r.exit_code == 0, r.output
    result = next((tmp_path / "res").glob("tiny-*.json"))
    data = json.loads(result.read_text())
    assert data["seeds"] == [0, 1] and len(data["results"]) == 2
    r = run_cli("plot", result, "--out-dir", tmp_path / "plots")
    assert r.exit_code == 0, r.output
    pngs = list((tmp_path / "plots").glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nkind: privatization\nepsilon: 3\n", encoding="utf-8")
    r = runner.invoke(app, ["run", str(bad)])
    assert r.exit_code == 2 and "epsilon" in r.output


GLOVE = ROOT / "tests" / "fixtures" / "substitution" / "tiny_glove.txt"


def test_substitute_t2t_and_pct2t_with_a_glove_table():
    r = run_cli("substitute", "the cat sat on the mat", "--eta", 1e9, "--table", f"glove:{GLOVE}", "--seed", 0)
    assert r.exit_code == 0, r.output
    assert "per word" in r.output and "category" not in r.output
    r_low = run_cli("substitute", "the cat sat on the mat", "--eta", 1e-3, "--table", f"glove:{GLOVE}", "--seed", 0)
    assert r_low.exit_code == 0
    first_line = lambda out: out.strip().splitlines()[0]
    assert first_line(r.stdout) == "the cat sat on the mat"
    assert first_line(r_low.stdout) != "the cat sat on the mat"
    r = run_cli(
        "substitute",
        "the cat sat on the mat",
        "--eta",
        1e9,
        "--pos",
        "noun,verb",
        "--table",
        f"glove:{GLOVE}",
        "--seed",
        0,
    )
    assert r.exit_code == 0 and first_line(r.stdout) == "the cat sat on the mat"
    said = " ".join(r.output.split())  # PCT2T's bound says what it covers and which words were sent as they are
    assert "between words of the same part-of-speech category" in said and "[the] [cat] [sat] [on]" in said
    assert "Not covered: the 6 word(s) sent unchanged" in said
    import inspect

    from textfree.cli import substitute
    from textfree.substitution import DEFAULT_SHORTLIST

    assert inspect.signature(substitute).parameters["shortlist"].default.default == DEFAULT_SHORTLIST
    for pos in ([], ["--pos", "noun,verb"]):
        r = run_cli(
            "substitute",
            "the cat sat on the mat",
            "--eta",
            1e9,
            *pos,
            "--search",
            "approximate",
            "--shortlist",
            2,
            "--table",
            f"glove:{GLOVE}",
            "--seed",
            0,
        )
        assert r.exit_code == 0 and first_line(r.stdout) == "the cat sat on the mat", r.output


def test_substitute_replacement_table_is_monotone(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\na dog ran to the park\n", encoding="utf-8")
    r = run_cli(
        "substitute",
        "--replacement-table",
        "--etas",
        "0.01,1,100,1e6",
        "--corpus",
        corpus,
        "--table",
        f"glove:{GLOVE}",
        "--seed",
        0,
    )
    assert r.exit_code == 0, r.output
    rates = [float(x) for x in re.findall(r"│\s*[\de.+]+\s*│\s*([01]\.\d{3})\s*│", r.output)]
    assert len(rates) == 4 and rates == sorted(rates, reverse=True)
    assert rates[0] > 0.5 and rates[-1] == 0.0


@pytest.mark.parametrize(
    "args,message",
    [
        (["substitute", "x", "--eta", "0"], "--eta"),
        (["substitute"], "give a text"),
        (["substitute", "x", "--table", "glove:/no/such.txt"], "no/such"),
        (["substitute", "x", "--pos", "nouns,verb"], "pos_categories"),
        (["substitute", "x", "--search", "fast"], "--search"),
        (["substitute", "x", "--search", "approximate", "--shortlist", "-1"], "--shortlist"),
    ],
)
def test_substitute_bad_flags(args, message):
    if "--table" not in args:
        args = args + ["--table", f"glove:{GLOVE}"]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and message in r.output, r.output


def test_ppft_width_match_prints_both_rules_and_rejects_bad_widths():
    r = run_cli("ppft", "width-match", "--samples", 20000)
    assert r.exit_code == 0, r.output
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in r.output.splitlines()
        if line.startswith("| ") and not line.startswith("| setting")
    }
    assert rows["norm-matched"][:2] == ["384", "28.12"] and rows["gdp-matched"][:2] == ["384", "45.93"]
    assert rows["gdp-matched"][4] == rows["reference"][4] == "4.688"  # the same mu
    assert abs(float(rows["gdp-matched"][6]) - float(rows["reference"][6])) < 0.005  # measured test error
    r = run_cli("ppft", "width-match", "--to-dim", 0)
    assert r.exit_code == 2 and "dim must be an integer >= 1, got 0" in r.output


def test_the_console_script_logs_textfree_run_progress(tiny_encoder_dir, tmp_path):
    """The installed ``textfree`` script sets logging up: ``textfree run`` prints its INFO lines (it lost them when the
    setup lived only in ``main`` and the script called the typer app directly)."""

    script = shutil.which("textfree", path=str(Path(sys.executable).parent))
    assert script is not None, "the textfree console script is not installed beside this Python (pip install -e .)"
    cell = tmp_path / "cell.json"
    cell.write_text(
        json.dumps(
            {
                "name": "log_check",
                "kind": "privatization",
                "texts": ["one two three four", "five six seven"],
                "encoder": str(tiny_encoder_dir),
                "mechanism": {"name": "l2_laplace", "epsilon": 75},
                "params": {"k": 2},
                "seeds": [0],
            }
        )
    )
    done = subprocess.run(
        [script, "run", str(cell), "--out-dir", str(tmp_path / "out")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "textfree.experiments cell log_check (kind privatization): 1 point(s) x 1 seed(s)" in done.stderr
    assert "wrote" in done.stderr
