"""The local decoder: a small Llama-architecture LM created from a config and pretrained on general text.

No pretrained decoder is available offline, so PPFT's server decoder is made here:

* :mod:`.corpus` assembles the general-domain corpus from the shared data (never the evaluation sets);
* :mod:`.tokenizer` trains a byte-level BPE tokenizer on it;
* :mod:`.config` holds :class:`DecoderPretrainConfig` and its presets (``tiny``, ``small``, ``gpu``);
* :mod:`.pretrain` trains ``LlamaForCausalLM`` with Accelerate and saves a directory that
  :func:`textfree.lm.loading.load_decoder` loads like any Hugging Face model (samples from it:
  :func:`textfree.lm.generate.generate_text`).

CLI: ``textfree ppft pretrain-decoder --preset small --out runs/decoder-small``. See ``docs/decoder.md``.
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
from .pretrain import finished_pretraining, pretrain_decoder
from .tokenizer import EOS_TOKEN, PAD_TOKEN, load_tokenizer, train_tokenizer

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
