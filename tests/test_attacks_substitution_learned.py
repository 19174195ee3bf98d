"""The learned reader of T2T text: formatting, the grant, the cell kind's checks, and a tiny inverter that learns to
read text released without noise and cannot read text whose every word was replaced at random."""

import random

import pytest
import torch

from textfree.attacks import ThreatModel, ThreatModelError
from textfree.attacks.substitution import aligned_word_recovery
from textfree.attacks.substitution_learned import SubstitutionInverter, substitution_learned_attack
from textfree.experiments import Cell, CellError, run_cell
from textfree.results.files import load_results

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

GRANT = {"training_text": "in_domain", "knows_mechanism": True, "knows_parameters": True}
WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima mike november oscar papa quebec "
    "romeo sierra tango uniform victor whiskey xray yankee zulu"
).split()


class _Replace:
    """A fake mechanism: each word is replaced, with probability ``p``, by a word drawn uniformly from WORDS."""

    def __init__(self, p: float):
        self.p = p

    def privatize(self, texts, *, generator):
        def swap(w):
            hit = float(torch.rand((), generator=generator)) < self.p
            return WORDS[int(torch.randint(len(WORDS), (), generator=generator))] if hit else w

        return [" ".join(swap(w) for w in t.split()) for t in texts]


@pytest.fixture(scope="module")
def texts():
    rng = random.Random(0)
    return list(dict.fromkeys(" ".join(rng.choice(WORDS) for _ in range(5)) for _ in range(600)))


@pytest.fixture(scope="module")
def tiny_bpe_decoder(tmp_path_factory, texts):
    """A random 2-layer decoder over a byte-level BPE vocabulary of the fake texts (each word one token)."""
    from textfree.attacks.substitution_learned import SEPARATOR
    from textfree.lm.loading import make_tiny_decoder_dir
    from textfree.lm.local import train_tokenizer

    tok = train_tokenizer(texts + [SEPARATOR] * 5, vocab_size=400, min_frequency=2, model_max_length=64)
    return make_tiny_decoder_dir(
        tmp_path_factory.mktemp("bpe-decoder"), tokenizer=tok, hidden=64, layers=2, heads=2, max_positions=64
    )


def test_examples_mask_the_prompt_and_end_with_eos(tiny_bpe_decoder):
    inv = SubstitutionInverter.from_decoder(str(tiny_bpe_decoder), max_source_tokens=3, max_target_tokens=12)
    ex = inv.example("alpha bravo charlie delta", "echo golf")
    prompt = inv.prompt_ids("alpha bravo charlie delta")
    assert prompt[0] == inv.tokenizer.eos_token_id  # BOS = EOS = <|endoftext|> in our BPE tokenizers
    assert len(prompt) == 1 + 3 + len(inv._sep)  # the released text is cut to max_source_tokens
    assert ex["input_ids"][: len(prompt)] == prompt and ex["labels"][: len(prompt)] == [-100] * len(prompt)
    target = ex["labels"][len(prompt) :]
    assert target[-1] == inv.tokenizer.eos_token_id and inv.tokenizer.decode(target[:-1]).strip() == "echo golf"
    batch = inv.collate([ex, inv.example("alpha", "bravo")])
    assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape
    assert batch["attention_mask"][1].sum() == len(inv.example("alpha", "bravo")["input_ids"])
    assert (batch["labels"][1][batch["attention_mask"][1] == 0] == -100).all()
    with pytest.raises(ValueError, match="exceeds the decoder's 64 positions"):
        SubstitutionInverter.from_decoder(str(tiny_bpe_decoder))  # 120 + 128 tokens by default


def test_aligned_word_recovery_tolerates_other_lengths():
    assert aligned_word_recovery([["a", "b", "c", "d"]], [["b", "c", "d", "e"]]) == 0.75  # a shift, not 0
    assert aligned_word_recovery([["a", "b"]], [["A", "x", "b", "y"]]) == 1.0
    assert aligned_word_recovery([["a", "b"], ["c"]], [[], ["c"]]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="no words"):
        aligned_word_recovery([[]], [["a"]])


