"""PPFT evaluation tasks (mcqa / open / blind_*), Gaussian noise matching (make_noise), stage-2 task formats
(domain_examples) and the blind control (blind_payload_examples, a blind stage-2 run). Fake or tiny models."""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from textfree.data import MCQARecord, blind_prompt, mcqa_prompt, normalize_answer, ppft_split
from textfree.data.prompts import OPEN_INSTRUCTION, private_text
from textfree.lm.loading import make_tiny_decoder_dir
from textfree.mechanisms import Gaussian, L2Laplace
from textfree.mechanisms.factory import make_noise
from textfree.ppft.batches import (
    STAGE2_TASKS,
    ClientCache,
    PayloadExample,
    TextExample,
    blind_payload_examples,
    collate_payloads,
    domain_examples,
    mcqa_examples,
    open_answer_prompt,
)
from textfree.ppft.config import TextFreeConfig
from textfree.ppft.evaluate import TASKS, evaluate_qa, task_labels
from textfree.ppft.model import TextFreeLM
from textfree.ppft.server import ServerModel
from textfree.ppft.train import Stage2Config, train_stage2

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "data"

RECORDS = [
    MCQARecord(
        "r1",
        "A patient with a cough and a fever.",
        "What is the likely diagnosis?",
        ["Influenza", "Anemia", "GERD", "Croup"],
        0,
    ),
    MCQARecord(
        "r2",
        "A patient with palpitations and chest pain.",
        "What is the likely diagnosis?",
        ["Myocarditis", "Influenza", "Anemia", "PSVT"],
        3,
    ),
    # the private text names the gold answer: a "leaking" record
    MCQARecord(
        "r3",
        "A history of anemia and fatigue.",
        "What is the likely diagnosis?",
        ["Sarcoidosis", "Anemia", "Chagas", "GERD"],
        1,
    ),
]
LABELS = ["Influenza", "Anemia", "GERD", "Croup", "Myocarditis", "PSVT", "Sarcoidosis", "Chagas"]
# gold; another option then gold; gold then another option
ANSWERS = ["Influenza", "Influenza or PSVT", "Anemia, or maybe GERD"]


# ------------------------------------------------------------------------------------------------ make_noise
@pytest.mark.parametrize("epsilon", [1.0, 28.0, 75.0])
def test_make_noise_gaussian_budget_matches_the_l2_laplace_slot_guarantee(epsilon):
    g = make_noise("gaussian", epsilon, dim=384, match="budget")
    assert isinstance(g, Gaussian) and g.calibration == "analytic" and g.delta == 1e-5
    laplace = make_noise("l2_laplace", epsilon, dim=384)
    assert laplace.privacy_loss(2.0).epsilon == pytest.approx(2 * epsilon)
    # unit slots have L2 diameter 2: the same per-slot epsilon as L2-Laplace, at delta 1e-5
    loss = g.privacy_loss(2.0)
    assert loss.epsilon == pytest.approx(2 * epsilon, rel=1e-6) and loss.delta == 1e-5
    # the dimension does not enter the budget match
    assert make_noise("gaussian", epsilon, dim=32, match="budget").sigma == g.sigma
    assert make_noise("gaussian", epsilon, dim=384, match="budget", delta=1e-8).sigma > g.sigma


@pytest.mark.parametrize("epsilon,dim", [(28.0, 384), (75.0, 384), (10.0, 32)])
def test_make_noise_gaussian_norm_matches_the_expected_noise_norm(epsilon, dim):
    g = make_noise("gaussian", epsilon, dim=dim, match="norm")
    assert isinstance(g, Gaussian)
    assert g.expected_noise_norm(dim) == pytest.approx(dim / epsilon, rel=1e-10)
    assert L2Laplace(epsilon).expected_noise_norm(dim) == pytest.approx(dim / epsilon)
    # its formal guarantee is whatever privacy_loss states; in d = 384 (MiniLM) the norm match draws more noise
    # than the budget match (docs/ppft.md: budget-matched norms 5.4 at eps 28, 2.9 at eps 75), so it is stronger
    budget = make_noise("gaussian", epsilon, dim=dim, match="budget")
    if dim == 384:
        assert budget.expected_noise_norm(dim) == pytest.approx({28.0: 5.4, 75.0: 2.9}[epsilon], abs=0.05)
        assert g.sigma > budget.sigma and g.privacy_loss(2.0).epsilon < 2 * epsilon
    assert g.privacy_loss(2.0).epsilon == pytest.approx(Gaussian(g.sigma, 1e-5, "analytic").privacy_loss(2.0).epsilon)


