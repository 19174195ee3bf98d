import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

import textfree.ppft.service  # noqa: E402,F401  (registers the served system "ppft" for apps built in tests)

torch.set_num_threads(2)

SHARED_DATA = Path(
    os.environ.get("TEXTFREE_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data")
).resolve()
SHARED_REASON = "../shared/data not found (set TEXTFREE_DATA)"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(SHARED_REASON)
    return SHARED_DATA


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory) -> Path:
    from textfree.encoders import make_tiny_encoder_dir

    return make_tiny_encoder_dir(tmp_path_factory.mktemp("tiny-encoder"), hidden=32, layers=2, heads=2, seed=0)


@pytest.fixture(scope="session")
def tiny_run_dir(tmp_path_factory, tiny_encoder_dir) -> Path:
    """A served PPFT run of the tiny encoder and a tiny random decoder (textfree.ppft.testing.make_tiny_run)."""
    from textfree.ppft.testing import make_tiny_run

    return make_tiny_run(tmp_path_factory.mktemp("tiny-run"), tiny_encoder_dir)


@pytest.fixture(scope="session")
def tiny_lm(tiny_run_dir):
    from textfree.ppft.model import TextFreeLM

    return TextFreeLM.load(tiny_run_dir)


@pytest.fixture(scope="session")
def tiny_encoder(tiny_encoder_dir):
    from textfree.encoders import ContextualEncoder

    return ContextualEncoder.from_pretrained(tiny_encoder_dir)


@pytest.fixture(scope="session")
def minilm():
    from textfree.encoders import ContextualEncoder

    return ContextualEncoder.from_pretrained(None)


@pytest.fixture(scope="session")
def save_tiny_llama():
    """``save(out, tokenizer, **token_ids)``: a randomly initialised 2-layer Llama (hidden 32, seed 0) sized to
    ``tokenizer``, saved with it to ``out`` (``bos_token_id=...`` etc. go to its config); returns ``out``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    def save(out: Path, tokenizer, **token_ids) -> Path:
        cfg = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=128,
            **token_ids,
        )
        torch.manual_seed(0)
        LlamaForCausalLM(cfg).save_pretrained(out)
        tokenizer.save_pretrained(out)
        return out

    return save