class _Tag:
    def __init__(self, tag):
        self.tag = tag

    def privatize(self, texts, *, generator):
        return [f"{self.tag} {t}" for t in texts]


def test_release_deals_the_texts_out_to_the_mechanisms():
    from textfree.attacks.substitution_training import release

    texts = [str(i) for i in range(7)]
    seen = set()
    for epoch in range(6):
        out = release([_Tag("a"), _Tag("b"), _Tag("c")], texts, generator=torch.Generator().manual_seed(epoch))
        assert [o.split()[1] for o in out] == texts  # in the texts' order
        tags = [o.split()[0] for o in out]
        assert sorted(tags.count(t) for t in "abc") == [2, 2, 3]  # equal shares
        seen |= set(zip(texts, tags))
    assert len(seen) > 14  # texts meet different mechanisms over the epochs
    assert release([_Tag("a")] * 3, ["x"], generator=torch.Generator()) == ["a x"]  # empty shares are skipped


def _train(decoder, out, p, texts):
    from textfree.attacks.substitution_training import InverterConfig, train_substitution_inverter

    cfg = InverterConfig(
        out=str(out),
        decoder=str(decoder),
        mechanism={"name": "replace", "p": p},
        epochs=20,
        batch_size=32,
        lr=3e-3,
        warmup_steps=10,
        max_source_tokens=12,
        max_target_tokens=12,
        progress=False,
    )
    return train_substitution_inverter(cfg, [_Replace(p)], texts[:400])


def test_learned_inverter_reads_clean_text_and_not_pure_noise(tiny_bpe_decoder, texts, tmp_path):
    held = texts[400:440]
    original = [t.split() for t in held]
    grant = ThreatModel(**GRANT)
    recovery, trained = {}, {}
    for p in (0.0, 1.0):
        summary = _train(tiny_bpe_decoder, tmp_path / f"inv-{p}", p, texts)
        assert summary["steps"] == 20 * 13 and summary["final_loss"] < summary["first_loss"]
        trained[p] = summary["model"]
        released = _Replace(p).privatize(held, generator=torch.Generator().manual_seed(1))
        guesses = substitution_learned_attack(released, trained[p], threat=grant, max_new_tokens=12)
        recovery[p] = aligned_word_recovery(original, [g.split() for g in guesses])
    # no noise: it learned to copy the released words; all words replaced: nothing but chance (1/26 per word) is left
    assert recovery[0.0] > 0.9 and recovery[1.0] < 0.25, recovery
    # the saved run loads back and reads as the trained one does; its checkpoints are gone
    again = SubstitutionInverter.load(tmp_path / "inv-0.0")
    assert again.invert(held[:4], max_new_tokens=12) == trained[0.0].invert(held[:4], max_new_tokens=12)
    assert not (tmp_path / "inv-0.0" / "checkpoints").exists()
    with pytest.raises(ThreatModelError, match="knows_parameters"):
        substitution_learned_attack(held, again, threat=ThreatModel(training_text="in_domain", knows_mechanism=True))


def _cell(**params) -> dict:
    return {
        "name": "s",
        "kind": "substitution_inversion",
        "dataset": "pri-ddx",
        "params": {"eta": 50, "attacks": ["identity", "learned"], "out": "runs/x-{mechanism}-{eta}", **params},
        "attack": {"threat": dict(GRANT)},
        "seeds": [0],
    }