def test_make_noise_edge_cases():
    assert make_noise("gaussian", None, dim=384) is None
    assert make_noise("l2_laplace", None) is None
    lap = make_noise("l2_laplace", 28.0, dim=384, match="norm")  # match only concerns the Gaussian
    assert lap == L2Laplace(28.0)
    with pytest.raises(ValueError, match="'volume'"):
        make_noise("gaussian", 28.0, dim=384, match="volume")
    with pytest.raises(ValueError, match="dim"):
        make_noise("gaussian", 28.0, match="norm")


def test_config_noise_match_is_validated_and_round_trips():
    base = dict(encoder_id="e", encoder_sha256="x", encoder_dim=32, decoder_dim=32)
    assert TextFreeConfig(**base).noise_match == "budget"
    cfg = TextFreeConfig(**base, noise_match="norm")
    assert TextFreeConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))).noise_match == "norm"
    with pytest.raises(ValueError, match="'volume'"):
        TextFreeConfig(**base, noise_match="volume")


# ------------------------------------------------------------------------------------------------ a fake model
class FakePrivatizer:
    def __init__(self, lm):
        self.lm = lm

    def privatize(self, texts, *, generator=None, public=None):
        self.lm.privatized.append({"private": list(texts), "public": list(public), "generator": generator})
        return SimpleNamespace(private=list(texts), public=list(public))


class FakeServer:
    def __init__(self, lm, answers):
        self.lm, self.answers = lm, list(answers)

    def _next(self, n):
        out, self.answers = self.answers[:n], self.answers[n:]
        assert len(out) == n, "the fake ran out of answers"
        return out

    def answer(self, payload, *, max_new_tokens=32, batch_size=16):
        self.lm.answered.append(list(payload.public))
        return self._next(len(payload.public))

    def generate(self, vectors, mask, *, public=None, max_new_tokens=32):
        self.lm.generated.append({"vectors": vectors, "mask": mask, "public": list(public)})
        return self._next(vectors.shape[0])


class FakeLM:
    """Just what evaluate_qa uses: privatizer(), server.answer / server.generate and config."""

    def __init__(self, answers, dim=8, k=4):
        self.config = SimpleNamespace(encoder_dim=dim, k=k)
        self.server = FakeServer(self, answers)
        self.privatizer_calls, self.privatized, self.answered, self.generated = [], [], [], []

    def privatizer(self, epsilon, **kwargs):
        self.privatizer_calls.append((epsilon, kwargs))
        return FakePrivatizer(self)


def _by_id(result):
    return {p["id"]: p for p in result["predictions"]}


def test_task_labels_are_every_option_once_in_order():
    assert task_labels(RECORDS) == LABELS
    assert task_labels(RECORDS[:1], RECORDS[2:]) == ["Influenza", "Anemia", "GERD", "Croup", "Sarcoidosis", "Chagas"]
    twice = MCQARecord("x", "", "Q?", ["anemia.", "Flu"], 0)  # same label after normalisation: first spelling kept
    assert task_labels(RECORDS, [twice]) == LABELS + ["Flu"]


def test_mcqa_accuracy_by_hand():
    lm = FakeLM(ANSWERS)
    r = evaluate_qa(lm, RECORDS, task="mcqa", epsilon=28.0, seed=0, batch_size=2)
    # containment: all three contain the gold text; exclusive: only r1 names no other option
    assert [p["correct"] for p in r["predictions"]] == [True, True, True]
    assert [p["correct_exclusive"] for p in r["predictions"]] == [True, False, False]
    assert (r["n"], r["task"], r["epsilon"], r["k"], r["n_labels"]) == (3, "mcqa", 28.0, 4, None)
    assert r["accuracy"] == 1.0 and r["accuracy_exclusive"] == pytest.approx(1 / 3)
    assert [p["leaks"] for p in r["predictions"]] == [False, False, True] and r["n_no_leak"] == 2
    assert [p["answer"] for p in r["predictions"]] == ANSWERS and [p["gold"] for p in r["predictions"]] == [
        "Influenza",
        "PSVT",
        "Anemia",
    ]
    # the client privatized context + question; options went in clear; two batches (2 + 1)
    assert [c["private"] for c in lm.privatized] == [[private_text(x) for x in RECORDS[:2]], [private_text(RECORDS[2])]]
    assert sum(lm.answered, []) == [mcqa_prompt(x).public for x in RECORDS]
    assert all(isinstance(c["generator"], torch.Generator) for c in lm.privatized)
    assert lm.privatizer_calls == [(28.0, {"k": None, "mechanism": None, "match": None})]
    assert lm.generated == []


