"""Public files a server publishes beside a model's card, and the client bundle they form.

A served model may publish files a client must hold (its handler's ``public_files``: bundle name ->
:class:`PublicFile`; an embed model's denoiser is added by the model table): a PPFT run's client encoder, an SnD
denoiser, RAPT's plain tokens. Each is read into memory once, at startup (:func:`read_public_file`,
:func:`public_dir`): the bytes served are exactly the bytes hashed for the card, whatever happens to the file on disk
later, and the server never loads them as a model. Together they are the model's :class:`Bundle`
(:mod:`textfree.bundle`: a manifest of names, sizes and sha256s, named on the card by its own sha256).

The server's core stays free of any system's code (``tests/test_architecture.py``): it neither imports a system's
package nor names it. A denoiser is one safetensors file whose header metadata holds its config as JSON (a
``"config"`` entry); :func:`safetensors_metadata` reads that header with the standard library alone (the framing is
checked, no tensor is loaded, nothing is unpickled), and :func:`load_denoiser` keeps the few fields a card names and
refuses a denoiser of another model: its ``encoder_sha256`` must be the served model's weights' sha256, its widths
the model's, and it must name the eta range it was trained for. Reading the tensors themselves is the client's job
(it checks the file against the card's sha256 and loads it with the system's own code).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..bundle import DENOISER_FILE, PLAIN_TOKENS_FILE, BundleError, Manifest, check_name
from ..bundle import MAX_FILE_BYTES as MAX_PUBLIC_FILE_BYTES
from ..tensorfile import SafetensorsError
from ..tensorfile import safetensors_metadata as _read_metadata

__all__ = [
    "Bundle",
    "DENOISER_FILE",
    "MAX_PUBLIC_FILE_BYTES",
    "PLAIN_TOKENS_FILE",
    "PublicFile",
    "PublicFileError",
    "load_denoiser",
    "public_dir",
    "read_public_file",
    "safetensors_metadata",
]

#: Weights files a bundle never carries (pickles): a directory holding only these cannot be published.
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


class PublicFileError(ValueError):
    """A file that cannot be published (missing, damaged, another format, for another model)."""


@dataclass(frozen=True)
class PublicFile:
    """The bytes of one published file, their sha256 and the metadata its header holds."""

    data: bytes = field(repr=False)
    sha256: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, data: bytes, metadata: dict[str, Any] | None = None) -> "PublicFile":
        return cls(data, hashlib.sha256(data).hexdigest(), metadata or {})

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def etag(self) -> str:
        """The HTTP ``ETag`` of the file: its sha256, quoted."""
        return f'"{self.sha256}"'


def read_public_file(path: str | Path, what: str) -> PublicFile:
    """The bytes of the file at ``path``, read once (``what`` names it in errors): :class:`PublicFileError` for a
    missing file or one over :data:`MAX_PUBLIC_FILE_BYTES`."""
    file = Path(path)
    if not file.is_file():
        raise PublicFileError(f"{what} {str(file)!r} is missing")
    if file.stat().st_size > MAX_PUBLIC_FILE_BYTES:
        raise PublicFileError(f"{what} {str(file)!r} is over the {MAX_PUBLIC_FILE_BYTES}-byte limit of a public file")
    return PublicFile.of(file.read_bytes())


def public_dir(directory: str | Path, prefix: str) -> dict[str, PublicFile]:
    """The files at the top of a model directory that a client loads it from (config, tokenizer files, safetensors
    weights), each read once, by bundle name ``prefix/<file>``. Other files (a README, a pickled copy of the weights,
    subdirectories) are not published; a directory whose weights are only pickles is refused
    (:class:`PublicFileError`): a bundle never carries one."""
    root = Path(directory)
    if not root.is_dir():
        raise PublicFileError(f"{str(root)!r} is not a directory")
    files: dict[str, PublicFile] = {}
    pickles = []
    for path in sorted(p for p in root.iterdir() if p.is_file() and not p.name.startswith(".")):
        try:
            name = check_name(f"{prefix}/{path.name}")
        except BundleError:
            if path.name.endswith(_PICKLE_SUFFIXES):
                pickles.append(path.name)
            continue
        files[name] = read_public_file(path, "the public file")
    if not any(name.endswith(".safetensors") for name in files):
        found = f" (only {', '.join(pickles)}: pickles are never published)" if pickles else ""
        raise PublicFileError(
            f"{str(root)!r} holds no safetensors weights{found}: re-save it with safetensors "
            "(save_pretrained(..., safe_serialization=True)) to publish it"
        )
    return files


@dataclass(frozen=True)
class Bundle:
    """The client bundle of a served model: its public files by name and their manifest (:mod:`textfree.bundle`).

    ``manifest_file`` holds the manifest's canonical bytes (served at ``GET /v1/models/{id}/bundle``; its sha256
    names the bundle on the card); :meth:`file` the bytes of a member (``GET /v1/models/{id}/bundle/{name}``)."""

    files: Mapping[str, PublicFile]
    manifest: Manifest
    manifest_file: PublicFile

    @classmethod
    def of(cls, files: Mapping[str, PublicFile]) -> "Bundle":
        """The bundle of ``files`` (bundle name -> file); :class:`PublicFileError` for a name or file a bundle may
        not hold (:func:`textfree.bundle.check_name`, the size limits)."""
        try:
            manifest = Manifest.of({name: (f.size, f.sha256) for name, f in files.items()})
        except BundleError as exc:
            raise PublicFileError(f"cannot publish the client bundle: {exc}") from None
        return cls(dict(files), manifest, PublicFile.of(manifest.to_bytes()))

    @property
    def sha256(self) -> str:
        return self.manifest_file.sha256

    def file(self, name: str) -> PublicFile | None:
        return self.files.get(name)

    def entry(self, model_id: str) -> dict[str, Any]:
        """The card's ``client_bundle`` entry: the manifest's sha256, the files' count and total size, its route."""
        return {
            "sha256": self.sha256,
            "bytes": self.manifest.total_bytes,
            "files": len(self.manifest.files),
            "url": f"/v1/models/{model_id}/bundle",
        }


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
    public = read_public_file(file, "the denoiser")
    try:
        meta = safetensors_metadata(public.data)
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
    public = PublicFile(public.data, public.sha256, meta)
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
