"""The local decoder's tokenizer: byte-level BPE trained on the pretraining corpus with ``tokenizers``.

Why not reuse MiniLM's WordPiece (the client encoder's 30,522-token uncased vocabulary)?

* The decoder *writes* the answer the user reads. WordPiece ``bert-base-uncased`` lower-cases and strips accents,
  and its decoding re-joins ``##`` pieces with guessed spaces, so generations would come out lower-case and with
  mangled punctuation/spacing. Byte-level BPE (GPT-2/Llama-3 style) round-trips any UTF-8 text exactly: cased,
  spacing, digits, newlines, symbols, and nothing is ever ``[UNK]``.
* The output softmax is the most expensive layer of a small decoder on a CPU: with hidden size 256 a 30,522-token
  head has 7.8M parameters, more than the rest of the "small" model. A vocabulary of 8,192 keeps most compute in
  the transformer blocks; trained on our own corpus it still compresses English to about 4 characters per token.
* The decoder never needs the encoder's token ids: PPFT conditions it on projected *vectors*, so the two
  vocabularies are independent.

Special tokens: ``<|endoftext|>`` (id 0) is BOS, EOS and the document separator of the packed pretraining stream;
``<pad>`` (id 1) pads batches. Like GPT-2, encoding adds no special tokens by itself (``tok("hi")`` is just the
text's ids): append ``tok.eos_token_id`` to a training target yourself. Training is deterministic: the same texts
and vocabulary size give the same ``tokenizer.json`` (tested).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

__all__ = ["EOS_TOKEN", "PAD_TOKEN", "SPECIAL_TOKENS", "train_tokenizer", "wrap_tokenizer", "load_tokenizer"]

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<pad>"
SPECIAL_TOKENS = (EOS_TOKEN, PAD_TOKEN)


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 8192, *, min_frequency: int = 2, model_max_length: int = 1024
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts`` and wrap it (see :func:`wrap_tokenizer`).

    The vocabulary holds the 2 special tokens, the 256 byte symbols and up to ``vocab_size - 258`` merges (fewer
    when the texts are too small to yield that many pairs seen ``min_frequency`` times), so ``len(tok)`` can be
    below ``vocab_size`` on a small corpus; the decoder is sized from ``len(tok)``.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 256:
        raise ValueError(f"vocab_size must be at least {len(SPECIAL_TOKENS) + 256} (specials + 256 bytes)")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_as_list(texts), trainer=trainer)
    return wrap_tokenizer(bpe, model_max_length=model_max_length)


def _as_list(texts: Iterable[str]) -> Sequence[str]:
    texts = list(texts)
    if not texts or not any(t.strip() for t in texts):
        raise ValueError("cannot train a tokenizer on no text")
    return texts


def wrap_tokenizer(bpe: Tokenizer, *, model_max_length: int = 1024) -> PreTrainedTokenizerFast:
    """``bpe`` as a ``PreTrainedTokenizerFast`` with BOS = EOS = ``<|endoftext|>``, PAD = ``<pad>``, right padding."""
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=EOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        padding_side="right",
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def load_tokenizer(path: str | os.PathLike) -> PreTrainedTokenizerFast:
    """A tokenizer saved by ``save_pretrained`` in ``path`` (our own format: ``tokenizer.json`` + config)."""
    return PreTrainedTokenizerFast.from_pretrained(str(Path(path)))