def test_open_accuracy_by_hand():
    lm = FakeLM(ANSWERS)
    r = evaluate_qa(lm, RECORDS, task="open", epsilon=None, labels=LABELS, seed=0)
    # r1: gold; r2: names Influenza first -> wrong; r3: names Anemia (gold) first -> right
    assert [p["correct"] for p in r["predictions"]] == [True, False, True]
    assert [p["correct_exclusive"] for p in r["predictions"]] == [True, False, True]
    assert r["accuracy"] == pytest.approx(2 / 3) and r["accuracy_exclusive"] == pytest.approx(2 / 3)
    assert r["accuracy_no_leak"] == pytest.approx(1 / 2) and r["n_no_leak"] == 2
    assert r["n_labels"] == 8 and r["epsilon"] is None and r["task"] == "open"
    # no options are shown: the public part is the open-answer instruction alone
    assert sum(lm.answered, []) == [OPEN_INSTRUCTION] * 3
    assert [c["private"] for c in lm.privatized] == [[private_text(x) for x in RECORDS]]
    assert lm.privatized[0]["generator"] is None  # epsilon None: no noise, no generator


def test_open_labels_default_to_the_records_and_can_flip_the_score():
    # default labels: the options of the evaluated records (same 8 here)
    r = evaluate_qa(FakeLM(ANSWERS), RECORDS, task="open", epsilon=None)
    assert r["n_labels"] == 8 and r["accuracy"] == pytest.approx(2 / 3)
    # with a label set lacking "Influenza", r2's answer "Influenza or PSVT" first names PSVT (gold)
    labels = [l for l in LABELS if l != "Influenza"] + ["Flu"]
    recs = RECORDS[1:]
    r = evaluate_qa(FakeLM(ANSWERS[1:]), recs, task="open", epsilon=None, labels=labels)
    assert [p["correct"] for p in r["predictions"]] == [True, True]
    # no label named at all -> wrong
    r = evaluate_qa(FakeLM(["I do not know"]), RECORDS[:1], task="open", epsilon=None, labels=LABELS)
    assert r["accuracy"] == 0.0


def test_open_labels_missing_a_gold_answer_raise():
    lm = FakeLM(ANSWERS)
    with pytest.raises(ValueError, match="PSVT"):
        evaluate_qa(lm, RECORDS, task="open", epsilon=None, labels=["Influenza", "Anemia"])
    with pytest.raises(ValueError, match="PSVT"):
        evaluate_qa(lm, RECORDS, task="blind_open", epsilon=None, labels=["Influenza", "Anemia"])
    assert lm.answered == [] and lm.generated == []


def test_unknown_task_raises():
    for bad in ("closed", "MCQA", "blind", ""):
        with pytest.raises(ValueError, match="task must be one of"):
            evaluate_qa(FakeLM(ANSWERS), RECORDS, task=bad, epsilon=None)
    assert TASKS == (
        "mcqa",
        "open",
        "blind_mcqa",
        "blind_open",
        "mcqa_rank",
        "blind_mcqa_rank",
        "open_rank",
        "blind_open_rank",
        "length_mcqa",
        "length_open",
        "open_head",
        "mcqa_head",
    )


@pytest.mark.parametrize("task", ["blind_mcqa", "blind_open"])
def test_blind_tasks_send_no_private_prefix(task):
    lm = FakeLM(ANSWERS, dim=8)
    lm.privatizer = lambda *a, **kw: pytest.fail("a blind task must not build a privatizer")
    r = evaluate_qa(lm, RECORDS, task=task, epsilon=28.0, seed=0, batch_size=2, labels=LABELS)
    assert [g["vectors"].shape for g in lm.generated] == [(2, 0, 8), (1, 0, 8)]
    assert [g["mask"].shape for g in lm.generated] == [(2, 0), (1, 0)]
    assert all(g["mask"].dtype == torch.bool for g in lm.generated)
    assert lm.answered == [] and lm.privatized == []
    public = sum((g["public"] for g in lm.generated), [])
    if task == "blind_mcqa":
        assert public == [blind_prompt(x).public for x in RECORDS] == [mcqa_prompt(x).public for x in RECORDS]
        assert [p["correct"] for p in r["predictions"]] == [True, True, True]
    else:
        assert public == [OPEN_INSTRUCTION] * 3
        assert [p["correct"] for p in r["predictions"]] == [True, False, True]
    for text, record in zip(public, RECORDS):
        assert record.context not in text
    assert r["epsilon"] is None and r["k"] is None and r["task"] == task and r["n"] == 3


