"""The ledger under an accountant: the plain sum stays as it was, a tight accountant composes a key's Gaussian
releases (kept in each entry), every entry names its accountant; ``privatize --ledger --accountant`` and
``inspect --accountant`` say which one they used."""

import json
import math

import pytest
from typer.testing import CliRunner

from textfree.cli import app
from textfree.ledger import BudgetExceeded, LedgerError, PrivacyLedger
from textfree.mechanisms import Gaussian, L2Laplace, PrivacyLoss
from textfree.mechanisms.accountants import Release, compose, slot_releases
from textfree.privatizer import Privatizer

PROMPTS = ["A 46-year-old male has a history of cluster headaches", "short one"]
runner = CliRunner()
pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")  # seeded test payloads


def test_basic_is_the_default_and_every_entry_names_its_accountant(tmp_path):
    led = PrivacyLedger(tmp_path / "l.json", budget=10.0)
    assert led.accountant == "basic"
    assert led.charge("a", PrivacyLoss(3.0)) == PrivacyLoss(3.0)
    assert led.charge("a", PrivacyLoss(1.5, 1e-6, "approx")) == PrivacyLoss(4.5, 1e-6, "approx")
    entries = led.entries("a")
    assert [e["accountant"] for e in entries] == ["basic", "basic"]
    assert entries[-1]["total"] == {"epsilon": 4.5, "delta": 1e-6}
    assert led.spent("a") == led.spent("a", accountant="basic") == PrivacyLoss(4.5, 1e-6, "approx")
    assert "epsilons and deltas add" in led.describe_accountant()
    with pytest.raises(ValueError, match="unknown accountant"):
        PrivacyLedger(tmp_path / "l.json", accountant="moments")


def test_gaussian_payloads_compose_tightly_under_gdp(tiny_encoder, tmp_path):
    noise = Gaussian(0.5, 1e-6)
    path = tmp_path / "ledger.json"
    pr = Privatizer(tiny_encoder, noise, k=4)
    payloads = [pr.privatize(PROMPTS, seed=s) for s in (1, 2, 3)]
    led = PrivacyLedger(path, accountant="gdp")
    for p in payloads:
        total = led.charge_payload("alice", p)
    entries = led.entries("alice")
    assert [e["accountant"] for e in entries] == ["gdp"] * 3 and all("events" in e for e in entries)
    slots = sum(sum(p.lengths) for p in payloads)
    plain = led.spent("alice", accountant="basic")
    assert plain.epsilon == pytest.approx(slots * noise.privacy_loss(2.0).epsilon)  # the plain sum, as always
    assert plain.delta == pytest.approx(slots * 1e-6)
    # gdp: one Gaussian with mu = sqrt(slots) * 2 / sigma, at the plain sum's delta
    exact = Gaussian(0.5 / math.sqrt(slots), plain.delta).privacy_loss(2.0)
    assert total.epsilon == pytest.approx(exact.epsilon, rel=1e-9) and total.delta == pytest.approx(plain.delta)
    assert total.epsilon < 0.5 * plain.epsilon
    assert led.spent("alice") == total and entries[-1]["total"]["epsilon"] == total.epsilon
    assert led.spent("alice", delta=1e-3).epsilon < total.epsilon  # epsilon at another delta
    # the same file read under basic composition: the plain sum
    assert PrivacyLedger(path).spent("alice") == plain


def test_the_budget_is_checked_under_the_ledgers_accountant(tiny_encoder, tmp_path):
    pr = Privatizer(tiny_encoder, Gaussian(0.5, 1e-6), k=4)
    first, second = (pr.privatize(PROMPTS, seed=s) for s in (1, 2))
    releases = slot_releases(first.privatization, first.lengths + second.lengths)
    tight, plain = compose(releases, "gdp").epsilon, compose(releases, "basic").epsilon
    budget = (tight + plain) / 2  # enough under gdp, not under the plain sum
    for accountant, passes in (("gdp", True), ("basic", False)):
        led = PrivacyLedger(tmp_path / f"{accountant}.json", budget=budget, accountant=accountant)
        led.charge_payload("bob", first)
        if passes:
            led.charge_payload("bob", second)
        else:
            with pytest.raises(BudgetExceeded, match="epsilon: spent") as info:
                led.charge_payload("bob", second)
            assert "accountant" not in str(info.value)  # basic: the message as it always was
            assert len(led.entries("bob")) == 1
    tight_first = compose(slot_releases(first.privatization, first.lengths), "gdp").epsilon
    led = PrivacyLedger(tmp_path / "gdp2.json", budget=(tight_first + tight) / 2, accountant="gdp")
    led.charge_payload("bob", first)
    with pytest.raises(BudgetExceeded, match=r"epsilon: spent .*budget .* \(accountant gdp\)"):
        led.charge_payload("bob", second)