@pytest.mark.parametrize(
    "over, field, message",
    [
        ({"out": ""}, "params.out", "needs `out`"),
        ({"epochs": 0}, "params.epochs", "integer >= 1"),
        ({"train_seed": -1}, "params.train_seed", "integer >= 0"),
        ({"lr": 0}, "params.lr", "number > 0"),
        ({"train_etas": [25, 25]}, "params.train_etas", "distinct finite numbers"),
        ({"train_etas": 75}, "params.train_etas", "list of distinct"),
        ({"decoder": ""}, "params.decoder", "decoder must be"),
        ({"threads": 0}, "params.threads", "integer >= 1"),
        ({"attacks": ["identity"], "epochs": 2}, "params.epochs", "learned attack only"),
    ],
)
def test_cell_validation(over, field, message):
    with pytest.raises(CellError, match=message) as info:
        Cell.from_dict(_cell(**over))
    assert info.value.field == field


def test_learned_attack_needs_its_grant_and_a_run_per_eta():
    cell = _cell()
    cell["attack"] = {"threat": {"training_text": "in_domain", "knows_mechanism": True}}
    with pytest.raises(CellError, match="substitution_learned.*knows_parameters") as info:
        Cell.from_dict(cell)
    assert info.value.field == "attack.threat"
    cell = _cell(out="runs/one-dir")
    cell["grid"] = {"params.eta": [25, 75]}
    with pytest.raises(CellError, match="two grid points") as info:
        Cell.from_dict(cell)
    assert info.value.field == "params.out"
    cell["params"]["out"] = "runs/x-{mechanism}-{eta}"
    Cell.from_dict(cell)
    cell["params"] |= {"out": "runs/one-dir", "train_etas": [25, 75]}  # one inverter for the whole grid
    Cell.from_dict(cell)


@pytest.mark.shared_data
def test_kind_trains_reuses_and_scores_on_pri_ddx(shared_data, tiny_decoder_dir, tmp_path):
    """A real T2T run with a tiny decoder (too small to read Pri-DDX: only the plumbing is checked), trained once per
    eta, reused by a second run; the no-input reference is reported beside it."""
    cell = Cell.from_dict(
        {
            "name": "s",
            "kind": "substitution_inversion",
            "dataset": "pri-ddx",
            "split": "heldout",
            "limit": 4,
            "params": {
                "eta": 1000,
                "attacks": ["identity", "learned"],
                "train_limit": 16,
                "decoder": str(tiny_decoder_dir),
                "out": str(tmp_path / "inv-{mechanism}-{eta}"),
                "epochs": 1,
                "batch_size": 8,
                "max_new_tokens": 4,
                "threads": 1,
            },
            "attack": {"threat": GRANT},
            "seeds": [0, 1],
        }
    )
    m = load_results(run_cell(cell, out_dir=tmp_path, progress=False))["results"][0]["metrics"]
    assert m["word_recovery_identity"]["mean"] == 1.0 and m["replacement_rate"]["mean"] == 0.0
    assert 0.0 <= m["word_recovery_learned"]["mean"] < 0.5 and 0.0 <= m["rouge_l_learned"]["mean"] <= 1.0
    assert m["word_recovery_best"]["mean"] == 1.0 and m["rouge_l_prior"]["mean"] > 0.2
    assert m["train_steps"]["values"] == [2.0, 2.0] and m["reused"]["values"] == [0.0, 0.0]  # trained once, 2 seeds
    assert (tmp_path / "inv-t2t-1000" / "decoder" / "config.json").is_file()
    again = load_results(run_cell(cell, out_dir=tmp_path, progress=False))["results"][0]["metrics"]
    assert again["reused"]["mean"] == 1.0 and again["rouge_l_learned"] == m["rouge_l_learned"]


@pytest.fixture(scope="module")
def tiny_decoder_dir(tmp_path_factory):
    """A random Llama decoder over MiniLM's WordPiece vocabulary (what the PPFT tests use), 512 positions."""
    from textfree.lm.loading import make_tiny_decoder_dir

    return make_tiny_decoder_dir(tmp_path_factory.mktemp("wp-decoder"), hidden=32, layers=2, heads=2, max_positions=512)