# ------------------------------------------------------------------------------------------------ real tiny model
@pytest.fixture(scope="module")
def tiny_decoder_dir(tmp_path_factory) -> Path:
    return make_tiny_decoder_dir(tmp_path_factory.mktemp("tiny-decoder"), hidden=32, layers=2, heads=2, seed=0)


@pytest.fixture(scope="module")
def tiny_lm(tiny_encoder_dir, tiny_decoder_dir) -> TextFreeLM:
    return TextFreeLM.build(tiny_decoder_dir, encoder=tiny_encoder_dir, k=4, seed=0).eval()


def test_evaluate_qa_every_task_on_a_tiny_model(tiny_lm, monkeypatch):
    generated = []
    original = tiny_lm.server.generate

    def spy(vectors, mask, **kwargs):
        generated.append(vectors.shape)
        return original(vectors, mask, **kwargs)

    monkeypatch.setattr(tiny_lm.server, "generate", spy)
    for task in TASKS:
        if task.endswith("_rank") or task.endswith("_head"):
            continue  # below
        generated.clear()
        r = evaluate_qa(tiny_lm, RECORDS, task=task, epsilon=28.0, seed=0, max_new_tokens=2)
        blind = task.startswith("blind")
        assert r["task"] == task and r["n"] == 3 and len(r["predictions"]) == 3
        assert [p["id"] for p in r["predictions"]] == ["r1", "r2", "r3"]
        assert all(isinstance(p["answer"], str) for p in r["predictions"])
        assert 0.0 <= r["accuracy"] <= 1.0 and 0.0 <= r["accuracy_exclusive"] <= r["accuracy"]
        assert r["n_no_leak"] == 2
        assert r["epsilon"] == (None if blind else 28.0) and r["k"] == (None if blind else 4)
        assert r["n_labels"] == (8 if task.endswith("open") else None)
        assert len(generated) == 1 and generated[0][0] == 3 and generated[0][-1] == tiny_lm.encoder.dim
        assert (generated[0][1] == 0) == blind  # blind: zero slots; otherwise at least one slot per prompt


@pytest.mark.parametrize("task", ["mcqa_rank", "blind_mcqa_rank"])
def test_ranked_tasks_answer_one_of_the_options_without_generating(tiny_lm, monkeypatch, task):
    monkeypatch.setattr(tiny_lm.server, "generate", lambda *a, **kw: pytest.fail("a ranked task must not generate"))
    ranked = []
    original = tiny_lm.server.rank_options

    def spy(vectors, mask, **kwargs):
        ranked.append((vectors.shape, kwargs["public"], kwargs["options"]))
        return original(vectors, mask, **kwargs)

    monkeypatch.setattr(tiny_lm.server, "rank_options", spy)
    r = evaluate_qa(tiny_lm, RECORDS, task=task, epsilon=28.0, seed=0)
    blind = task.startswith("blind")
    assert r["n"] == 3 and r["epsilon"] == (None if blind else 28.0)
    ((shape, public, options),) = ranked
    assert options == [list(x.options) for x in RECORDS]
    assert public == [mcqa_prompt(x).public for x in RECORDS]
    assert (shape[1] == 0) == blind
    for p, record in zip(r["predictions"], RECORDS):
        assert p["answer"] in record.options
        assert p["correct"] == (p["answer"] == record.options[record.answer_index])
    # the noise seed fixes the answers
    again = evaluate_qa(tiny_lm, RECORDS, task=task, epsilon=28.0, seed=0)
    assert [p["answer"] for p in again["predictions"]] == [p["answer"] for p in r["predictions"]]


