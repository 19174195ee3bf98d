"""The local decoder: a small Llama-architecture LM created from a config and pretrained on general text.

No pretrained decoder is available offline, so PPFT's server decoder is made here:

* :mod:`.corpus` assembles the general-domain corpus from the shared data (never the evaluation sets);
* :mod:`.tokenizer` trains a byte-level BPE tokenizer on it;
* :mod:`.config` holds :class:`DecoderPretrainConfig` and its presets (``tiny``, ``small``, ``gpu``);
* :mod:`.pretrain` trains ``LlamaForCausalLM`` with Accelerate and saves a directory that
  :func:`textfree.lm.loading.load_decoder` loads like any Hugging Face model (samples from it:
  :func:`textfree.lm.generate.generate_text`).

CLI: ``textfree ppft pretrain-decoder --preset small --out runs/decoder-small``. See ``docs/decoder.md``.

The config and the corpus are plain Python; the tokenizer and the pretraining (tokenizers, transformers, torch,
Accelerate) are imported on first use of their names, so ``textfree.lm.local.config`` checks a config without them.
"""

from .config import PRESETS, DecoderPretrainConfig
from .corpus import (
    EXCLUDED,
    GENERAL_SOURCES,
    Corpus,
    CorpusError,
    build_corpus,
    corpus_from_texts,
)

#: Name -> the submodule that defines it, imported when the name is first asked for (heavy: see above).
_LAZY = {
    "pretrain_decoder": "pretrain",
    "finished_pretraining": "pretrain",
    "train_tokenizer": "tokenizer",
    "load_tokenizer": "tokenizer",
    "EOS_TOKEN": "tokenizer",
    "PAD_TOKEN": "tokenizer",
}


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DecoderPretrainConfig",
    "PRESETS",
    "Corpus",
    "CorpusError",
    "GENERAL_SOURCES",
    "EXCLUDED",
    "build_corpus",
    "corpus_from_texts",
    "train_tokenizer",
    "load_tokenizer",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "pretrain_decoder",
    "finished_pretraining",
]
