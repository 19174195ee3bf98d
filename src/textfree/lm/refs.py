"""How a run names the base model it was trained on: where it is and the sha256 of its weights
(``decoder_ref.json``), so that an adapter is never applied to other weights than its own.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import torch

from ..atomic import _sha256_file, read_json
from ..encoders.loading import state_dict_sha256

__all__: list[str] = ["decoder_sha256", "decoder_ref", "verify_decoder_sha"]


def decoder_sha256(name_or_path: str | os.PathLike, model: torch.nn.Module | None = None) -> str | None:
    """sha256 of a local decoder's weights: the ``model.safetensors`` file, the shards listed in its index (hash of
    the shard hashes), else of the given model's state dict; None when nothing can be hashed."""
    path = Path(name_or_path)
    if path.is_dir():
        single = path / "model.safetensors"
        if single.is_file():
            return _sha256_file(single)
        index = path / "model.safetensors.index.json"
        if index.is_file():
            shards = sorted(set(read_json(index).get("weight_map", {}).values()))
            h = hashlib.sha256()
            for shard in shards:
                h.update(_sha256_file(path / shard).encode())
            return h.hexdigest()
    return state_dict_sha256(model) if model is not None else None


def decoder_ref(name_or_path: str | os.PathLike, model: torch.nn.Module | None = None) -> dict[str, Any]:
    """What ``decoder_ref.json`` holds: where the base decoder is (absolute path if local) and its hash."""
    path = Path(name_or_path)
    location = str(path.resolve()) if path.exists() else str(name_or_path)
    config = getattr(model, "config", None)
    return {
        "name_or_path": location,
        "sha256": decoder_sha256(name_or_path, model),
        "model_type": getattr(config, "model_type", None),
        "hidden_size": getattr(config, "hidden_size", None),
        "vocab_size": getattr(config, "vocab_size", None),
    }


def verify_decoder_sha(location: str, ref: dict[str, Any], where: str | os.PathLike, model=None) -> None:
    """Refuse a base decoder whose weights' sha256 differs from the one ``ref`` (a decoder_ref.json) records."""
    if not ref.get("sha256"):
        return
    sha = decoder_sha256(location, model)
    if sha != ref["sha256"]:
        raise ValueError(
            f"base decoder {location!r} has sha256 {sha}, but {where} records {ref['sha256']}: "
            "the adapter was trained on other weights (pass check_decoder_sha=False to override)"
        )