@pytest.mark.parametrize("task", ["open_rank", "blind_open_rank"])
def test_label_ranked_open_tasks_pick_one_label_of_the_task_without_generating(tiny_lm, monkeypatch, task):
    monkeypatch.setattr(tiny_lm.server, "generate", lambda *a, **kw: pytest.fail("a ranked task must not generate"))
    ranked, scored = [], []
    original_rank, original_score = tiny_lm.server.rank_options, tiny_lm.server.score_targets

    def spy(vectors, mask, **kwargs):
        ranked.append((vectors.shape, kwargs["public"], kwargs["options"]))
        return original_rank(vectors, mask, **kwargs)

    def score_spy(vectors, mask, **kwargs):
        out = original_score(vectors, mask, **kwargs)
        scored.append((list(kwargs["targets"]), out))
        return out

    monkeypatch.setattr(tiny_lm.server, "rank_options", spy)
    monkeypatch.setattr(tiny_lm.server, "score_targets", score_spy)
    labels = LABELS[:3] + [x.answer for x in RECORDS if x.answer not in LABELS[:3]]
    r = evaluate_qa(tiny_lm, RECORDS, task=task, epsilon=28.0, seed=0, labels=labels)
    blind = task.startswith("blind")
    ((shape, public, options),) = ranked
    assert options == [labels] * 3  # every label of the task, for every record: no options were shown
    assert public == [OPEN_INSTRUCTION] * 3 and (shape[1] == 0) == blind
    assert r["n_labels"] == len(labels) and r["epsilon"] == (None if blind else 28.0)
    # each answer is the label with the highest log-probability for its record, scored like "open"
    targets = sum((t for t, _ in scored), [])
    logp = torch.cat([s for _, s in scored])
    assert targets == labels * 3
    for i, (p, record) in enumerate(zip(r["predictions"], RECORDS)):
        row = logp[i * len(labels) : (i + 1) * len(labels)]
        assert p["answer"] == labels[int(row.argmax())]
        assert p["correct"] == (normalize_answer(p["answer"]) == normalize_answer(record.answer))


def test_tiny_model_privatizer_follows_the_config_noise_match(tiny_lm):
    dim = tiny_lm.encoder.dim
    assert tiny_lm.config.noise_match == "budget"
    assert tiny_lm.privatizer(28.0).privatization.noise == L2Laplace(28.0)
    budget = tiny_lm.privatizer(28.0, mechanism="gaussian").privatization.noise
    assert budget.privacy_loss(2.0).epsilon == pytest.approx(56.0, rel=1e-6)
    norm = tiny_lm.privatizer(28.0, mechanism="gaussian", match="norm").privatization.noise
    assert norm.expected_noise_norm(dim) == pytest.approx(dim / 28.0)
    tiny_lm.server.config = tiny_lm.config.replace(mechanism="gaussian", noise_match="norm")
    try:
        assert tiny_lm.privatizer(28.0).privatization.noise == norm
        assert tiny_lm.privatizer(None).privatization.noise is None
    finally:
        tiny_lm.server.config = tiny_lm.config.replace(mechanism="l2_laplace", noise_match="budget")


# ------------------------------------------------------------------------------------------------ stage-2 data
def test_domain_examples_tasks_and_order():
    assert STAGE2_TASKS == ("mcqa", "open", "restore")
    assert domain_examples(RECORDS) == mcqa_examples(RECORDS)
    both = domain_examples(RECORDS, ["mcqa", "open"])
    assert len(both) == 6 and both[:3] == mcqa_examples(RECORDS)
    for ex, record in zip(both[3:], RECORDS):
        assert ex == TextExample(private=private_text(record), public=OPEN_INSTRUCTION, target=record.answer)
        assert not any(o in ex.public for o in record.options)
    assert domain_examples(RECORDS, ("open", "mcqa")) == both[3:] + both[:3]
    assert domain_examples(RECORDS, ["open"]) == both[3:]
    assert domain_examples([], ["mcqa", "open"]) == []


def test_restore_examples_target_the_private_text_once_each():
    from textfree.ppft.batches import RESTORE_INSTRUCTION

    doubled = list(RECORDS) + list(RECORDS)
    got = domain_examples(doubled, ["restore"])
    assert got == [
        TextExample(private=private_text(r), public=RESTORE_INSTRUCTION, target=private_text(r)) for r in RECORDS
    ]


