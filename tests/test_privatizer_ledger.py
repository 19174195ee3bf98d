import json
import re
import warnings

import pytest
import torch

from textfree.ledger import BudgetExceeded, BudgetWarning, LedgerError, PrivacyLedger
from textfree.mechanisms import L2Laplace, PrivacyLoss
from textfree.privatizer import Privatizer
from textfree.rng import InsecureRandomnessWarning, resolve_generator, secure_generator, seeded_generator

PROMPT = "A 46-year-old male has a history of cluster headaches and smokes daily"


def test_privatize_shapes_lengths_and_losses(tiny_encoder):
    p = Privatizer(tiny_encoder, L2Laplace(75.0), k=4).privatize([PROMPT, "short one"], seed=1)
    n_tok = [len(tiny_encoder.tokenizer(t)["input_ids"]) for t in (PROMPT, "short one")]
    assert p.lengths == [-(-n // 4) for n in n_tok]
    assert p.vectors.shape == (2, max(p.lengths), tiny_encoder.dim)
    assert p.row_losses()[0].epsilon == 150.0 * p.lengths[0]
    assert p.encoder.id == str(tiny_encoder.name) and p.encoder.sha256 and len(p.encoder.sha256) == 64


def test_a_prompt_cut_at_the_encoders_limit_is_said_not_silent(tiny_encoder):
    """Text past the encoder's max_length is dropped before encoding; the client warns how many prompts were cut."""
    own = tiny_encoder.max_length
    n_tok = len(tiny_encoder.tokenizer(PROMPT)["input_ids"])
    try:
        tiny_encoder.max_length = n_tok - 1
        with pytest.warns(
            UserWarning, match=f"1 of 2 prompt\\(s\\) are longer than the encoder's limit of {n_tok - 1} tokens"
        ):
            p = Privatizer(tiny_encoder, L2Laplace(75.0), k=4).privatize([PROMPT, "short one"], seed=1)
        assert p.lengths[0] == -(-(n_tok - 1) // 4)  # what was released: the cut prompt
        tiny_encoder.max_length = n_tok
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # exactly at the limit: nothing cut, nothing said
            Privatizer(tiny_encoder, L2Laplace(75.0), k=4).privatize([PROMPT, "short one"], seed=1)
    finally:
        tiny_encoder.max_length = own


def test_batching_does_not_change_the_result(tiny_encoder):
    texts = [PROMPT, "short one", "another prompt about a patient", "x y z"]
    a = Privatizer(tiny_encoder, None, k=2, batch_size=1).privatize(texts)
    b = Privatizer(tiny_encoder, None, k=2, batch_size=32).privatize(texts)
    assert torch.equal(a.mask, b.mask)
    assert torch.allclose(a.vectors, b.vectors, atol=1e-5)


def test_seeded_noise_is_reproducible_and_unseeded_noise_is_fresh(tiny_encoder):
    pr = Privatizer(tiny_encoder, L2Laplace(10.0), k=4)
    assert torch.equal(pr.privatize(PROMPT, seed=3).vectors, pr.privatize(PROMPT, seed=3).vectors)
    a, b = pr.privatize(PROMPT).vectors, pr.privatize(PROMPT).vectors
    assert not torch.equal(a, b)


def test_rng_policy():
    a = secure_generator().initial_seed()
    b = secure_generator().initial_seed()
    assert a != b
    import textfree.rng as rng

    rng._warned = False
    with pytest.warns(InsecureRandomnessWarning):
        g = seeded_generator(5)
    assert g.initial_seed() == 5
    with pytest.raises(ValueError):
        resolve_generator(torch.Generator(), 3)
    with pytest.raises(TypeError):
        seeded_generator("5")


def test_invalid_inputs_are_refused(tiny_encoder):
    pr = Privatizer(tiny_encoder, L2Laplace(10.0), k=4)
    for bad in ([], [""], ["   "], [3]):
        with pytest.raises(ValueError):
            pr.privatize(bad)
    with pytest.raises(ValueError, match="k"):
        Privatizer(tiny_encoder, L2Laplace(10.0), k=0)


def test_payload_file_contains_no_word_or_token_of_the_prompt(minilm, tmp_path):
    text = "A 46-year-old male has a history of cluster headaches and recurrent migraine in Philadelphia"
    path = Privatizer(minilm, L2Laplace(75.0), k=4).privatize(text).save(tmp_path / "q.safetensors")
    blob = path.read_bytes()
    low = blob.lower()
    words = {w.lower() for w in re.findall(r"[A-Za-z0-9]+", text) if len(w) >= 3}
    for w in words:
        assert w.encode() not in low, f"word {w!r} found in the payload bytes"
    # Nor the token ids: the header carries no ids, and no tensor but vectors and mask exists.
    header = json.loads(blob[8 : 8 + int.from_bytes(blob[:8], "little")])
    assert set(header) == {"__metadata__", "vectors", "mask"}
    inner = json.loads(header["__metadata__"]["textfree"])
    assert "input_ids" not in json.dumps(inner)
    # The same check would catch a leak: a payload that carries the text as a public part is flagged.
    leaky = Privatizer(minilm, L2Laplace(75.0), k=4).privatize(text, public=[text]).to_bytes().lower()
    assert any(w.encode() in leaky for w in words)


def test_ledger_charges_refuses_and_warns(tiny_encoder, tmp_path):
    led = PrivacyLedger(tmp_path / "ledger.json", budget=1000.0)
    pr = Privatizer(tiny_encoder, L2Laplace(75.0), k=4, ledger=led, ledger_key="alice")
    p = pr.privatize("two slots here ok")  # [CLS] two slots here ok [SEP] -> 6 tokens -> 2 slots -> 300
    assert p.lengths == [2]
    assert led.spent("alice").epsilon == 300.0
    pr.privatize("two slots here ok")
    pr.privatize("two slots here ok")
    assert led.spent("alice").epsilon == 900.0
    before = (tmp_path / "ledger.json").read_text()
    with pytest.raises(BudgetExceeded, match="alice"):
        pr.privatize("two slots here ok")
    assert (tmp_path / "ledger.json").read_text() == before  # nothing recorded, nothing released
    assert led.spent("bob").epsilon == 0.0 and led.remaining("alice") == 100.0
    warn = PrivacyLedger(tmp_path / "ledger.json", budget=1000.0, on_exceed="warn")
    with pytest.warns(BudgetWarning):
        warn.charge("alice", PrivacyLoss(300.0))
    assert warn.spent("alice").epsilon == 1200.0


def test_ledger_validation_and_corrupt_file(tmp_path):
    with pytest.raises(ValueError, match="budget"):
        PrivacyLedger(tmp_path / "l.json", budget=-1)
    with pytest.raises(ValueError, match="on_exceed"):
        PrivacyLedger(tmp_path / "l.json", on_exceed="ignore")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(LedgerError, match="bad.json"):
        PrivacyLedger(bad).spent("x")


def test_ledger_budgets_delta_too(tmp_path):
    """Gaussian releases add their deltas: a delta budget refuses the release that would pass it, epsilon aside."""
    led = PrivacyLedger(tmp_path / "ledger.json", delta_budget=2.5e-5)
    release = PrivacyLoss(1.0, 1e-5, "approx")
    led.charge("alice", release)
    led.charge("alice", release)
    before = (tmp_path / "ledger.json").read_text()
    with pytest.raises(BudgetExceeded, match=r"delta: spent 2e-05, this release 1e-05, budget 2.5e-05"):
        led.charge("alice", release)
    assert (tmp_path / "ledger.json").read_text() == before
    assert led.spent("alice").delta == pytest.approx(2e-5) and led.remaining_delta("alice") == pytest.approx(5e-6)
    assert led.remaining("alice") is None  # no epsilon budget was set
    led.charge("alice", PrivacyLoss(1.0))  # a pure release spends no delta
    both = PrivacyLedger(tmp_path / "ledger.json", budget=2.5, delta_budget=2.5e-5)
    with pytest.raises(BudgetExceeded, match=r"epsilon: .*; delta: "):
        both.charge("alice", release)
    for bad in (0, 1, -1e-5, float("nan"), True, "1e-5"):
        with pytest.raises(ValueError, match="delta_budget"):
            PrivacyLedger(tmp_path / "l.json", delta_budget=bad)


def test_ledger_refuses_damaged_entries_and_expands_home(tmp_path, monkeypatch):
    """An entry whose figures are not a privacy loss (negative, NaN, text) must not pass for a smaller spend."""
    for eps, delta in ((-300.0, 0.0), ("300", 0.0), (300.0, 2.0), (300.0, None)):
        path = tmp_path / "damaged.json"
        entry = {"key": "alice", "epsilon": eps, "delta": delta, "notion": "metric"}
        path.write_text(json.dumps({"format": "textfree.ledger", "version": 1, "entries": [entry]}))
        with pytest.raises(LedgerError, match="entry 0 is malformed"):
            PrivacyLedger(path, budget=1000.0).spent("alice")
    path.write_text(
        '{"format": "textfree.ledger", "version": 1, "entries": [{"key": "a", "epsilon": NaN, "delta": 0, "notion": '
        '"metric"}]}'
    )
    with pytest.raises(LedgerError, match="entry 0 is malformed"):
        PrivacyLedger(path).charge("a", PrivacyLoss(1.0))
    monkeypatch.setenv("HOME", str(tmp_path))
    led = PrivacyLedger("~/.textfree/ledger.json", budget=10.0)  # the README's path
    led.charge("alice", PrivacyLoss(1.0))
    assert led.path == tmp_path / ".textfree" / "ledger.json" and led.path.exists()
