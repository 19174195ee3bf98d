"""Client bundles: every public file a client must hold for a served model, named by one sha256.

A server publishes, beside a model's card, the files a client needs to privatize for that model and to read its
answers: a PPFT run's client encoder (``encoder/``: config, tokenizer, weights) and slot centre, an SnD denoiser, RAPT's
plain tokens. They form one *bundle*: a **manifest** (canonical JSON: every file's name, size and sha256) and the
files. The card names the bundle by the sha256 of its manifest's bytes (``client_bundle``), the manifest names each
file by its sha256, so one hash on the card pins every byte a client uses.

Only safetensors, JSON and tokenizer text files may be in a bundle (:data:`ALLOWED_SUFFIXES`): never a pickle
(``.bin``, ``.pt``, ``.pkl``). Names are relative paths of plain components (:func:`check_name`): no ``..``, no
absolute path, no hidden file.

The same maths serves both sides: the server builds a :class:`Manifest` of the files it read once at startup, the
client checks what it downloads against it and keeps a verified copy in a cache directory named by the sha256
(:func:`install`: written beside it and renamed into place, so a partial download never looks complete;
:func:`verify_dir`: every file checked again before use). No model and no torch here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

from .atomic import _sha256_file

__all__ = [
    "ALLOWED_SUFFIXES",
    "BundleError",
    "BundleFile",
    "CENTER_FILE",
    "DENOISER_FILE",
    "ENCODER_DIR",
    "FORMAT",
    "MANIFEST_NAME",
    "MAX_BUNDLE_BYTES",
    "MAX_FILE_BYTES",
    "MAX_FILES",
    "MAX_MANIFEST_BYTES",
    "Manifest",
    "PLAIN_TOKENS_FILE",
    "check_name",
    "install",
    "verify_dir",
]

FORMAT = "textfree.client-bundle/1"
#: The manifest's name in a cached bundle directory (never a member's name: members are listed in it).
MANIFEST_NAME = "manifest.json"
#: What a bundle may hold: safetensors tensors, JSON, tokenizer text (vocabularies, merges, chat templates).
ALLOWED_SUFFIXES = (".safetensors", ".json", ".txt", ".jinja")
#: The largest file of a bundle, the largest bundle, the most files, the largest manifest (both sides hold to them).
MAX_FILE_BYTES = 512 * 1024 * 1024
MAX_BUNDLE_BYTES = 2 * 1024 * 1024 * 1024
MAX_FILES = 64
MAX_MANIFEST_BYTES = 64 * 1024

# the members a client knows by name
#: The client encoder's directory (config.json, tokenizer files, model.safetensors): what the client privatizes with.
ENCODER_DIR = "encoder"
#: A PPFT run's public slot centre (centre, or centre + subspace map); the card carries the same values.
CENTER_FILE = "slot_center.safetensors"
#: An SnD embed model's client-side denoiser.
DENOISER_FILE = "denoiser.safetensors"
#: A RAPT classify model's public plain tokens.
PLAIN_TOKENS_FILE = "plain_tokens.json"

_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_MAX_DEPTH = 3
_SHA256 = re.compile(r"[0-9a-f]{64}")


class BundleError(ValueError):
    """A bundle, manifest or file that is not what it must be (named in the message)."""


def check_name(name: object) -> str:
    """``name`` when it may name a bundle file (a relative path of at most three plain components, each letters,
    digits, ``.``, ``_`` and ``-`` not starting with a dot, ending in one of :data:`ALLOWED_SUFFIXES`); else
    :class:`BundleError` saying why."""
    if not isinstance(name, str) or not name or len(name) > 256:
        raise BundleError(f"{name!r} is not a bundle file name")
    parts = name.split("/")
    if len(parts) > _MAX_DEPTH or not all(_COMPONENT.fullmatch(p) and p not in (".", "..") for p in parts):
        raise BundleError(
            f"{name!r} is not a bundle file name (a relative path of at most {_MAX_DEPTH} components of letters, "
            "digits, '.', '_' and '-', none hidden, no '..')"
        )
    if name == MANIFEST_NAME:
        raise BundleError(f"{name!r} is the manifest's own name, not a member's")
    if not name.endswith(ALLOWED_SUFFIXES):
        raise BundleError(
            f"{name!r}: a bundle holds only safetensors, JSON and tokenizer text files ({', '.join(ALLOWED_SUFFIXES)}),"
            " never a pickle (.bin, .pt, .pkl)"
        )
    return name


@dataclass(frozen=True)
class BundleFile:
    """One member of a bundle as the manifest names it."""

    name: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """The files of a bundle, sorted by name; :meth:`to_bytes` is its one canonical form, hashed for the card."""

    files: tuple[BundleFile, ...]

    def __post_init__(self) -> None:
        names = [f.name for f in self.files]
        if names != sorted(set(names)):
            raise BundleError("a bundle's files must have distinct names, sorted")
        if len(names) > MAX_FILES:
            raise BundleError(f"a bundle holds at most {MAX_FILES} files, got {len(names)}")
        for f in self.files:
            check_name(f.name)
            if isinstance(f.bytes, bool) or not isinstance(f.bytes, int) or not 0 <= f.bytes <= MAX_FILE_BYTES:
                raise BundleError(f"bundle file {f.name!r}: its size {f.bytes!r} is not a byte count in [0, "
                                  f"{MAX_FILE_BYTES}]")  # fmt: skip
            if not isinstance(f.sha256, str) or not _SHA256.fullmatch(f.sha256):
                raise BundleError(f"bundle file {f.name!r}: its sha256 {f.sha256!r} is not 64 lowercase hex digits")
        if self.total_bytes > MAX_BUNDLE_BYTES:
            raise BundleError(f"the bundle's files come to {self.total_bytes} bytes, over the {MAX_BUNDLE_BYTES} limit")

    @classmethod
    def of(cls, files: Mapping[str, tuple[int, str]]) -> "Manifest":
        """The manifest of ``files`` (name -> (size, sha256))."""
        return cls(tuple(BundleFile(name, size, sha) for name, (size, sha) in sorted(files.items())))

    @classmethod
    def from_bytes(cls, data: bytes) -> "Manifest":
        """The manifest in ``data``, which must be exactly its canonical form (:class:`BundleError` otherwise)."""
        if len(data) > MAX_MANIFEST_BYTES:
            raise BundleError(f"a manifest is at most {MAX_MANIFEST_BYTES} bytes, got {len(data)}")
        try:
            obj = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise BundleError("the manifest is not JSON") from None
        if not isinstance(obj, dict) or obj.get("format") != FORMAT or set(obj) != {"format", "files"}:
            raise BundleError(f"the manifest is not a {FORMAT!r} object of 'format' and 'files'")
        rows = obj["files"]
        if not isinstance(rows, list) or not all(isinstance(r, dict) and set(r) == {"name", "bytes", "sha256"}
                                                 for r in rows):  # fmt: skip
            raise BundleError("the manifest's 'files' is not a list of {name, bytes, sha256}")
        manifest = cls(tuple(BundleFile(r["name"], r["bytes"], r["sha256"]) for r in rows))
        if manifest.to_bytes() != data:
            raise BundleError("the manifest is not in its canonical form (sorted keys, no spaces, files by name)")
        return manifest

    def to_bytes(self) -> bytes:
        files = [{"bytes": f.bytes, "name": f.name, "sha256": f.sha256} for f in self.files]
        return json.dumps({"files": files, "format": FORMAT}, sort_keys=True, separators=(",", ":")).encode("ascii")

    @property
    def sha256(self) -> str:
        """The bundle's name: the sha256 of the manifest's canonical bytes (what the card carries)."""
        return hashlib.sha256(self.to_bytes()).hexdigest()

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def get(self, name: str) -> BundleFile | None:
        return next((f for f in self.files if f.name == name), None)

    def check(self, name: str, data: bytes) -> None:
        """:class:`BundleError` unless ``data`` is the manifest's file ``name`` (its size and sha256)."""
        want = self.get(name)
        if want is None:
            raise BundleError(f"{name!r} is not a file of this bundle")
        got = hashlib.sha256(data).hexdigest()
        if len(data) != want.bytes or got != want.sha256:
            raise BundleError(
                f"{name!r} has {len(data)} bytes and sha256 {got[:16]}..., not the manifest's {want.bytes} bytes and "
                f"sha256 {want.sha256[:16]}..."
            )