def test_public_restore_examples_refuse_domain_data_and_keep_what_fits(shared_data):
    from textfree.ppft.batches import RESTORE_INSTRUCTION, general_examples, public_restore_examples

    with pytest.raises(ValueError, match="evaluation or domain data"):
        public_restore_examples(["pri-ddx"])
    texts = [ex.private for ex in general_examples(["alpaca"], limit_per_source=20)]
    every = public_restore_examples(["alpaca"], limit_per_source=20)
    assert [ex.private for ex in every] == list(dict.fromkeys(texts))
    assert all(ex.public == RESTORE_INSTRUCTION and ex.target == ex.private for ex in every)
    short = public_restore_examples(["alpaca"], limit_per_source=20, fits=lambda s: len(s) < 60)
    assert [ex.private for ex in short] == [s for s in dict.fromkeys(texts) if len(s) < 60] and 0 < len(short) < len(
        every
    )


@pytest.mark.parametrize(
    "over, message",
    [
        ({"restore_text": ["alpaca"]}, "'restore' task only: tasks must be"),
        ({"restore_text": [], "tasks": ["restore"]}, "non-empty list"),
        ({"restore_text": "alpaca", "tasks": ["restore"]}, "non-empty list"),
        ({"restore_text_limit": 0}, "restore_text_limit must be an integer >= 1"),
        ({"train_decoder": True}, "inversion attacker's option"),
        ({"train_decoder": "yes", "tasks": ["restore"]}, "true, false or null"),
    ],
)
def test_stage2_config_checks_public_restore_text(over, message):
    from textfree.ppft.train import Stage2Config

    with pytest.raises(ValueError, match=message):
        Stage2Config(init="runs/stage1", out="runs/x", **over)
    assert (
        Stage2Config(
            init="runs/stage1",
            out="runs/x",
            tasks=["restore"],
            restore_text=["alpaca", "gsm8k:train"],
            restore_text_limit=5,
        ).restore_text_limit
        == 5
    )


@pytest.mark.parametrize("tasks", [[], ["mcqa", "mcqa"], ["closed"], ["mcqa", "blind_mcqa"], "mcqa"])
def test_domain_examples_rejects_bad_tasks(tasks):
    with pytest.raises(ValueError, match="stage-2 tasks"):
        domain_examples(RECORDS, tasks)


def test_blind_payload_examples_have_zero_slots():
    examples = domain_examples(RECORDS, ["mcqa", "open"])
    blind = blind_payload_examples(examples, 32)
    assert len(blind) == 6 and all(type(b) is PayloadExample for b in blind)
    for b, ex in zip(blind, examples):
        assert b.vectors.shape == (0, 32) and (b.public, b.target) == (ex.public, ex.target)
    batch = collate_payloads(blind[:4])
    assert batch["vectors"].shape == (4, 0, 32) and batch["mask"].shape == (4, 0) and batch["mask"].dtype == torch.bool
    assert batch["targets"] == [ex.target for ex in examples[:4]]


# ------------------------------------------------------------------------------------------------ blind stage 2
@pytest.fixture
def fixture_data(monkeypatch):
    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))
    return FIXTURES


@pytest.fixture(scope="module")
def init_run(tmp_path_factory, tiny_encoder_dir, tiny_decoder_dir):
    out = tmp_path_factory.mktemp("init") / "init"
    TextFreeLM.build(tiny_decoder_dir, encoder=tiny_encoder_dir, k=4, seed=0).save(out)
    return out


def _blind_cfg(out, init, **kw):
    base = dict(
        out=str(out),
        init=str(init),
        dataset="ddx",
        epsilon=None,
        blind=True,
        epochs=1,
        batch_size=2,
        lr=1e-2,
        limit=2,
        tasks=["mcqa", "open"],
        warmup_steps=1,
        save_every=100,
        log_every=1,
        progress=False,
    )
    return Stage2Config(**(base | kw))


def test_blind_stage2_with_epsilon_raises(fixture_data, init_run, tmp_path):
    with pytest.raises(ValueError, match="blind.*epsilon"):
        train_stage2(_blind_cfg(tmp_path / "bad", init_run, epsilon=28.0))


