"""PPFT model: sequence layout, masking, labels, the client/server split, save/load, generation.

Tiny random models (encoder from make_tiny_encoder_dir, Llama decoder from make_tiny_decoder_dir) keep it fast.
"""

import inspect
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from textfree.encoders import make_tiny_encoder_dir
from textfree.lm.generate import greedy_generate
from textfree.lm.loading import make_tiny_decoder_dir
from textfree.mechanisms import L2Laplace
from textfree.payload import Payload
from textfree.ppft.model import TextFreeLM
from textfree.ppft.server import IGNORE_INDEX, PayloadMismatchError, ServerModel
from textfree.privatizer import Privatizer

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

PRIVATE = [
    "A 46-year-old male has a history of cluster headaches and smoking. What is the likely diagnosis?",
    "A 9-year-old girl presents with fever.",
    "Cough.",
]
PUBLIC = ["Options:\nA. Cluster headache\nB. Anemia", "", "Options:\nA. Flu"]
TARGETS = ["cluster headache", "acute otitis media with effusion", "flu"]


@pytest.fixture(scope="module")
def tiny_decoder_dir(tmp_path_factory) -> Path:
    return make_tiny_decoder_dir(tmp_path_factory.mktemp("tiny-decoder"), hidden=32, layers=2, heads=2, seed=0)


