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


@torch.no_grad()
def _full_logits_generate(model, embeds, attention, *, max_new_tokens, eos_token_id, temperature=0.0, generators=None):
    """The loop as it was before ``logits_to_keep``: every forward call computes logits for all its positions and
    the last one is used (the reference the lean loop must match token for token)."""
    from textfree.lm.generate import next_tokens

    b = embeds.shape[0]
    out = [[] for _ in range(b)]
    attention = attention.long()
    positions = (attention.cumsum(dim=1) - 1).clamp_min(0)
    finished = torch.zeros(b, dtype=torch.bool)
    result = model(inputs_embeds=embeds, attention_mask=attention, position_ids=positions, use_cache=True)
    assert result.logits.shape[1] == embeds.shape[1]  # really the full computation
    for step in range(max_new_tokens):
        ids = next_tokens(result.logits[:, -1, :], temperature=temperature, top_p=0.9, generators=generators)
        ids = torch.where(finished, torch.full_like(ids, eos_token_id if eos_token_id is not None else 0), ids)
        for i in range(b):
            if not finished[i] and (eos_token_id is None or int(ids[i]) != eos_token_id):
                out[i].append(int(ids[i]))
        if eos_token_id is not None:
            finished |= ids == eos_token_id
        if bool(finished.all()) or step == max_new_tokens - 1:
            break
        attention = torch.cat([attention, attention.new_ones(b, 1)], dim=1)
        positions = positions[:, -1:] + 1
        result = model(
            inputs_embeds=model.get_input_embeddings()(ids.unsqueeze(1)),
            attention_mask=attention,
            position_ids=positions,
            past_key_values=result.past_key_values,
            use_cache=True,
        )
    return out


def _left_padded_batch(model, tok, prompts):
    rows = [tok(p, return_tensors="pt").input_ids[0] for p in prompts]
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), tok.pad_token_id, dtype=torch.int64)
    attention = torch.zeros(len(rows), length, dtype=torch.int64)
    for i, r in enumerate(rows):
        ids[i, length - len(r) :], attention[i, length - len(r) :] = r, 1
    with torch.no_grad():
        return model.get_input_embeddings()(ids), attention


@pytest.mark.parametrize("eos", [True, False])
def test_last_position_logits_give_the_same_tokens_as_the_full_computation(eos):
    """The loop asks every forward call for the last position's logits alone (``logits_to_keep=1``); greedy and
    sampled tokens are those of the full-logits loop, on a left-padded batch of unequal prompts."""
    from textfree.lm.generate import greedy_generate, last_logits_kwargs

    model, tok = _tiny_decoder()
    model.eval()
    assert last_logits_kwargs(model) == {"logits_to_keep": 1}
    embeds, attention = _left_padded_batch(model, tok, ["The cat sat on", "A dog", "The park", "A cat ran in the"])
    eos_id = tok.eos_token_id if eos else None
    kept = []
    hook = model.register_forward_hook(lambda _m, _a, out: kept.append(out.logits.shape[1]))
    try:
        ours = greedy_generate(model, embeds, attention, max_new_tokens=20, eos_token_id=eos_id)
    finally:
        hook.remove()
    assert kept and set(kept) == {1}  # the prefill too: one position of logits per row
    assert ours == _full_logits_generate(model, embeds, attention, max_new_tokens=20, eos_token_id=eos_id)
    assert sum(map(len, ours)) > 0
    for seed in range(3):
        gens = lambda: [torch.Generator().manual_seed(seed * 10 + i) for i in range(4)]  # noqa: E731
        sampled = greedy_generate(
            model,
            embeds,
            attention,
            max_new_tokens=20,
            eos_token_id=eos_id,
            temperature=1.3,
            top_p=0.9,
            generators=gens(),
        )
        ref = _full_logits_generate(
            model, embeds, attention, max_new_tokens=20, eos_token_id=eos_id, temperature=1.3, generators=gens()
        )
        assert sampled == ref


def test_greedy_batch_equals_hf_generate_and_models_without_logits_to_keep_still_run():
    """Row by row, the lean loop's greedy tokens on a left-padded batch are Hugging Face ``generate``'s (which also
    keeps one position of logits); a model whose forward has no ``logits_to_keep`` gets full logits, same tokens."""
    from textfree.lm.generate import greedy_generate, last_logits_kwargs

    model, tok = _tiny_decoder()
    model.eval()
    prompts = ["The cat sat on", "A dog", "The park"]
    embeds, attention = _left_padded_batch(model, tok, prompts)
    ours = greedy_generate(model, embeds, attention, max_new_tokens=15, eos_token_id=None)
    for prompt, row in zip(prompts, ours):
        ids = tok(prompt, return_tensors="pt").input_ids
        ref = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=15,
            min_new_tokens=15,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
        )
        assert row == ref[0, ids.shape[1] :].tolist()

    class Plain(torch.nn.Module):  # a causal LM whose forward knows nothing of logits_to_keep
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def get_input_embeddings(self):
            return self.inner.get_input_embeddings()

        def forward(self, inputs_embeds, attention_mask, position_ids, past_key_values=None, use_cache=False):
            return self.inner(
                inputs_embeds=inputs_embeds,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=past_key_values,
                use_cache=use_cache,
            )

    plain = Plain(model)
    assert last_logits_kwargs(plain) == {}
    assert greedy_generate(plain, embeds, attention, max_new_tokens=15, eos_token_id=None) == ours


def test_a_peft_wrapped_decoder_keeps_one_position_of_logits():
    from peft import LoraConfig, get_peft_model

    from textfree.lm.generate import greedy_generate, last_logits_kwargs

    model, tok = _tiny_decoder()
    wrapped = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    wrapped.eval()
    assert last_logits_kwargs(wrapped) == {"logits_to_keep": 1}
    embeds, attention = _left_padded_batch(model, tok, ["The cat sat on", "A dog"])
    assert greedy_generate(wrapped, embeds, attention, max_new_tokens=10, eos_token_id=None) == _full_logits_generate(
        wrapped, embeds, attention, max_new_tokens=10, eos_token_id=None
    )