def test_blind_stage2_trains_on_zero_slot_payloads(fixture_data, init_run, tmp_path, monkeypatch):
    calls = []
    original_forward = ServerModel.forward

    def spy_forward(self, vectors, mask, **kwargs):
        calls.append((vectors.shape, mask.shape, list(kwargs["public"]), list(kwargs["targets"])))
        return original_forward(self, vectors, mask, **kwargs)

    def no_client(*args, **kwargs):
        raise AssertionError("a blind run encodes and privatizes nothing")

    monkeypatch.setattr(ServerModel, "forward", spy_forward)
    monkeypatch.setattr(ClientCache, "__init__", no_client)
    monkeypatch.setattr(TextFreeLM, "privatizer", no_client)
    summary = train_stage2(_blind_cfg(tmp_path / "blind", init_run))

    records = ppft_split("ddx")["train"][:2]
    assert summary["blind"] is True and summary["epsilon"] is None and summary["tasks"] == ["mcqa", "open"]
    assert summary["examples"] == 4 and summary["steps"] == 2 and len(calls) == 2
    assert math.isfinite(summary["final_loss"])
    d = json.loads((init_run / "textfree_config.json").read_text())["encoder_dim"]
    publics, targets = [], []
    for vshape, mshape, public, target in calls:
        assert vshape == (2, 0, d) and mshape == (2, 0)
        publics += public
        targets += target
    # every (task, record) pair once: 2 mcqa publics with options, 2 open-answer instructions
    assert sorted(publics) == sorted([mcqa_prompt(r).public for r in records] + [OPEN_INSTRUCTION] * 2)
    assert sorted(targets) == sorted([r.answer for r in records] * 2)
    for public in publics:
        for r in records:
            assert r.context not in public
    config = json.loads((tmp_path / "blind" / "textfree_config.json").read_text())
    assert config["stage"] == "stage2" and config["epsilon"] is None


def test_random_unit_slots_fill_the_mask_with_unit_vectors():
    from textfree.ppft.evaluate import random_unit_slots

    mask = torch.tensor([[True, True, False], [True, False, False]])
    x = random_unit_slots(mask, 5, torch.Generator().manual_seed(0))
    assert x.shape == (2, 3, 5)
    torch.testing.assert_close(x.norm(dim=-1), mask.float())
    again = random_unit_slots(mask, 5, torch.Generator().manual_seed(0))
    assert torch.equal(x, again) and not torch.equal(x, random_unit_slots(mask, 5, torch.Generator().manual_seed(1)))


@pytest.mark.parametrize("task", ["length_mcqa", "length_open"])
def test_length_tasks_keep_the_slot_count_and_drop_the_content(tiny_lm, monkeypatch, task):
    seen = []
    original = tiny_lm.server.generate

    def spy(vectors, mask, **kwargs):
        seen.append((vectors.clone(), mask.clone(), kwargs["public"]))
        return original(vectors, mask, **kwargs)

    monkeypatch.setattr(tiny_lm.server, "generate", spy)
    r = evaluate_qa(tiny_lm, RECORDS, task=task, epsilon=28.0, seed=0, max_new_tokens=2, labels=LABELS)
    ((vectors, mask, public),) = seen
    base = task.removeprefix("length_")
    parts = [mcqa_prompt(x) if base == "mcqa" else open_answer_prompt(x) for x in RECORDS]
    real = tiny_lm.privatizer(28.0).privatize([p.private for p in parts], seed=0)
    assert torch.equal(mask, real.mask) and public == [p.public for p in parts]  # the true slot counts and public text
    torch.testing.assert_close(vectors.norm(dim=-1), mask.float())
    # no content: the slots are exactly the random draws that follow the client's noise in the evaluation generator,
    # a function of the mask alone
    from textfree.ppft.evaluate import random_unit_slots
    from textfree.rng import resolve_generator

    gen = resolve_generator(None, 0)
    again = tiny_lm.privatizer(28.0).privatize(
        [p.private for p in parts], generator=gen, public=[p.public for p in parts]
    )
    assert torch.equal(again.vectors, real.vectors)
    assert torch.equal(vectors, random_unit_slots(mask, tiny_lm.config.encoder_dim, gen))
    assert (vectors * real.vectors.float()).sum(-1)[mask].abs().max() < 0.9
    assert r["task"] == task and r["n"] == 3 and r["epsilon"] == 28.0


@pytest.fixture
def head_lm(tiny_lm):
    """``tiny_lm`` with a random answer head over three classes, and that head's spec; the projection is put back
    afterwards by hand (monkeypatch's undo deletes a submodule attribute of an nn.Module instead of restoring it)."""
    from textfree.heads.classifier import AttributeAttackConfig, AttributeClassifier, AttributeSpec

    torch.manual_seed(0)
    spec = AttributeSpec("answer", "categorical", ("Influenza", "PSVT", "Anemia"))
    head = AttributeClassifier(
        tiny_lm.config.encoder_dim, [spec], AttributeAttackConfig(count=True, hidden=8), max_count=8
    )
    saved = tiny_lm.server.projection
    tiny_lm.server.projection = saved.with_answer_head(head, torch.zeros(3, saved.config.out_dim))
    try:
        yield tiny_lm, spec
    finally:
        tiny_lm.server.projection = saved


