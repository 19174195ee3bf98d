"""PPFT's PrivacyRestore baseline: the restoration hook's formula (textfree.lm.restoration), the client's weights,
meta vector and noise (textfree.lm.privacy_restore), the attack (textfree.attacks.meta_vector) and the pipeline on a
tiny decoder (textfree.ppft.privacy_restore), whose client sends only the masked text, the noisy meta vector and the
multiplier."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from scipy import stats

from textfree.attacks.meta_vector import fill_spans, fit_threshold, predict_spans, span_recall, span_scores
from textfree.lm.loading import load_decoder, make_tiny_decoder_dir
from textfree.lm.privacy_restore import Release, noisy_meta, span_index, span_weights
from textfree.lm.restoration import RestorationBank, attention_heads, head_outputs, restored, select_heads

ALPHA = 1e-6  # KS significance level of the sampler test


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    path = make_tiny_decoder_dir(tmp_path_factory.mktemp("decoder"), hidden=48, layers=2, heads=2, seed=0)
    model, tok = load_decoder(path)
    return path, model.eval(), tok


def _o_proj_inputs(model, layer: int, ids: torch.Tensor) -> torch.Tensor:
    projections, _, _ = attention_heads(model)
    seen = []
    handle = projections[layer].register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach().clone()))
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        handle.remove()
    return seen[0]


def test_restored_adds_the_projection_scaled_meta_vector_at_the_chosen_head_only(decoder):
    _, model, _ = decoder
    _, n_heads, width = attention_heads(model)
    ids = torch.tensor([[5, 9, 13, 2], [7, 7, 3, 11]])
    before = _o_proj_inputs(model, 1, ids)  # layer 1's input: layer 0 is not edited, so it is the same inside
    u = torch.nn.functional.normalize(torch.randn(2, width, generator=torch.Generator().manual_seed(1)), dim=-1)
    multiplier = torch.tensor([0.5, 2.0])
    with restored(model, [(1, 1)], u, multiplier):
        after = _o_proj_inputs(model, 1, ids)
    o = before.unflatten(-1, (n_heads, width))
    head = o[:, :, 1, :]
    expected = head + u[:, None, :] * (multiplier[:, None, None] * head.norm(dim=-1, keepdim=True)) * (
        head * u[:, None, :]
    ).sum(-1, keepdim=True)
    got = after.unflatten(-1, (n_heads, width))
    assert torch.allclose(got[:, :, 1, :], expected, atol=1e-5)
    assert torch.equal(got[:, :, 0, :], o[:, :, 0, :])  # the other head is untouched
    assert not torch.allclose(expected, head)
    with torch.no_grad():  # outside the block the decoder is itself again
        assert torch.equal(_o_proj_inputs(model, 1, ids), before)
    with pytest.raises(ValueError, match=r"meta must be \[b, 48\]"):
        with restored(model, [(1, 1), (0, 0)], u, multiplier):
            pass
    with pytest.raises(ValueError, match=r"head \(5, 0\) is not in this decoder"):
        with restored(model, [(5, 0)], u, multiplier):
            pass


def test_select_heads_ranks_by_the_mean_shift_and_the_bank_mixes_unit_meta_vectors():
    gen = torch.Generator().manual_seed(0)
    masked = torch.randn(30, 3, 2, 4, generator=gen)
    full = masked.clone()
    full[:, 2, 1] += 3.0  # head (2, 1) moves most
    full[:, 0, 0] += 1.0
    assert select_heads(full, masked, 1) == [(2, 1)]
    assert select_heads(full, masked, 2) == [(0, 0), (2, 1)]
    with pytest.raises(ValueError, match=r"k must be in \[1, 6\]"):
        select_heads(full, masked, 7)
    bank = RestorationBank(3, [(0, 0), (2, 1)], 4)
    bank.init_from_shift(full, masked, [[0], [0, 2], []], generator=gen)
    assert torch.allclose(bank.vectors.norm(dim=-1), torch.ones(3, 2))
    shift = (full - masked)[:2][:, [0, 2], [0, 1]].sum(0)  # span 0: rows 0 and 1
    assert torch.allclose(bank.vectors[0], shift / shift.norm(dim=-1, keepdim=True), atol=1e-6)
    meta = bank.meta(torch.tensor([[0.25, 0.0, 0.75], [1.0, 0.0, 0.0]]))
    assert meta.shape == (2, 8) and torch.allclose(meta.norm(dim=-1), torch.ones(2))
    mixed = (0.25 * bank.vectors[0] + 0.75 * bank.vectors[2]).flatten()
    assert torch.allclose(meta[0], mixed / mixed.norm(), atol=1e-6)


def test_noisy_meta_radius_is_one_gamma_draw_per_vector_ks():
    d, eps, n = 256, 75.0, 3000
    clean = torch.nn.functional.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(0)), dim=-1)
    noisy = noisy_meta(clean, eps, generator=torch.Generator().manual_seed(1))
    radius = (noisy.double() - clean.double()).norm(dim=-1).numpy()
    assert stats.kstest(radius, stats.gamma(a=d, scale=1 / eps).cdf).pvalue > ALPHA
    # a radius per coordinate (the papers' public code) would give a norm near sqrt(d) * d / eps, far outside
    assert abs(radius.mean() - d / eps) < 0.05 * d / eps
    assert torch.equal(noisy_meta(clean, None, generator=torch.Generator()), clean)


def test_span_weights_softmax_over_attention_mass_and_errors(tiny_encoder_dir):
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_encoder_dir)
    enc = AutoModel.from_pretrained(tiny_encoder_dir, attn_implementation="eager").eval()
    text = "A 40-year-old man has a history of asthma. He presents the symptoms of cough, fever."
    w, m = span_weights(enc, tok, text, ["asthma", "fever"], ["cough"])
    assert len(w) == 2 and math.isclose(sum(w), 1.0, rel_tol=1e-6) and m > 0
    w1, m1 = span_weights(enc, tok, text, ["asthma"])
    assert w1 == [1.0] and m1 == 1.0
    with pytest.raises(ValueError, match="span 'gout' does not occur"):
        span_weights(enc, tok, text, ["gout"])
    with pytest.raises(ValueError, match="distinct non-empty spans"):
        span_index(["a", "A"])
    with pytest.raises(ValueError, match="Release.meta must be one finite vector"):
        Release("text", torch.zeros(2, 2), 1.0)


def test_meta_vector_attack_recovers_spans_without_noise_and_fills_the_template():
    bank = RestorationBank(6, [(0, 0), (1, 0)], 8)
    torch.nn.init.normal_(bank.vectors, generator=torch.Generator().manual_seed(0))
    truth = [{0}, {1, 4}, {2, 3, 5}, {5}]
    weights = torch.zeros(4, 6)
    for i, t in enumerate(truth):
        weights[i, list(t)] = 1.0 / len(t)
    directions = bank.meta(torch.eye(6)).detach()
    scores = span_scores(bank.meta(weights).detach(), directions)
    threshold = fit_threshold(scores, truth)
    predicted = predict_spans(scores, threshold)
    assert sum(len(p & t) for p, t in zip(predicted, truth)) >= 6  # most spans from the noiseless vectors
    text = "A 31-year-old male has a history of nausea. The 31-year-old male presents the symptoms of cough. What?"
    filled = fill_spans(text, ["ptosis", "alcohol addiction", "nausea"], {"alcohol addiction", "nausea"})
    assert filled == (
        "A 31-year-old male has a history of nausea, alcohol addiction. The 31-year-old male presents the symptoms "
        "of cough, ptosis. What?"
    )
    assert fill_spans("He presents the symptoms of cough.", ["asthma"], {"asthma"}).startswith(
        "The patient has a history of asthma. He"
    )
    assert span_recall([["Cough", "fever"], ["gout"]], [{"cough"}, set()]) == pytest.approx(1 / 3)


def _row(i: int, removed: list[str], kept: list[str], answer: str) -> dict:
    options = ["Anemia", "GERD", "Sarcoidosis", "Panic attack"]
    full = ", ".join(sorted(removed + kept))
    return {
        "age": 30 + i, "sex": "M", "map2raw_index": 1000 + i,
        "question_init": f"A {30 + i}-year-old male presents the symptoms of {full}. What is the likely diagnosis?",
        "question_mask": f"A {30 + i}-year-old male presents the symptoms of {', '.join(kept)}. "
                         "What is the likely diagnosis?",
        "symptoms": sorted(removed + kept), "antecedents": [], "restore_symptoms": removed,
        "symptoms_mask": removed, "symptoms_remain": kept, "antecedents_mask": [], "antecedents_remain": [],
        "options": options, "correct_answer": answer,
    }  # fmt: skip


@pytest.fixture()
def tiny_ddx(tmp_path) -> Path:
    pools = [(["cough"], ["fever"], "Anemia"), (["heartburn"], ["fever"], "GERD"), (["rash", "cough"], ["pain"],
             "Sarcoidosis"), (["palpitations"], ["pain"], "Panic attack")]  # fmt: skip
    for name, start in (("dev", 0), ("test", 8)):
        rows = [_row(start + i, *pools[i % 4]) for i in range(8)]
        (tmp_path / f"{name}.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return tmp_path


def test_pipeline_trains_releases_only_masked_text_and_noisy_meta_and_attacks(tiny_ddx, tiny_encoder_dir, decoder,
                                                                              tmp_path, monkeypatch):  # fmt: skip
    from textfree.ppft import privacy_restore as restore_qa
    from textfree.ppft.privacy_restore import BANK_JSON, PrivacyRestoreQAConfig, train_privacy_restore_qa

    sent: list[Release] = []
    real_answers = restore_qa._answers

    def recording(model, tokenizer, prompts, releases, cfg):  # what reaches the server, per prompt
        for prompt, release in zip(prompts, releases, strict=True):
            assert isinstance(release, Release) and prompt.startswith(release.text + "\n")  # the rest: public part
            sent.append(release)
        return real_answers(model, tokenizer, prompts, releases, cfg)

    monkeypatch.setattr(restore_qa, "_answers", recording)
    cfg = PrivacyRestoreQAConfig(out=str(tmp_path / "run"), decoder=str(decoder[0]), dataset=str(tiny_ddx),
                                 encoder=str(tiny_encoder_dir), heads=2, epochs=1, batch_size=4, progress=False,
                                 max_new_tokens=4, epsilon=75.0)  # fmt: skip
    summary = train_privacy_restore_qa(cfg)
    n_test = summary["scores"]["heldout"]["mcqa"]["n"]
    assert len(sent) == 2 * n_test and summary["meta_dim"] == 2 * 24
    removed_words = {"cough", "heartburn", "rash", "palpitations"}
    for release in sent:
        assert not any(w in release.text for w in removed_words)  # the removed spans never leave the client as text
        assert release.meta.shape == (48,) and release.meta.norm() > 1.01  # unit vector + noise
    assert 0 <= summary["attack"]["rouge_l"] <= 1 and 0 < summary["attack"]["rouge_l_prior"] <= 1
    assert summary["epsilon_per_release"] == 150.0
    saved = json.loads((tmp_path / "run" / BANK_JSON).read_text())
    assert len(saved["heads"]) == 2 and "cough" in saved["spans"]
    assert (tmp_path / "run" / "adapter" / "adapter_config.json").is_file()
    with pytest.raises(ValueError, match="heads must be an integer >= 1"):
        PrivacyRestoreQAConfig(out="x", decoder="d", heads=0)
    with pytest.raises(ValueError, match="epsilon must be a number > 0"):
        PrivacyRestoreQAConfig(out="x", decoder="d", epsilon=-1)


def test_head_outputs_shape_and_no_ddx_spans_is_an_error(decoder):
    from textfree.data import MCQARecord
    from textfree.ppft.privacy_restore import _spans

    _, model, tok = decoder
    out = head_outputs(model, tok, ["a b c", "a much longer prompt here"])
    assert out.shape == (2, 2, 2, 24)
    record = MCQARecord("r1", "ctx", "What?", ["a", "b"], 0)
    with pytest.raises(ValueError, match="record r1 has no marked privacy spans"):
        _spans(record)
