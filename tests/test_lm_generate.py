"""next_tokens: argmax at temperature 0, the softmax law when sampling, the nucleus cut (fixed seeds, alpha 1e-6)."""

import math

import pytest
import torch
from scipy import stats

from textfree.lm.generate import next_tokens

PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)


def _draws(n: int, **kwargs) -> torch.Tensor:
    logits = PROBS.log().expand(n, -1)
    return next_tokens(logits, generators=[torch.Generator().manual_seed(7)] * n, **kwargs)


def test_temperature_zero_is_argmax():
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]])
    assert next_tokens(logits).tolist() == [1, 0]


def test_sampling_follows_the_softmax_law():
    counts = torch.bincount(_draws(6000, temperature=1.0), minlength=4).numpy()
    assert stats.chisquare(counts, 6000 * PROBS.double().numpy()).pvalue > 1e-6
    # temperature 2 flattens the law to p^(1/2) / sum
    flat = PROBS.sqrt() / PROBS.sqrt().sum()
    counts = torch.bincount(_draws(6000, temperature=2.0), minlength=4).numpy()
    assert stats.chisquare(counts, 6000 * flat.double().numpy()).pvalue > 1e-6


def test_the_nucleus_keeps_the_smallest_set_reaching_top_p():
    # top_p 0.7: 0.5 < 0.7 <= 0.8 -> tokens 0 and 1, renormalised to 0.625 / 0.375
    draws = _draws(6000, temperature=1.0, top_p=0.7)
    counts = torch.bincount(draws, minlength=4).numpy()
    assert counts[2] == counts[3] == 0
    assert stats.chisquare(counts[:2], 6000 * torch.tensor([0.625, 0.375], dtype=torch.float64).numpy()).pvalue > 1e-6
    assert set(_draws(200, temperature=5.0, top_p=0.01).tolist()) == {0}


def test_bad_settings_are_refused():
    logits = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="one generator per row"):
        next_tokens(logits, temperature=1.0, generators=[torch.Generator()])
    for t, p in ((-1.0, 1.0), (1.0, 0.0), (1.0, 1.5), (math.nan, 1.0)):
        with pytest.raises(ValueError, match="temperature"):
            next_tokens(logits, temperature=t, top_p=p, generators=[torch.Generator()] * 2)


def _tiny_decoder():
    """A random 2-layer Llama and a byte-level BPE trained on a few sentences (no files, no network)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from textfree.lm.local import train_tokenizer

    tok = train_tokenizer(["The cat sat on the mat.", "A dog ran in the park."] * 20, 300, model_max_length=64)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=64,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config), tok


def test_generate_text_greedy_equals_hf_generate_and_sampling_follows_its_generator():
    from textfree.lm.generate import generate_text

    model, tok = _tiny_decoder()
    prompts = ["The cat", "A dog ran"]
    ours = generate_text(model, tok, prompts, max_new_tokens=12)
    for prompt, text in zip(prompts, ours):
        ids = tok(prompt, return_tensors="pt").input_ids
        ref = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=12,
            do_sample=False,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
        assert text == tok.decode(ref[0, ids.shape[1] :], skip_special_tokens=True)
    sample = [generate_text(model, tok, prompts, 12, 1.0, 0.9, torch.Generator().manual_seed(3)) for _ in range(2)]
    assert sample[0] == sample[1]  # reproducible from the generator's seed
    assert generate_text(model, tok, prompts, max_new_tokens=0) == ["", ""]
    with pytest.raises(ValueError, match="temperature=0.7"):
        generate_text(model, tok, prompts, temperature=0.7)