def test_pld_and_rdp_ledgers(tiny_encoder, tmp_path):
    pytest.importorskip("dp_accounting")
    p = Privatizer(tiny_encoder, Gaussian(0.5, 1e-6), k=4).privatize(PROMPTS, seed=1)
    for name in ("pld", "rdp"):
        led = PrivacyLedger(tmp_path / f"{name}.json", accountant=name)
        total = led.charge_payload("c", p)
        assert total == compose(slot_releases(p.privatization, p.lengths), name)
        assert led.entries("c")[0]["accountant"] == name


def test_entries_without_releases_and_metric_releases_count_by_their_plain_loss(tiny_encoder, tmp_path):
    path = tmp_path / "ledger.json"
    old = PrivacyLedger(path)
    old.charge("d", PrivacyLoss(7.0))  # an entry from before releases were kept
    lap = Privatizer(tiny_encoder, L2Laplace(20.0), k=4).privatize(PROMPTS, seed=1)
    led = PrivacyLedger(path, accountant="gdp")
    total = led.charge_payload("d", lap)
    assert total == PrivacyLedger(path).spent("d") == PrivacyLoss(7.0 + 40.0 * sum(lap.lengths), 0.0, "metric")


def test_releases_must_add_up_to_the_loss_charged_and_damaged_ones_are_refused(tmp_path):
    path = tmp_path / "ledger.json"
    led = PrivacyLedger(path, accountant="gdp")
    gauss = Release(Gaussian(1.0, 1e-5).privacy_loss(2.0), 3, 0.5)
    with pytest.raises(ValueError, match="the events add up to"):
        led.charge("e", PrivacyLoss(1.0), events=[gauss])
    led.charge("e", gauss.total(), events=[gauss])
    data = json.loads(path.read_text())
    data["entries"][0]["events"][0]["count"] = 1  # understates the releases
    path.write_text(json.dumps(data))
    with pytest.raises(LedgerError, match="entry 0 is malformed: the events add up to"):
        led.spent("e")
    data["entries"][0]["events"] = "many"
    path.write_text(json.dumps(data))
    with pytest.raises(LedgerError, match="entry 0 is malformed"):
        led.spent("e")


def _privatize(tiny_encoder_dir, tmp_path, *extra):
    args = ["privatize", "one two three", "--mechanism", "gaussian", "--sigma", "0.5", "--delta", "1e-6"]
    args += ["--encoder", str(tiny_encoder_dir), "--out", str(tmp_path / "q.safetensors"), *map(str, extra)]
    return runner.invoke(app, args)


def test_privatize_and_inspect_say_which_accountant(tiny_encoder_dir, tmp_path):
    ledger = tmp_path / "ledger.json"
    r = _privatize(tiny_encoder_dir, tmp_path, "--ledger", ledger, "--ledger-key", "alice", "--accountant", "gdp")
    assert r.exit_code == 0, r.output
    said = " ".join(r.output.split())  # the console wraps long lines
    assert "accountant: gdp: Gaussian DP" in said and "plain sum eps =" in said
    (entry,) = json.loads(ledger.read_text())["entries"]
    assert entry["accountant"] == "gdp" and entry["events"][0]["noise_multiplier"] == 0.25
    r = _privatize(tiny_encoder_dir, tmp_path, "--ledger", ledger)  # the default: basic
    assert r.exit_code == 0 and "accountant: basic: basic composition" in " ".join(r.output.split())
    r = _privatize(tiny_encoder_dir, tmp_path, "--accountant", "gdp")
    assert r.exit_code == 2 and "--accountant applies to --ledger" in r.output
    r = _privatize(tiny_encoder_dir, tmp_path, "--ledger", ledger, "--accountant", "moments")
    assert r.exit_code == 2 and "unknown accountant 'moments'" in r.output

    out = tmp_path / "q.safetensors"
    r = runner.invoke(app, ["inspect", str(out)])
    assert r.exit_code == 0 and "basic composition" in r.output
    r = runner.invoke(app, ["inspect", str(out), "--accountant", "gdp"])
    said = " ".join(r.output.split())
    assert r.exit_code == 0 and "Gaussian DP" in said and "plain sum eps" in said
    r = runner.invoke(app, ["inspect", str(out), "--json", "--accountant", "gdp"])
    accounting = json.loads(r.output)["accounting"]
    assert accounting["accountant"] == "gdp"
    assert accounting["worst_case_row"]["epsilon"] < accounting["plain_sum"]["epsilon"]
    assert accounting["worst_case_row"]["delta"] == pytest.approx(accounting["plain_sum"]["delta"])
    r = runner.invoke(app, ["inspect", str(out), "--accountant", "moments"])
    assert r.exit_code == 2 and "unknown accountant" in r.output