@pytest.mark.parametrize("task", ["open_head", "mcqa_head"])
def test_head_tasks_need_a_model_with_an_answer_head(tiny_lm, task):
    with pytest.raises(ValueError, match=f"'{task}' needs a model with an answer head"):
        evaluate_qa(tiny_lm, RECORDS, task=task, epsilon=28.0, seed=0, labels=LABELS)


def test_open_head_answers_with_the_heads_most_probable_class_on_the_open_payloads(head_lm, monkeypatch):
    """The open task's prompts and payloads (same seed: the same noise), answered by the answer head's argmax."""
    from textfree.ppft.evaluate import head_answers

    lm, spec = head_lm
    monkeypatch.setattr(lm.server, "generate", lambda *a, **k: pytest.fail("open_head must not run the decoder"))
    r = evaluate_qa(lm, RECORDS, task="open_head", epsilon=28.0, seed=0, labels=LABELS)
    parts = [open_answer_prompt(x) for x in RECORDS]
    payload = lm.privatizer(28.0).privatize([p.private for p in parts], seed=0)
    proj = lm.server.projection
    want = [
        spec.classes[int(proj.answer_probabilities(payload.vectors[i, :n].float()).argmax())]
        for i, n in enumerate(payload.lengths)
    ]
    assert head_answers(proj, payload) == want
    assert [p["answer"] for p in r["predictions"]] == want and set(want) <= set(spec.classes)
    assert r["accuracy"] == sum(w == x.answer for w, x in zip(want, RECORDS)) / 3 and r["n_labels"] == len(LABELS)


def test_mcqa_head_answers_with_the_option_the_head_ranks_highest(head_lm, monkeypatch):
    """The 4-option prompts and payloads, answered by the head among each record's own options; an option outside
    its classes counts as probability 0, and ties go to the first option."""
    from textfree.ppft.evaluate import head_answers

    lm, spec = head_lm
    monkeypatch.setattr(lm.server, "generate", lambda *a, **k: pytest.fail("mcqa_head must not run the decoder"))
    r = evaluate_qa(lm, RECORDS, task="mcqa_head", epsilon=28.0, seed=0)
    parts = [mcqa_prompt(x) for x in RECORDS]
    payload = lm.privatizer(28.0).privatize([p.private for p in parts], seed=0)
    proj = lm.server.projection
    probs = [proj.answer_probabilities(payload.vectors[i, :n].float()) for i, n in enumerate(payload.lengths)]
    want = []
    for record, p in zip(RECORDS, probs):  # by hand: each option's class probability, 0 outside the classes
        scores = [float(p[spec.classes.index(o)]) if o in spec.classes else 0.0 for o in record.options]
        want.append(record.options[scores.index(max(scores))])
    assert [p["answer"] for p in r["predictions"]] == want == head_answers(proj, payload, [x.options for x in RECORDS])
    assert r["accuracy"] == sum(w == x.answer for w, x in zip(want, RECORDS)) / 3 and r["n_labels"] is None
    # an option list with none of the classes: the first option (all tied at 0)
    assert head_answers(proj, payload, [["Gout", "Lupus"]] * 3) == ["Gout"] * 3


def test_mcqa_head_sums_the_classes_that_spell_one_option():
    """A head trained before classes were merged by normalised text has one answer under two spellings: the
    option gets their summed probability (0.3 + 0.3 beats 0.4), not the last spelling's alone."""
    from types import SimpleNamespace

    from textfree.ppft.evaluate import head_answers

    probs = torch.tensor([0.3, 0.4, 0.3])
    projection = SimpleNamespace(
        config=SimpleNamespace(answer_classes=("Theft", "Fraud", "theft")),
        answer_embed=torch.zeros(3, 2),
        answer_probabilities=lambda slots: probs,
    )
    payload = SimpleNamespace(vectors=torch.zeros(1, 2, 4), lengths=[2])
    assert head_answers(projection, payload, [["Fraud", "THEFT", "Gout"]]) == ["THEFT"]
    assert head_answers(projection, payload, [["Gout", "Fraud"]]) == ["Fraud"]
