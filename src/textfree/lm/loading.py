"""Any Hugging Face causal LM (the server's decoder) or encoder by name or path, plus tiny ones built from a config.

``load_decoder("meta-llama/Llama-3.2-1B-Instruct")`` is what a user with a GPU passes; here, where no pretrained
decoder is available offline, decoders are small Llama-architecture models created by :func:`make_tiny_decoder_dir`
(random, for tests) or by the local pretraining step (``textfree.lm.local``), saved with ``save_pretrained`` and
loaded back through the same ``from_pretrained`` code.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
)

__all__ = [
    "ENCODER_HEADS",
    "load_encoder",
    "load_decoder",
    "load_decoder_tokenizer",
    "load_input_embeddings",
    "make_tiny_decoder_dir",
    "DecoderLoadError",
]

# names of a causal LM's token-embedding table in its state dict (Llama/Mistral/Qwen, GPT-2, BLOOM, GPT-NeoX)
EMBEDDING_KEYS = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight")


class DecoderLoadError(RuntimeError):
    """A decoder could not be found or loaded."""


def load_decoder_tokenizer(name_or_path: str | os.PathLike):
    """The decoder's tokenizer, with a pad token (the EOS token if it has none) and right padding."""
    try:
        tok = AutoTokenizer.from_pretrained(str(name_or_path))
    except OSError as exc:
        raise DecoderLoadError(f"could not load the decoder tokenizer {str(name_or_path)!r}: {exc}") from exc
    if tok.eos_token is None:
        if tok.sep_token is not None:  # WordPiece tokenizers: [SEP] ends a sequence
            tok.eos_token = tok.sep_token
        else:
            raise DecoderLoadError(f"decoder tokenizer {str(name_or_path)!r} has no EOS token")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "right"
    return tok


def load_decoder(name_or_path: str | os.PathLike, *, dtype: torch.dtype = torch.float32, device: str = "cpu"):
    """(model, tokenizer) of a causal LM through ``AutoModelForCausalLM.from_pretrained``."""
    tok = load_decoder_tokenizer(name_or_path)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(name_or_path), dtype=dtype)
    except OSError as exc:
        raise DecoderLoadError(f"could not load decoder {str(name_or_path)!r}: {exc}") from exc
    model.to(device)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tok.pad_token_id
    return model, tok


#: Heads :func:`load_encoder` puts on an encoder: none (hidden states), a sequence classifier, a token classifier.
ENCODER_HEADS = (None, "sequence", "token")


def load_encoder(name_or_path: str | os.PathLike | None, *, head: str | None = None, num_labels: int | None = None):
    """(model, tokenizer) of an encoder (BERT family) by hub name or path (``None`` or ``"default"``: all-MiniLM-L6-v2),
    through ``AutoModel`` or, with ``head``, ``AutoModelFor{Sequence,Token}Classification`` with ``num_labels``."""
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoModelForTokenClassification

    from ..encoders.loading import EncoderLoadError, resolve_encoder_path

    if head not in ENCODER_HEADS:
        raise ValueError(f"head must be one of {ENCODER_HEADS}, got {head!r}")
    if head is not None and (isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 2):
        raise ValueError(f"num_labels must be an integer >= 2 with a {head} head, got {num_labels!r}")
    path = resolve_encoder_path(None if name_or_path == "default" else name_or_path)
    kind = {None: AutoModel, "sequence": AutoModelForSequenceClassification, "token": AutoModelForTokenClassification}[
        head
    ]
    extra = {} if head is None else {"num_labels": num_labels}
    try:
        tok = AutoTokenizer.from_pretrained(path)
        model = kind.from_pretrained(path, **extra)
    except OSError as exc:
        raise EncoderLoadError(f"could not load encoder {str(name_or_path)!r}: {exc}") from exc
    return model, tok


def load_input_embeddings(name_or_path: str | os.PathLike) -> torch.Tensor:
    """Only the decoder's input-embedding table [V, d] (float32), read from its safetensors file(s) without loading
    any other weight (what the vLLM gateway needs to embed the public tokens)."""
    import json

    from safetensors import safe_open

    path = Path(name_or_path)
    single, index = path / "model.safetensors", path / "model.safetensors.index.json"
    if single.is_file():
        with safe_open(str(single), framework="pt") as fh:
            where = {key: single for key in fh.keys()}
    elif index.is_file():
        where = {key: path / shard for key, shard in json.loads(index.read_text()).get("weight_map", {}).items()}
    else:
        raise DecoderLoadError(
            f"{str(name_or_path)!r} is not a local decoder directory with model.safetensors (or a sharded index)"
        )
    found = sorted(k for k in where if k.endswith(EMBEDDING_KEYS))
    if len(found) != 1:
        raise DecoderLoadError(
            f"expected one token-embedding table ({', '.join(EMBEDDING_KEYS)}) in {str(path)!r}, found "
            f"{found or 'none'}"
        )
    with safe_open(str(where[found[0]]), framework="pt") as fh:
        table = fh.get_tensor(found[0])
    if table.dim() != 2:
        raise DecoderLoadError(f"{found[0]} in {str(path)!r} has shape {tuple(table.shape)}, not [vocab, hidden]")
    return table.to(torch.float32)


def make_tiny_decoder_dir(
    out_dir: str | os.PathLike,
    *,
    tokenizer=None,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 2,
    intermediate: int | None = None,
    max_positions: int = 1024,
    seed: int = 0,
) -> Path:
    """A randomly initialised Llama-architecture decoder saved with its tokenizer (default: MiniLM's WordPiece)."""
    from ..encoders.loading import resolve_encoder_path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(resolve_encoder_path(None))
        tokenizer.eos_token = tokenizer.sep_token
        tokenizer.bos_token = tokenizer.cls_token
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate or hidden * 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
