"""Client-side encoders: contextual (PPFT) and embedding-table (SnD, RAPT, BeamClean)."""

from .contextual import ContextualEncoder, EncodedBatch
from .loading import DEFAULT_ENCODER_ID, EncoderLoadError, encoder_id, resolve_encoder_path, weights_sha256
from .table import EmbeddingTableEncoder
from .tiny import make_tiny_encoder_dir

ENCODER_KINDS = {"contextual": ContextualEncoder, "embedding_table": EmbeddingTableEncoder}


def load_encoder(name_or_path=None, kind: str = "contextual", **kwargs):
    """Load an encoder of ``kind`` ('contextual' or 'embedding_table') by hub name or local path."""
    try:
        cls = ENCODER_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown encoder kind {kind!r}; known: {sorted(ENCODER_KINDS)}") from None
    return cls.from_pretrained(name_or_path, **kwargs)


__all__ = [
    "ContextualEncoder",
    "EmbeddingTableEncoder",
    "EncodedBatch",
    "EncoderLoadError",
    "DEFAULT_ENCODER_ID",
    "ENCODER_KINDS",
    "encoder_id",
    "load_encoder",
    "make_tiny_encoder_dir",
    "resolve_encoder_path",
    "weights_sha256",
]
