"""One adapter setting for every peft method and full fine-tuning (textfree.lm.adapters), on a tiny causal LM and a
tiny BERT encoder: each method wraps the model, trains only its own parameters, runs forward and backward, and
bad settings are refused naming the value."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from textfree.lm.adapters import ADAPTER_METHODS, AdapterSettings, apply_adapter, lora_config, trainable_parameters
from textfree.lm.loading import make_tiny_decoder_dir


@pytest.fixture(scope="module")
def decoder_dir(tmp_path_factory):
    return make_tiny_decoder_dir(tmp_path_factory.mktemp("dec"), hidden=32, layers=2, heads=2)


@pytest.mark.parametrize("method", ADAPTER_METHODS)
def test_each_method_trains_its_own_parameters_on_a_causal_lm(method, decoder_dir):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(decoder_dir))
    total = sum(p.numel() for p in model.parameters())
    wrapped = apply_adapter(model, AdapterSettings(method=method, num_virtual_tokens=4), "CAUSAL_LM")
    counts = trainable_parameters(wrapped)
    assert counts["trainable"] > 0
    if method == "full":
        assert counts["trainable"] == counts["total"] == total
    else:
        assert counts["trainable"] < total  # only the adapter trains
    ids = torch.randint(0, model.config.vocab_size, (2, 6))
    loss = wrapped(input_ids=ids, labels=ids).loss
    loss.backward()
    grads = [p.grad for p in wrapped.parameters() if p.requires_grad]
    assert all(g is not None for g in grads) and any(float(g.abs().sum()) > 0 for g in grads)


@pytest.mark.parametrize("method", ["lora", "prompt_tuning", "full"])
def test_methods_wrap_an_encoder_classifier(method, tiny_encoder_dir):
    model = AutoModelForSequenceClassification.from_pretrained(str(tiny_encoder_dir), num_labels=2)
    wrapped = apply_adapter(model, AdapterSettings(method=method, target_modules=["query", "value"]), "SEQ_CLS")
    out = wrapped(input_ids=torch.tensor([[1, 5, 7, 2]]), labels=torch.tensor([1]))
    assert out.logits.shape == (1, 2) and torch.isfinite(out.loss)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"method": "adapterx"}, "adapter method must be one of"),
        ({"r": 0}, "adapter r must be an integer >= 1, got 0"),
        ({"alpha": -1}, "adapter alpha must be a number > 0, got -1"),
        ({"dropout": 1.0}, r"adapter dropout must be in \[0, 1\), got 1.0"),
        ({"num_virtual_tokens": 0}, "adapter num_virtual_tokens must be an integer >= 1, got 0"),
    ],
)
def test_bad_settings_are_refused_naming_the_value(change, message):
    with pytest.raises(ValueError, match=message):
        AdapterSettings(**change)


def test_old_lora_dicts_read_as_lora_and_ppft_takes_only_lora():
    old = AdapterSettings.from_dict({"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear"})
    assert old.method == "lora" and old.r == 8
    with pytest.raises(ValueError, match="unknown adapter setting"):
        AdapterSettings.from_dict({"rank": 8})
    with pytest.raises(ValueError, match="PPFT's decoder takes a LoRA adapter"):
        lora_config(AdapterSettings(method="ia3"))
