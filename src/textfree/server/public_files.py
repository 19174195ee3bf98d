"""Public files a server publishes beside a model's card: an SnD client-side denoiser of an embed model.

The server's core stays free of any system's code (``tests/test_architecture.py``): it neither imports the SnD
package nor names it. A denoiser is one safetensors file whose header metadata holds its config as JSON (a
``"config"`` entry); :func:`safetensors_metadata` reads that header with the standard library alone (the framing is
checked, no tensor is loaded, nothing is unpickled), and :func:`load_denoiser` keeps the few fields a card names and
refuses a denoiser of another model: its ``encoder_sha256`` must be the served model's weights' sha256, its widths
the model's, and it must name the eta range it was trained for. Reading the tensors themselves is the client's job
(it checks the file against the card's sha256 and loads it with the system's own code).

The file is read into memory once, at startup: the bytes served are exactly the bytes hashed for the card, whatever
happens to the file on disk later.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..tensorfile import SafetensorsError
from ..tensorfile import safetensors_metadata as _read_metadata

__all__ = [
    "DENOISER_FILE",
    "MAX_PUBLIC_FILE_BYTES",
    "PublicFile",
    "PublicFileError",
    "load_denoiser",
    "safetensors_metadata",
]

DENOISER_FILE = "denoiser.safetensors"
#: The largest public file a server publishes (the client's own limit on a denoiser is the same).
MAX_PUBLIC_FILE_BYTES = 512 * 1024 * 1024


class PublicFileError(ValueError):
    """A file that cannot be published (missing, damaged, another format, for another model)."""


@dataclass(frozen=True)
class PublicFile:
    """The bytes of one published file, their sha256 and the metadata its header holds."""

    data: bytes = field(repr=False)
    sha256: str
    metadata: dict[str, Any]

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def etag(self) -> str:
        """The HTTP ``ETag`` of the file: its sha256, quoted."""
        return f'"{self.sha256}"'


def safetensors_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file's header, its framing checked
    (:func:`textfree.tensorfile.safetensors_metadata`); :class:`PublicFileError` names what is wrong."""
    try:
        return _read_metadata(data)
    except SafetensorsError as exc:
        raise PublicFileError(str(exc)) from None


def _positive(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def load_denoiser(path: str, card: dict[str, Any]) -> tuple[PublicFile, dict[str, Any]]:
    """(the file, its card entry) of the denoiser at ``path`` (a file, or a directory holding
    ``denoiser.safetensors``) for the embed model of ``card``. :class:`PublicFileError` for a missing, damaged or
    oversized file, one whose metadata holds no config, one without an eta range, or one trained for another model
    (naming both sha256s): a denoiser for another encoder is refused, never published."""
    model_id = card["id"]
    file = Path(path) / DENOISER_FILE if Path(path).is_dir() else Path(path)
    if not file.is_file():
        raise PublicFileError(f"no denoiser at {str(path)!r} (a file, or a directory holding {DENOISER_FILE})")
    if file.stat().st_size > MAX_PUBLIC_FILE_BYTES:
        raise PublicFileError(f"the denoiser {str(file)!r} is over the {MAX_PUBLIC_FILE_BYTES}-byte limit")
    data = file.read_bytes()
    try:
        meta = safetensors_metadata(data)
    except PublicFileError as exc:
        raise PublicFileError(f"the denoiser {str(file)!r} is damaged: {exc}") from None
    try:
        config = json.loads(meta["config"])
    except (KeyError, ValueError):
        config = None
    if not isinstance(config, dict):
        raise PublicFileError(
            f"{str(file)!r} is not a denoiser file (its metadata holds no JSON config; format {meta.get('format')!r})"
        )
    want, got = card.get("encoder_sha256"), config.get("encoder_sha256")
    if not want:
        raise PublicFileError(f"embed model {model_id!r} names no encoder sha256, so no denoiser can be bound to it")
    if got != want:
        raise PublicFileError(
            f"the denoiser {str(file)!r} was trained for the encoder with sha256 {str(got)[:16]}..., but embed model "
            f"{model_id!r} serves the encoder with sha256 {want[:16]}...: a denoiser for another model is refused"
        )
    for key, model_key in (("token_dim", "encoder_dim"), ("output_dim", "output_dim")):
        if config.get(key) != card.get(model_key):
            raise PublicFileError(
                f"the denoiser {str(file)!r} has {key} {config.get(key)!r}; embed model {model_id!r} has "
                f"{model_key} {card.get(model_key)!r}"
            )
    eta_min, eta_max = config.get("eta_min"), config.get("eta_max")
    if not (_positive(eta_min) and _positive(eta_max) and eta_min <= eta_max):
        raise PublicFileError(
            f"the denoiser {str(file)!r} names no valid eta range (eta_min {eta_min!r}, eta_max {eta_max!r}): a "
            "served denoiser must say which noise levels it was trained for"
        )
    public = PublicFile(data, hashlib.sha256(data).hexdigest(), meta)
    entry = {
        "sha256": public.sha256,
        "bytes": public.size,
        "eta_min": float(eta_min),
        "eta_max": float(eta_max),
        "token_dim": config["token_dim"],
        "output_dim": config["output_dim"],
        "url": f"/v1/models/{model_id}/denoiser",
    }
    return public, entry