def _perturb_lora(lm: TextFreeLM, seed: int = 1) -> None:
    """LoRA B starts at zero; give it values so the adapter changes the outputs (as after training)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in lm.server.lora_parameters().items():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)


@pytest.fixture
def lm(tiny_encoder_dir, tiny_decoder_dir) -> TextFreeLM:
    model = TextFreeLM.build(tiny_decoder_dir, encoder=tiny_encoder_dir, k=2, seed=0)
    _perturb_lora(model)
    model.eval()
    return model


def _slots(lm, texts=PRIVATE):
    enc = lm.tokenize_private(texts)
    with torch.no_grad():
        return lm.encode_slots(enc["input_ids"], enc["attention_mask"])


# ---------------------------------------------------------------------------------------------- layout and labels
def test_shapes_and_labels_only_on_targets_and_eos(lm):
    vectors, mask = _slots(lm)
    out = lm.server(vectors, mask, public=PUBLIC, targets=TARGETS, all_logits=True)
    tok = lm.server.tokenizer
    b = len(PRIVATE)
    assert out.logits.shape[:2] == out.labels.shape == out.attention_mask.shape
    assert out.logits.shape[0] == b and out.logits.shape[-1] == lm.server.decoder.get_input_embeddings().weight.shape[0]
    suffix = tok("\nAnswer:", add_special_tokens=False)["input_ids"]
    for i in range(b):
        n_slots = int(mask[i].sum())
        pub = tok(PUBLIC[i], add_special_tokens=False)["input_ids"] + suffix if PUBLIC[i] else suffix
        tgt = tok(" " + TARGETS[i], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        start = 1 + n_slots + len(pub)  # BOS + slots + public
        length = start + len(tgt)
        row = out.labels[i].tolist()
        assert row[:start] == [IGNORE_INDEX] * start
        assert row[start:length] == tgt
        assert row[length:] == [IGNORE_INDEX] * (len(row) - length)
        assert out.attention_mask[i].tolist() == [1] * length + [0] * (len(row) - length)
    assert out.n_target_tokens == int((out.labels != IGNORE_INDEX).sum())


def test_loss_is_mean_cross_entropy_over_answer_tokens_only(lm):
    vectors, mask = _slots(lm)
    out = lm.server(vectors, mask, public=PUBLIC, targets=TARGETS, all_logits=True)
    logp = torch.log_softmax(out.logits.detach().float(), dim=-1)
    total, n = 0.0, 0
    for i in range(out.labels.shape[0]):
        for t in range(1, out.labels.shape[1]):
            if out.labels[i, t] != IGNORE_INDEX:
                total -= logp[i, t - 1, out.labels[i, t]].item()
                n += 1
    assert n == out.n_target_tokens > 0
    assert out.loss.item() == pytest.approx(total / n, rel=1e-5)
    assert lm.server(vectors, mask, public=PUBLIC).loss is None
    # the training path computes the LM head only where targets are predicted: same loss, fewer logits
    sparse = lm.server(vectors, mask, public=PUBLIC, targets=TARGETS)
    assert sparse.logits.shape == (n, out.logits.shape[-1]) and sparse.logit_positions.sum() == n
    torch.testing.assert_close(sparse.logits, out.logits[sparse.logit_positions], atol=1e-5, rtol=1e-4)
    assert sparse.loss.item() == pytest.approx(out.loss.item(), rel=1e-5)


def test_long_targets_are_cut_and_get_no_eos(lm):
    vectors, mask = _slots(lm, PRIVATE[:1])
    cfg = lm.config
    lm.server.config = cfg.replace(template=cfg.template.__class__(max_target_tokens=3))
    out = lm.server(vectors, mask, targets=["one two three four five six"])
    labels = [x for x in out.labels[0].tolist() if x != IGNORE_INDEX]
    assert len(labels) == 3 and lm.server.tokenizer.eos_token_id not in labels


def test_padding_slots_and_tokens_do_not_change_a_row(lm):
    """Each row of a padded batch gives the same logits and loss as the row run alone."""
    vectors, mask = _slots(lm)
    assert len(set(mask.sum(1).tolist())) == 3  # three different slot counts
    # garbage in the padded slots and extra all-padding columns must not matter either
    noisy = torch.cat([vectors, torch.zeros(3, 2, vectors.shape[-1])], dim=1)
    noisy[~torch.cat([mask, torch.zeros(3, 2, dtype=torch.bool)], dim=1)] = 7.0
    wide_mask = torch.cat([mask, torch.zeros(3, 2, dtype=torch.bool)], dim=1)
    batch = lm.server(noisy, wide_mask, public=PUBLIC, targets=TARGETS, all_logits=True)
    for i in range(3):
        n = int(mask[i].sum())
        alone = lm.server(
            vectors[i : i + 1, :n],
            mask[i : i + 1, :n],
            public=PUBLIC[i : i + 1],
            targets=TARGETS[i : i + 1],
            all_logits=True,
        )
        length = int(alone.attention_mask.sum())
        assert int(batch.attention_mask[i].sum()) == length
        torch.testing.assert_close(batch.logits[i, :length], alone.logits[0, :length], atol=1e-5, rtol=1e-5)
        assert batch.labels[i, :length].tolist() == alone.labels[0, :length].tolist()
        row_loss = torch.nn.functional.cross_entropy(
            batch.logits[i, :-1], batch.labels[i, 1:], ignore_index=IGNORE_INDEX
        )
        assert row_loss.item() == pytest.approx(alone.loss.item(), rel=1e-5)


def test_stage1_path_equals_the_clean_client_and_trains_the_encoder(lm):
    """encode_slots (stage 1, with gradients) computes what Privatizer(noise=None) releases."""
    enc = lm.tokenize_private(PRIVATE)
    vectors, mask = lm.encode_slots(enc["input_ids"], enc["attention_mask"])
    clean = Privatizer(lm.encoder, None, k=lm.config.k).privatize(PRIVATE)
    torch.testing.assert_close(vectors.detach(), clean.vectors, atol=1e-5, rtol=1e-5)
    assert torch.equal(mask, clean.mask)
    lm.encoder.requires_grad_(True)
    lm(enc["input_ids"], enc["attention_mask"], public=PUBLIC, targets=TARGETS).loss.backward()
    grads = [p.grad for p in lm.encoder.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    base = [p for n, p in lm.server.decoder.named_parameters() if "lora_" not in n]
    assert all(p.grad is None and not p.requires_grad for p in base)


# ---------------------------------------------------------------------------------------------- the client/server split
def test_server_entry_points_take_no_text(lm):
    server = lm.server
    vectors, mask = _slots(lm)
    with pytest.raises(TypeError, match="never text"):
        server("A 46-year-old male with headaches", mask)
    with pytest.raises(TypeError, match="never text"):
        server(["A 46-year-old male with headaches"], mask)
    with pytest.raises(TypeError, match="never text"):
        server.generate("A 46-year-old male", mask)
    with pytest.raises(TypeError, match="Payload"):
        server.answer("A 46-year-old male with headaches")
    with pytest.raises(TypeError, match="Payload"):
        server.choose("A 46-year-old male with headaches", [["Cluster headache"]])
    with pytest.raises(TypeError, match="never text"):
        server.rank_options("A 46-year-old male", mask, public=None, options=[["a"]] * 3)
    with pytest.raises(TypeError, match="list of 3 strings"):
        server(vectors, mask, public="one string for three rows")
    # No entry point has a parameter that could carry the private part.
    allowed = {
        "self",
        "vectors",
        "mask",
        "public",
        "targets",
        "all_logits",
        "max_new_tokens",
        "payload",
        "batch_size",
        "temperature",
        "top_p",
        "generators",
        "options",
    }
    for fn in (
        ServerModel.forward,
        ServerModel.generate,
        ServerModel.answer,
        ServerModel.score_targets,
        ServerModel.rank_options,
        ServerModel.choose,
    ):
        assert set(inspect.signature(fn).parameters) <= allowed, fn.__name__


def test_answer_checks_the_payload_encoder(lm, tmp_path):
    other = TextFreeLM.build(
        lm.server.decoder_ref["name_or_path"], encoder=make_tiny_encoder_dir(tmp_path / "e2", seed=5), k=2
    )
    payload = other.privatizer(75.0).privatize(PRIVATE[:1], seed=0)
    with pytest.raises(PayloadMismatchError, match="encoder"):
        lm.server.answer(payload)


def test_ask_round_trip_and_payload_has_no_text(lm):
    priv = lm.privatizer(75.0)
    payload = priv.privatize(PRIVATE, seed=3, public=PUBLIC)
    raw = payload.to_bytes()
    for word in ("cluster", "headaches", "smoking", "fever"):
        assert word.encode() not in raw.replace(b"Cluster headache", b"")
    answers = lm.server.answer(Payload.from_bytes(raw), max_new_tokens=4)
    assert len(answers) == 3 and all(isinstance(a, str) for a in answers)
    assert lm.ask(PRIVATE[0], public=PUBLIC[0], epsilon=75.0, seed=3, max_new_tokens=4) == answers[:1]


# ---------------------------------------------------------------------------------------------- generation
def test_generation_is_deterministic_and_batch_independent(lm):
    vectors, mask = _slots(lm)
    a = lm.server.generate(vectors, mask, public=PUBLIC, max_new_tokens=6)
    b = lm.server.generate(vectors, mask, public=PUBLIC, max_new_tokens=6)
    assert a == b and len(a) == 3
    for i in range(3):
        n = int(mask[i].sum())
        assert lm.server.generate(
            vectors[i : i + 1, :n], mask[i : i + 1, :n], public=PUBLIC[i : i + 1], max_new_tokens=6
        ) == [a[i]]
    assert lm.server.generate(vectors, mask, public=PUBLIC, max_new_tokens=0) == ["", "", ""]


def test_manual_greedy_loop_matches_transformers_generate(lm):
    dec = lm.server.decoder
    gen = torch.Generator().manual_seed(0)
    embeds = torch.randn(2, 7, 32, generator=gen) * 0.5
    attention = torch.ones(2, 7, dtype=torch.long)
    attention[1, :3] = 0  # left padding
    ours = greedy_generate(dec, embeds, attention, max_new_tokens=5, eos_token_id=None)
    for i in range(2):
        keep = attention[i].bool()
        ref = dec.generate(
            inputs_embeds=embeds[i : i + 1, keep],
            attention_mask=attention[i : i + 1, keep],
            max_new_tokens=5,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
        assert ours[i] == ref[0, -5:].tolist()


# ---------------------------------------------------------------------------------------------- persistence
def test_save_load_round_trip_gives_identical_logits(lm, tmp_path):
    run = lm.save(tmp_path / "run")
    for rel in (
        "textfree_config.json",
        "decoder_ref.json",
        "encoder/config.json",
        "encoder/model.safetensors",
        "projection/config.json",
        "projection/model.safetensors",
        "adapter/adapter_config.json",
        "adapter/adapter_model.safetensors",
    ):
        assert (run / rel).is_file(), rel
    assert not [p for p in run.rglob("*") if p.suffix in (".bin", ".pt", ".pth", ".pkl", ".pickle")]
    loaded = TextFreeLM.load(run)
    loaded.eval()
    assert loaded.config == lm.config and loaded.config.encoder_sha256 == lm.encoder.sha256
    enc = lm.tokenize_private(PRIVATE)
    with torch.no_grad():
        a = lm(enc["input_ids"], enc["attention_mask"], public=PUBLIC, targets=TARGETS)
        b = loaded(enc["input_ids"], enc["attention_mask"], public=PUBLIC, targets=TARGETS)
        a_all = lm.server(*lm.encode_slots(enc["input_ids"], enc["attention_mask"]), public=PUBLIC, all_logits=True)
        b_all = loaded.server(
            *loaded.encode_slots(enc["input_ids"], enc["attention_mask"]), public=PUBLIC, all_logits=True
        )
    assert torch.equal(a_all.logits, b_all.logits)
    assert torch.equal(a.logits, b.logits) and torch.equal(a.loss, b.loss)
    vectors, mask = _slots(lm)
    assert lm.server.generate(vectors, mask, public=PUBLIC, max_new_tokens=5) == loaded.server.generate(
        vectors, mask, public=PUBLIC, max_new_tokens=5
    )
    # a payload from the loaded client is accepted by the loaded server
    loaded.server.answer(loaded.privatizer(75.0).privatize(PRIVATE[:1], seed=1), max_new_tokens=2)
    # the server part alone loads without the encoder
    server = ServerModel.load(run)
    assert not any("encoder" in n for n, _ in server.named_parameters())


def test_load_refuses_another_base_decoder(lm, tmp_path):
    run = lm.save(tmp_path / "run")
    other = make_tiny_decoder_dir(tmp_path / "other-decoder", seed=7)
    with pytest.raises(ValueError, match="sha256"):
        TextFreeLM.load(run, decoder=other)
    TextFreeLM.load(run, decoder=other, check_decoder_sha=False)


def test_a_trained_base_decoder_is_saved_with_the_run_and_loads_back_identical(lm, tmp_path):
    from safetensors.torch import load_file

    from textfree.atomic import read_json

    lora_only = set(lm.server.decoder_parameters())
    assert lora_only == set(lm.server.lora_parameters()) and not (lm.save(tmp_path / "lora") / "decoder").exists()
    lm.server.train_base()
    trained = lm.server.decoder_parameters()
    assert lora_only < set(trained) and all(p.requires_grad for p in trained.values())
    with torch.no_grad():  # as after full fine-tuning: the base weights moved as well as LoRA
        gen = torch.Generator().manual_seed(3)
        for name, p in trained.items():
            if "lora_" not in name:
                p.add_(torch.randn(p.shape, generator=gen) * 0.02)
    run = lm.save(tmp_path / "full")
    ref = read_json(run / "decoder_ref.json")
    assert Path(ref["name_or_path"]) == (run / "decoder").resolve() and (run / "decoder" / "config.json").is_file()
    adapter = load_file(str(run / "adapter" / "adapter_model.safetensors"))
    assert any("lora_B" in k for k in adapter) and all(not v.any() for k, v in adapter.items() if "lora_B" in k)
    loaded = TextFreeLM.load(run)
    loaded.eval()
    assert not loaded.server.trains_base  # loaded for use: the base is frozen again
    vectors, mask = _slots(lm)
    with torch.no_grad():
        a = lm.server(vectors, mask, public=PUBLIC, all_logits=True).logits
        b = loaded.server(vectors, mask, public=PUBLIC, all_logits=True).logits
        untrained_base = TextFreeLM.load(tmp_path / "lora").server(vectors, mask, public=PUBLIC, all_logits=True).logits
    assert torch.allclose(a, b, atol=1e-5)
    assert not torch.allclose(b, untrained_base, atol=1e-3)  # the trained base weights were saved, not only LoRA
    assert ref["sha256"] != read_json(tmp_path / "lora" / "decoder_ref.json")["sha256"]  # not the untrained base


def test_mlp_projection_round_trip(tiny_encoder_dir, tiny_decoder_dir, tmp_path):
    lm = TextFreeLM.build(tiny_decoder_dir, encoder=tiny_encoder_dir, k=4, projection="mlp", projection_hidden=48)
    assert len(lm.server.projection.net) == 3
    loaded = TextFreeLM.load(lm.save(tmp_path / "run"))
    assert loaded.server.projection.config == lm.server.projection.config
    x = torch.randn(2, 3, 32)
    assert torch.equal(lm.server.projection(x), loaded.server.projection(x))


def test_lora_defaults(lm):
    lora = lm.server.decoder.peft_config["default"]
    assert (lora.r, lora.lora_alpha, lora.lora_dropout) == (16, 32, 0.05)
    names = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in lm.server.lora_parameters()}
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"} <= names
    assert "lm_head" not in names
    _ = L2Laplace  # noqa: the mechanism family recorded by default
    assert lm.config.mechanism == "l2_laplace"


def test_sampled_generation_is_reproducible_per_row_and_independent_of_the_batch(lm):
    vectors, mask = _slots(lm)
    gens = lambda seed, n: [torch.Generator().manual_seed(seed + i) for i in range(n)]  # noqa: E731
    a = lm.server.generate(vectors, mask, max_new_tokens=8, temperature=1.5, generators=gens(0, 3))
    b = lm.server.generate(vectors, mask, max_new_tokens=8, temperature=1.5, generators=gens(0, 3))
    assert a == b
    alone = lm.server.generate(vectors[1:2], mask[1:2], max_new_tokens=8, temperature=1.5, generators=gens(1, 1))
    assert alone == [a[1]]  # row 1 drew from its own generator, whatever else was in the batch
    greedy = lm.server.generate(vectors, mask, max_new_tokens=8)
    assert (
        lm.server.generate(vectors, mask, max_new_tokens=8, temperature=1.0, top_p=1e-9, generators=gens(5, 3))
        == greedy
    )


@pytest.mark.parametrize(
    "temperature,top_p", [(1e-300, 1.0), (5e-324, 1.0), (1.0, 1e-300), (1.0, 5e-324), (1e-300, 5e-324)]
)
def test_sampling_at_vanishing_temperature_or_top_p_is_the_argmax_not_a_crash(temperature, top_p):
    """The limits of sampling: temperature -> 0 and top_p -> 0 both leave only the most likely token (in float32
    these overflowed to inf / NaN probabilities or an empty nucleus, and torch.multinomial raised)."""
    from textfree.lm.generate import next_tokens

    logits = torch.tensor([[0.0, 3.0, -2.0, 2.9], [5.0, -1.0, 4.0, 0.0], [-1e4, 0.0, 1e4, 1e4 - 1]])
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    picked = next_tokens(logits, temperature=temperature, top_p=top_p, generators=gens)
    assert picked.tolist() == logits.argmax(dim=-1).tolist() == [1, 0, 2]


# ---------------------------------------------------------------------------------------- multiple choice by likelihood
def test_score_targets_is_the_sum_of_answer_token_log_probs(lm):
    vectors, mask = _slots(lm)
    scores = lm.server.score_targets(vectors, mask, public=PUBLIC, targets=TARGETS)
    full = lm.server(vectors, mask, public=PUBLIC, targets=TARGETS, all_logits=True)
    logp = torch.log_softmax(full.logits.detach().double(), dim=-1)
    by_hand = []
    for i in range(full.labels.shape[0]):
        total = 0.0
        for t in range(1, full.labels.shape[1]):
            if full.labels[i, t] != IGNORE_INDEX:
                total += logp[i, t - 1, full.labels[i, t]].item()
        by_hand.append(total)
    assert scores.dtype == torch.float64 and scores.shape == (3,)
    assert scores.tolist() == pytest.approx(by_hand, rel=1e-5)
    # the training loss is the negated mean of the same token log-probabilities
    assert -scores.sum().item() / full.n_target_tokens == pytest.approx(full.loss.item(), rel=1e-5)
    # a row's score does not depend on the other rows of the batch
    alone = lm.server.score_targets(
        vectors[1:2, : int(mask[1].sum())], mask[1:2, : int(mask[1].sum())], public=PUBLIC[1:2], targets=TARGETS[1:2]
    )
    assert alone.item() == pytest.approx(scores[1].item(), rel=1e-5, abs=1e-6)


def test_rank_options_picks_the_most_likely_full_answer(lm):
    vectors, mask = _slots(lm)
    options = [["cluster headache", "anemia", "flu"], ["acute otitis media", "flu"], ["flu", "croup", "asthma", "gerd"]]
    chosen = lm.server.rank_options(vectors, mask, public=PUBLIC, options=options)
    for i, opts in enumerate(options):
        n = int(mask[i].sum())
        scores = lm.server.score_targets(
            vectors[i : i + 1, :n].expand(len(opts), n, -1),
            mask[i : i + 1, :n].expand(len(opts), n),
            public=[PUBLIC[i]] * len(opts),
            targets=opts,
        )
        assert chosen[i] == opts[int(scores.argmax())]
    # chunking the (row, option) pairs changes nothing
    assert lm.server.rank_options(vectors, mask, public=PUBLIC, options=options, batch_size=1) == chosen


def test_rank_options_and_choose_validate_their_inputs(lm):
    vectors, mask = _slots(lm)
    with pytest.raises(ValueError, match="one entry per payload row"):
        lm.server.rank_options(vectors, mask, public=PUBLIC, options=[["a"], ["b"]])
    with pytest.raises(ValueError, match=r"options\[1\] must be a non-empty list"):
        lm.server.rank_options(vectors, mask, public=PUBLIC, options=[["a"], [], ["c"]])
    with pytest.raises(ValueError, match=r"options\[2\]"):
        lm.server.rank_options(vectors, mask, public=PUBLIC, options=[["a"], ["b"], ["c", "  "]])
    payload = lm.privatizer(75.0).privatize(PRIVATE, seed=0, public=PUBLIC)
    picked = lm.server.choose(payload, [["cluster headache", "anemia"], ["fever", "flu"], ["flu"]])
    assert picked[2] == "flu" and picked[0] in {"cluster headache", "anemia"} and picked[1] in {"fever", "flu"}


# ---------------------------------------------------------------------------------------------- summary vectors
def test_summary_vectors_are_unit_group_means():
    from textfree.ppft.layout import summary_vectors

    slots = torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 1.0], [2.0, 0.0], [0.0, 1.0]])
    one = summary_vectors(slots, 1)  # mean (1, 0.8) -> (5, 4)/sqrt(41)
    torch.testing.assert_close(one, torch.tensor([[5 / 41**0.5, 4 / 41**0.5]]))
    two = summary_vectors(slots, 2)  # groups of 3 and 2: means (1, 1) and (1, 0.5)
    torch.testing.assert_close(two, torch.tensor([[2**-0.5, 2**-0.5], [2 / 5**0.5, 1 / 5**0.5]]))
    assert summary_vectors(slots[:2], 4).shape == (2, 2)  # never more groups than slots
    for bad in (torch.zeros(0, 2), torch.zeros(2)):
        with pytest.raises(ValueError, match="non-empty"):
            summary_vectors(bad, 1)
    with pytest.raises(ValueError, match="groups"):
        summary_vectors(slots, 0)


def test_summary_slots_go_before_the_slots_and_take_no_labels(lm, tmp_path):
    from textfree.ppft.layout import summary_vectors

    vectors, mask = _slots(lm)
    plain = lm.server(vectors, mask, public=PUBLIC, targets=TARGETS, all_logits=True)
    lm.server.config = lm.config.replace(summary_slots=2)
    out = lm.server(vectors, mask, public=PUBLIC, targets=TARGETS, all_logits=True)
    embed_rows, _ = lm.server._rows(vectors, mask, PUBLIC, TARGETS)
    for i in range(len(PRIVATE)):
        n = int(mask[i].sum())
        extra = min(2, n)
        assert int(out.attention_mask[i].sum()) == int(plain.attention_mask[i].sum()) + extra
        # the same target labels, shifted right by the summary vectors
        assert [x for x in out.labels[i].tolist() if x != IGNORE_INDEX] == [
            x for x in plain.labels[i].tolist() if x != IGNORE_INDEX
        ]
        assert out.labels[i, : 1 + extra + n].eq(IGNORE_INDEX).all()
        with torch.no_grad():
            want = lm.server.projection(summary_vectors(vectors[i, :n], 2))
        torch.testing.assert_close(embed_rows[i][1 : 1 + extra], want)  # after BOS, before the slots
    # a blind row (no slots) gets no summary: the same sequence as without the setting
    empty, none = torch.zeros(1, 0, vectors.shape[-1]), torch.zeros(1, 0, dtype=torch.bool)
    with_summary = lm.server(empty, none, public=PUBLIC[:1], targets=TARGETS[:1], all_logits=True)
    lm.server.config = lm.config.replace(summary_slots=0)
    torch.testing.assert_close(
        with_summary.logits, lm.server(empty, none, public=PUBLIC[:1], targets=TARGETS[:1], all_logits=True).logits
    )
    lm.server.config = lm.config.replace(summary_slots=2)
    assert TextFreeLM.load(lm.save(tmp_path / "run")).config.summary_slots == 2
    with pytest.raises(ValueError, match="summary_slots must be an integer >= 0, got -1"):
        lm.config.replace(summary_slots=-1)


def test_summary_only_lays_out_the_summary_vectors_in_place_of_the_slots(lm, tmp_path):
    from textfree.ppft.layout import slot_prefix, summary_vectors

    vectors, mask = _slots(lm)
    plain = lm.server(vectors, mask, public=PUBLIC, targets=TARGETS, all_logits=True)
    lm.server.config = lm.config.replace(summary_slots=1, summary_only=True)
    out = lm.server(vectors, mask, public=PUBLIC, targets=TARGETS, all_logits=True)
    embed_rows, _ = lm.server._rows(vectors, mask, PUBLIC, TARGETS)
    for i in range(len(PRIVATE)):
        n = int(mask[i].sum())
        # one summary vector, no slots: n - 1 positions fewer than PPFT's layout, the same target labels
        assert int(out.attention_mask[i].sum()) == int(plain.attention_mask[i].sum()) - n + 1
        assert [x for x in out.labels[i].tolist() if x != IGNORE_INDEX] == [
            x for x in plain.labels[i].tolist() if x != IGNORE_INDEX
        ]
        with torch.no_grad():
            want = lm.server.projection(summary_vectors(vectors[i, :n], 1))
        torch.testing.assert_close(embed_rows[i][1:2], want)  # right after BOS
        # what follows the summary vector is the public text's token embeddings, not a projected slot
        with torch.no_grad():
            slot0 = lm.server.projection(vectors[i, :1])
        assert not torch.allclose(embed_rows[i][2:3], slot0)
        torch.testing.assert_close(slot_prefix(lm.server.projection, vectors[i, :n], 1, summary_only=True), want)
    assert TextFreeLM.load(lm.save(tmp_path / "run")).config.summary_only is True
    with pytest.raises(ValueError, match="summary_only needs summary_slots >= 1"):
        lm.config.replace(summary_slots=0, summary_only=True)
    with pytest.raises(ValueError, match="summary_only must be true or false, got 'yes'"):
        lm.config.replace(summary_slots=1, summary_only="yes")
    with pytest.raises(ValueError, match="summary_only needs summary_slots >= 1"):
        slot_prefix(lm.server.projection, vectors[0, :2], 0, summary_only=True)
    lm.server.config = lm.config.replace(summary_slots=0, summary_only=False)


# ---------------------------------------------------------------------------------------------- count vectors
def test_count_vectors_index_by_slot_count_and_copy_the_projection():
    from textfree.ppft.projection import Projection, ProjectionConfig

    base = Projection(ProjectionConfig(4, 3))
    assert base.count_vector(5) is None
    proj = base.with_count_vectors(3)
    assert proj.config.count_vectors == 3 and torch.equal(proj.net.weight, base.net.weight)
    assert torch.equal(proj.count, torch.zeros(3, 3))  # new count vectors start at zero
    with torch.no_grad():
        proj.count.copy_(torch.arange(9.0).view(3, 3))
    assert proj.count_vector(1).tolist() == [[0.0, 1.0, 2.0]] and proj.count_vector(3).tolist() == [[6.0, 7.0, 8.0]]
    assert proj.count_vector(7).tolist() == [[6.0, 7.0, 8.0]]  # larger counts share the last vector
    assert proj.count_vector(0) is None
    grown = proj.with_count_vectors(4)
    assert torch.equal(grown.count[:3], proj.count) and torch.equal(grown.count[3], torch.zeros(3))
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match="count_vectors must be an integer >= 0"):
            ProjectionConfig(4, 3, count_vectors=bad)


def test_count_vector_goes_first_trains_and_round_trips(lm, tmp_path):
    vectors, mask = _slots(lm)
    plain = lm.server(vectors, mask, public=PUBLIC, targets=TARGETS, all_logits=True)
    lm.server.projection = lm.server.projection.with_count_vectors(8)
    with torch.no_grad():
        lm.server.projection.count.normal_()
    out = lm.server(vectors, mask, public=PUBLIC, targets=TARGETS, all_logits=True)
    rows, _ = lm.server._rows(vectors, mask, PUBLIC, TARGETS)
    for i in range(len(PRIVATE)):
        n = int(mask[i].sum())
        assert int(out.attention_mask[i].sum()) == int(plain.attention_mask[i].sum()) + 1
        assert [x for x in out.labels[i].tolist() if x != IGNORE_INDEX] == [
            x for x in plain.labels[i].tolist() if x != IGNORE_INDEX
        ]
        want = lm.server.projection.count[min(n, 8) - 1]  # counts above 8 share the 8th
        torch.testing.assert_close(rows[i][1], want.detach().to(rows[i].dtype))  # after BOS, before the slots
    out.loss.backward()
    assert lm.server.projection.count.grad is not None and lm.server.projection.count.grad.abs().sum() > 0
    loaded = TextFreeLM.load(lm.save(tmp_path / "run"))
    assert loaded.server.projection.config.count_vectors == 8
    torch.testing.assert_close(
        loaded.server(vectors, mask, public=PUBLIC, all_logits=True).logits,
        lm.server(vectors, mask, public=PUBLIC, all_logits=True).logits,
    )
    # a blind row (no slots) gets no count vector: the same sequence as PPFT's layout
    empty, none = torch.zeros(1, 0, vectors.shape[-1]), torch.zeros(1, 0, dtype=torch.bool)
    with_count = lm.server._rows(empty, none, PUBLIC[:1], TARGETS[:1])[0][0]
    lm.server.projection = lm.server.projection.with_count_vectors(0)
    torch.testing.assert_close(with_count, lm.server._rows(empty, none, PUBLIC[:1], TARGETS[:1])[0][0])


def test_count_dropout_zeroes_count_vectors_in_training_only():
    from textfree.ppft.projection import Projection, ProjectionConfig

    proj = Projection(ProjectionConfig(4, 3)).with_count_vectors(2, 0.5)
    with torch.no_grad():
        proj.count.fill_(1.0)
    torch.manual_seed(0)
    proj.train()
    dropped = [float(proj.count_vector(2).detach().abs().sum()) == 0.0 for _ in range(2000)]
    assert 0.45 < sum(dropped) / len(dropped) < 0.55  # binomial(2000, 0.5): sd 0.011
    proj.eval()
    assert all(float(proj.count_vector(2).detach().sum()) == 3.0 for _ in range(50))  # never at inference
    assert proj.with_count_vectors(4).config.count_dropout == 0.5
    for bad in (1.0, -0.1, True):
        with pytest.raises(ValueError, match="count_dropout must be a number in \\[0, 1\\)"):
            ProjectionConfig(4, 3, count_dropout=bad)


# ---------------------------------------------------------------------------------------------- answer head
def _answer_head(
    dim: int, classes=("flu", "cold", "otitis"), max_count: int = 4, standardize: bool = False, hidden: int = 8
):
    from textfree.heads.classifier import AttributeAttackConfig, AttributeClassifier, AttributeSpec

    torch.manual_seed(0)
    spec = AttributeSpec("answer", "categorical", tuple(classes))
    return AttributeClassifier(
        dim, [spec], AttributeAttackConfig(count=True, hidden=hidden, standardize=standardize), max_count=max_count
    )


def test_answer_vector_is_the_heads_probabilities_times_the_class_vectors():
    from textfree.ppft.projection import Projection, ProjectionConfig

    head = _answer_head(4)
    embed = torch.arange(9.0).view(3, 3)
    proj = Projection(ProjectionConfig(4, 3)).with_count_vectors(2).with_answer_head(head, embed)
    assert proj.config.answer_classes == ("flu", "cold", "otitis") and proj.config.answer_max_count == 4
    assert proj.config.count_vectors == 2  # the other settings are kept
    slots = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    head.eval()
    features = torch.cat([slots.mean(0), torch.eye(4)[3]])  # 5 slots: counts above 4 share the 4th one-hot
    logits = head.heads["answer"](head.trunk(features.unsqueeze(0)))[0]
    want = torch.softmax(logits, -1) @ embed
    torch.testing.assert_close(proj.answer_vector(slots), want.unsqueeze(0))
    assert proj.answer_vector(torch.zeros(0, 4)) is None
    # frozen and never in dropout mode, even while P_psi trains
    proj.train()
    assert not proj.answer.training and not any(p.requires_grad for p in proj.answer.parameters())
    assert proj.answer_embed.requires_grad and torch.equal(proj.answer_vector(slots), proj.answer_vector(slots))
    # with_count_vectors keeps the head
    torch.testing.assert_close(proj.with_count_vectors(3).answer_vector(slots), proj.answer_vector(slots))
    with pytest.raises(ValueError, match="class_vectors must be \\[3, 3\\], got \\(2, 3\\)"):
        Projection(ProjectionConfig(4, 3)).with_answer_head(head, torch.zeros(2, 3))
    from textfree.heads.classifier import AttributeAttackConfig, AttributeClassifier

    for config, count in ((AttributeAttackConfig(pooling="slots", count=True), 4), (AttributeAttackConfig(), 1)):
        other = AttributeClassifier(4, head.specs, config, max_count=count)
        with pytest.raises(ValueError, match="reads the mean slot and the slot count"):
            Projection(ProjectionConfig(4, 3)).with_answer_head(other, embed)


def test_answer_head_config_is_checked_and_round_trips(tmp_path):
    from textfree.ppft.projection import Projection, ProjectionConfig

    proj = Projection(ProjectionConfig(4, 3)).with_answer_head(_answer_head(4), torch.randn(3, 3))
    loaded = Projection.load(proj.save(tmp_path / "projection"))
    assert loaded.config == proj.config and isinstance(loaded.config.answer_classes, tuple)
    slots = torch.randn(2, 4)
    torch.testing.assert_close(loaded.answer_vector(slots), proj.answer_vector(slots))
    assert not loaded.answer.training
    for bad, words in (
        (("a", "a"), "distinct non-empty strings"),
        (("a", ""), "distinct non-empty strings"),
        (("a",), "at least 2 classes, got 1"),
        ("ab", "distinct non-empty strings"),
    ):
        with pytest.raises(ValueError, match=words):
            ProjectionConfig(4, 3, answer_classes=bad)
    with pytest.raises(ValueError, match="answer_max_count must be an integer >= 1, got 0"):
        ProjectionConfig(4, 3, answer_classes=("a", "b"), answer_max_count=0)
    with pytest.raises(ValueError, match="answer_standardize must be true or false, got 'no'"):
        ProjectionConfig(4, 3, answer_classes=("a", "b"), answer_standardize="no")
    # a head that standardises its mean slot: the flag is kept, saved and read back, and the answer is the same
    head = _answer_head(4, standardize=True)
    proj = Projection(ProjectionConfig(4, 3)).with_answer_head(head, torch.randn(3, 3))
    loaded = Projection.load(proj.save(tmp_path / "standardised"))
    assert proj.config.answer_standardize and loaded.config == proj.config and loaded.answer.standardize
    torch.testing.assert_close(loaded.answer_vector(slots), proj.answer_vector(slots))
    torch.testing.assert_close(
        loaded.answer_probabilities(5.0 * slots), loaded.answer_probabilities(slots)
    )  # scale-free
    # a linear head (hidden 0): saved as answer_hidden 0, read back with no trunk, the same answer
    with pytest.raises(ValueError, match="answer_hidden must be an integer >= 0, got -1"):
        ProjectionConfig(4, 3, answer_classes=("a", "b"), answer_hidden=-1)
    proj = Projection(ProjectionConfig(4, 3)).with_answer_head(_answer_head(4, hidden=0), torch.randn(3, 3))
    loaded = Projection.load(proj.save(tmp_path / "linear"))
    assert loaded.config.answer_hidden == 0 and loaded.config == proj.config and loaded.answer.hidden == 0
    assert not list(loaded.answer.trunk.parameters())
    torch.testing.assert_close(loaded.answer_vector(slots), proj.answer_vector(slots))


def test_answer_vector_over_the_options_shown_renormalises_the_heads_probabilities(tmp_path):
    from textfree.data import options_block
    from textfree.ppft.projection import Projection, ProjectionConfig

    embed = torch.randn(3, 3, generator=torch.Generator().manual_seed(2))
    head = _answer_head(4)  # classes flu, cold, otitis
    plain = Projection(ProjectionConfig(4, 3)).with_answer_head(head, embed)
    proj = Projection(ProjectionConfig(4, 3)).with_answer_head(head, embed, options=True)
    assert proj.config.answer_options and not plain.config.answer_options
    slots = torch.randn(3, 4, generator=torch.Generator().manual_seed(3))
    p = proj.answer_probabilities(slots).detach()
    public = "Choose the correct option.\n" + options_block(["Cold", "measles", " otitis"])  # named by normalised text
    assert proj.option_classes(public) == [1, 2]
    want = (p[1] * embed[1] + p[2] * embed[2]) / (p[1] + p[2])
    torch.testing.assert_close(proj.answer_vector(slots, public)[0], want)
    full = p @ embed
    torch.testing.assert_close(proj.answer_vector(slots)[0], full)  # no public text: every class
    torch.testing.assert_close(proj.answer_vector(slots, "Answer the question.")[0], full)  # no options block
    torch.testing.assert_close(
        proj.answer_vector(slots, options_block(["measles", "mumps"]))[0], full
    )  # no class named
    torch.testing.assert_close(plain.answer_vector(slots, public)[0], full)  # off: every class, options or not
    assert plain.option_classes(public) == []
    # one class named: its vector alone
    torch.testing.assert_close(proj.answer_vector(slots, options_block(["FLU", "mumps"]))[0], embed[0])
    loaded = Projection.load(proj.save(tmp_path / "options"))
    assert loaded.config.answer_options and loaded.config == proj.config
    torch.testing.assert_close(loaded.answer_vector(slots, public), proj.answer_vector(slots, public))
    with pytest.raises(ValueError, match="answer_options must be true or false, got 1"):
        ProjectionConfig(4, 3, answer_classes=("a", "b"), answer_options=1)
    with pytest.raises(ValueError, match="answer_options needs an answer head"):
        ProjectionConfig(4, 3, answer_options=True)


def test_answer_vector_goes_after_the_count_vector_and_before_the_slots(lm):
    from textfree.ppft.layout import slot_prefix

    vectors, mask = _slots(lm)
    saved = lm.server.projection
    try:
        proj = saved.with_count_vectors(8).with_answer_head(
            _answer_head(vectors.shape[-1], max_count=8), torch.randn(3, saved.config.out_dim)
        )
        lm.server.projection = proj
        n = int(mask[0].sum())
        row = slot_prefix(proj, vectors[0, :n], 0)
        assert row.shape[0] == n + 2
        torch.testing.assert_close(row[0], proj.count[min(n, 8) - 1].detach())
        torch.testing.assert_close(row[1], proj.answer_vector(vectors[0, :n])[0])
        torch.testing.assert_close(row[2:], proj(vectors[0, :n].float()))
        out = lm.server(vectors, mask, public=PUBLIC, targets=TARGETS)
        out.loss.backward()
        assert proj.answer_embed.grad is not None and proj.answer_embed.grad.abs().sum() > 0
        assert all(p.grad is None for p in proj.answer.parameters())
        # a blind row (no slots): neither vector
        assert slot_prefix(proj, torch.zeros(0, vectors.shape[-1]), 0).shape[0] == 0
        # over the options shown: each row's own public text reaches the answer vector, in training and generation
        seen = []
        lm.server.projection = proj = proj.with_answer_head(proj.answer, proj.answer_embed.detach(), options=True)
        answer_vector = proj.answer_vector
        proj.answer_vector = lambda slots, public=None: seen.append(public) or answer_vector(slots, public)
        lm.server(vectors, mask, public=PUBLIC, targets=TARGETS)
        assert seen == PUBLIC
        row = slot_prefix(proj, vectors[0, :n], 0, PUBLIC[0])
        torch.testing.assert_close(row[1], answer_vector(vectors[0, :n], PUBLIC[0])[0])
        # a public text cut to max_public_tokens: its row's answer vector weighs over no options (every class)
        config = lm.server.config
        first = len(lm.server.tokenizer(PUBLIC[0], add_special_tokens=False)["input_ids"])
        last = len(lm.server.tokenizer(PUBLIC[2], add_special_tokens=False)["input_ids"])
        assert last < first
        lm.server.config = replace(config, template=replace(config.template, max_public_tokens=last))
        try:
            seen.clear()
            lm.server(vectors, mask, public=PUBLIC, targets=TARGETS)
        finally:
            lm.server.config = config
        assert seen == [None, "", PUBLIC[2]]
    finally:
        lm.server.projection = saved


def test_public_rows_cuts_public_text_and_says_which_rows_the_answer_head_may_read(lm):
    from textfree.ppft.config import PromptTemplate
    from textfree.ppft.layout import public_rows

    tok = lm.server.tokenizer
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in PUBLIC]
    suffix = tok("\nAnswer:", add_special_tokens=False)["input_ids"]
    cut = len(ids[2])
    rows, seen = public_rows(tok, PromptTemplate(max_public_tokens=cut), PUBLIC, 3)
    assert rows == [ids[0][:cut] + suffix, suffix, ids[2] + suffix]
    assert seen == [None, "", PUBLIC[2]]  # the first is cut; the others are read whole
    rows, seen = public_rows(tok, PromptTemplate(), None, 2)
    assert rows == [suffix, suffix] and seen == [None, None]