def _files_under(directory: Path) -> Iterable[str]:
    for root, dirs, names in os.walk(directory, followlinks=False):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            yield Path(root, name).relative_to(directory).as_posix()


def verify_dir(directory: str | os.PathLike, sha256: str) -> Manifest:
    """The manifest of the cached bundle ``directory`` after checking it whole: its manifest's bytes hash to
    ``sha256``, every file it lists is there with its size and sha256, and nothing else is (a file added to the
    directory is damage too: a loader could read it). :class:`BundleError` names the first problem."""
    directory = Path(directory)
    try:
        raw = (directory / MANIFEST_NAME).read_bytes()
    except OSError:
        raise BundleError(f"it has no readable {MANIFEST_NAME}") from None
    got = hashlib.sha256(raw).hexdigest()
    if got != sha256:
        raise BundleError(f"its manifest has sha256 {got[:16]}..., not {sha256[:16]}...")
    manifest = Manifest.from_bytes(raw)
    listed = {f.name for f in manifest.files}
    extra = sorted(set(_files_under(directory)) - listed - {MANIFEST_NAME})
    if extra:
        raise BundleError(f"it holds {extra[0]!r}, which its manifest does not list")
    for f in manifest.files:
        path = directory / f.name
        if path.is_symlink() or not path.is_file():
            raise BundleError(f"{f.name!r} is missing")
        if path.stat().st_size != f.bytes:
            raise BundleError(f"{f.name!r} has {path.stat().st_size} bytes, not the manifest's {f.bytes}")
        if _sha256_file(path) != f.sha256:
            raise BundleError(f"{f.name!r} does not hash to the manifest's sha256 {f.sha256[:16]}...")
    return manifest


def install(root: str | os.PathLike, manifest_bytes: bytes, fetch: Callable[[BundleFile], bytes]) -> Path:
    """``root/<sha256>``: the bundle of ``manifest_bytes``, its files got one by one from ``fetch`` and each checked
    against the manifest (:class:`BundleError` on the first that is not; nothing is kept). The files are written into
    a temporary directory beside the target, which is renamed into place only when every file is there: a partial
    download never looks like a bundle. A bundle another process installed meanwhile is kept (it has the same name,
    so the same bytes)."""
    from .atomic import atomic_write_bytes

    manifest = Manifest.from_bytes(manifest_bytes)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    target = root / hashlib.sha256(manifest_bytes).hexdigest()
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{target.name[:16]}.", suffix=".tmp"))
    try:
        for f in manifest.files:
            data = fetch(f)
            manifest.check(f.name, data)
            atomic_write_bytes(tmp / f.name, data)
        atomic_write_bytes(tmp / MANIFEST_NAME, manifest_bytes)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # installed meanwhile by another process
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
