"""What a client sends or stores: privatized vectors plus a JSON header, as one safetensors file.

Layout (safetensors, no pickle anywhere):

* tensor ``vectors``: float32 / float16 / bfloat16, shape [B, S, d] -- the released slots (or tokens);
* tensor ``mask``: bool, shape [B, S] -- which slots are real (each row a prefix of ``lengths[i]`` slots);
* metadata key ``textfree``: a JSON header (see :class:`Payload` and ``docs/payload.md``).

:func:`Payload.from_bytes` treats its input as hostile: size limits first, then the safetensors header is
parsed and checked by hand (dtype, shape, offsets) before any tensor is built, then the JSON header is checked
against the tensors, then the values (finite, norms in range). Every failure is a :class:`PayloadError` that
says what is wrong. The shape limits (``max_rows``: :class:`PayloadTooLarge`; slots, width) are read from the
safetensors header before anything per row runs, and the privacy loss of the rows is computed once per distinct row
length from one evaluation of the mechanism's privacy map, so a payload of many rows costs what its bytes cost.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from .atomic import atomic_write_bytes
from .mechanisms.base import PrivacyLoss
from .mechanisms.slots import SlotPrivatization

__all__ = [
    "Payload",
    "PayloadError",
    "PayloadTooLarge",
    "EncoderInfo",
    "FORMAT",
    "FORMAT_VERSION",
    "DEFAULT_MAX_BYTES",
    "MAX_ROWS",
]

FORMAT = "textfree.payload"
FORMAT_VERSION = 1
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 1024 * 1024
MAX_DIM = 65536
MAX_ROWS = 100_000
MAX_SLOTS = 65536
NORM_TOLERANCE = 1e-3
DEFAULT_NORM_BOUND = 1e4  # vectors of an unclipped, unnormalised payload must stay below this
ALLOWED_VECTOR_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
KINDS = ("pooled", "token")


class PayloadError(ValueError):
    """A payload is malformed, truncated, oversized, inconsistent or holds bad values."""


class PayloadTooLarge(PayloadError):
    """A payload has more rows than the reader takes (``rows`` > ``limit``), found from its safetensors header."""

    def __init__(self, rows: int, limit: int):
        super().__init__(f"the payload has {rows} rows; at most {limit} are taken per payload")
        self.rows = rows
        self.limit = limit


class _LossOnce:
    """A mechanism whose privacy map is evaluated once per input distance: some take a bisection, and every row of a
    payload asks for the same one."""

    def __init__(self, mechanism: Any):
        self.mechanism = mechanism
        self._losses: dict[float, PrivacyLoss] = {}

    def privacy_loss(self, d_in: float) -> PrivacyLoss:
        if d_in not in self._losses:
            self._losses[d_in] = self.mechanism.privacy_loss(d_in)
        return self._losses[d_in]


def _losses_by_length(privatization: SlotPrivatization, lengths: list[int]) -> dict[int, PrivacyLoss]:
    """The worst-case loss of a row of each distinct length, through ``privatization.prompt_loss`` with the
    mechanism's privacy map evaluated once."""
    once = privatization
    if privatization.noise is not None:
        once = dataclasses.replace(privatization, noise=_LossOnce(privatization.noise))
    return {n: once.prompt_loss(n) for n in sorted(set(lengths))}


@dataclass(frozen=True)
class EncoderInfo:
    """Which client encoder made the vectors: its id, the sha256 of its weights, width and kind."""

    id: str
    sha256: str | None
    dim: int
    kind: str = "contextual"

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id or len(self.id) > 512:
            raise PayloadError(f"encoder.id must be a non-empty string of at most 512 characters, got {self.id!r}")
        if self.sha256 is not None and (
            not isinstance(self.sha256, str)
            or len(self.sha256) != 64
            or any(c not in "0123456789abcdef" for c in self.sha256)
        ):
            raise PayloadError(f"encoder.sha256 must be 64 lowercase hex digits or null, got {self.sha256!r}")
        if not isinstance(self.dim, int) or isinstance(self.dim, bool) or not 1 <= self.dim <= MAX_DIM:
            raise PayloadError(f"encoder.dim must be an integer in [1, {MAX_DIM}], got {self.dim!r}")
        if self.kind not in ("contextual", "embedding_table"):
            raise PayloadError(f"encoder.kind must be 'contextual' or 'embedding_table', got {self.kind!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "sha256": self.sha256, "dim": self.dim, "kind": self.kind}

    @classmethod
    def from_dict(cls, data: Any) -> "EncoderInfo":
        if not isinstance(data, dict) or set(data) - {"id", "sha256", "dim", "kind"} or not {"id", "dim"} <= set(data):
            raise PayloadError(f"header.encoder must be a mapping with id, sha256, dim, kind; got {data!r}"[:300])
        return cls(data["id"], data.get("sha256"), data["dim"], data.get("kind", "contextual"))


@dataclass
class Payload:
    """Privatized vectors of a batch of prompts, with everything a server needs to know about them."""

    vectors: torch.Tensor
    mask: torch.Tensor
    encoder: EncoderInfo
    privatization: SlotPrivatization
    kind: str = "pooled"
    public: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ properties
    @property
    def lengths(self) -> list[int]:
        return [int(n) for n in self.mask.sum(dim=1).tolist()]

    @property
    def batch_size(self) -> int:
        return int(self.vectors.shape[0])

    def row_losses(self) -> list[PrivacyLoss]:
        """Worst-case privacy loss of each row: every slot of the row may differ (computed once per row length)."""
        lengths = self.lengths
        table = _losses_by_length(self.privatization, lengths)
        return [table[n] for n in lengths]

    def worst_case_loss(self) -> PrivacyLoss:
        """The largest per-row loss (each row is one user's prompt)."""
        losses = _losses_by_length(self.privatization, self.lengths).values()
        return max(losses, key=lambda p: (p.epsilon, p.delta)) if losses else PrivacyLoss(0.0)

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        v, m = self.vectors, self.mask
        if not isinstance(v, torch.Tensor) or v.dtype not in DTYPE_NAMES:
            raise PayloadError(f"vectors must be a float32/float16/bfloat16 tensor, got {getattr(v, 'dtype', type(v))}")
        if v.dim() != 3:
            raise PayloadError(f"vectors must have shape [B, S, d], got {tuple(v.shape)}")
        b, s, d = v.shape
        if not 1 <= b <= MAX_ROWS or s > MAX_SLOTS:
            raise PayloadError(
                f"vectors shape {tuple(v.shape)} outside limits (rows 1..{MAX_ROWS}, slots <= {MAX_SLOTS})"
            )
        if d != self.encoder.dim:
            raise PayloadError(f"vectors have width {d} but the header's encoder.dim is {self.encoder.dim}")
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool or tuple(m.shape) != (b, s):
            raise PayloadError(
                f"mask must be a bool tensor of shape {(b, s)}, got {getattr(m, 'dtype', type(m))} "
                f"{tuple(getattr(m, 'shape', ()))}"
            )
        lengths = m.sum(dim=1)
        prefix = torch.arange(s, device=m.device).unsqueeze(0) < lengths.unsqueeze(1)
        if not torch.equal(prefix, m):
            raise PayloadError("mask rows must be prefixes (real slots first, then padding)")
        pad_to = self.privatization.pad_to
        if pad_to is not None and (s != pad_to or not bool(m.all())):
            raise PayloadError(
                f"the header says every row is padded to {pad_to} slots, but the rows have {sorted(set(self.lengths))} "
                f"of {s}"
            )
        if self.kind not in KINDS:
            raise PayloadError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.public is not None:
            if (
                not isinstance(self.public, list)
                or len(self.public) != b
                or not all(isinstance(p, str) for p in self.public)
            ):
                raise PayloadError(f"public must be null or a list of {b} strings (one per row)")
        vf = v.float()
        if not torch.isfinite(vf).all():
            raise PayloadError("vectors contain NaN or Inf")
        if (vf[~m] != 0).any():
            raise PayloadError("padded slots must be all zero")
        norms = vf[m].norm(dim=-1)
        if norms.numel():
            if (
                self.privatization.renormalize
                and self.privatization.noise is not None
                or (self.privatization.normalize and self.privatization.noise is None)
            ):
                tol = NORM_TOLERANCE if v.dtype == torch.float32 else 1e-2
                worst = (norms - 1.0).abs().max().item()
                if worst > tol:
                    raise PayloadError(f"the header says slots are unit-norm but a slot has norm off by {worst:.4g}")
            else:
                bound = self._norm_bound()
                if norms.max().item() > bound * (1 + NORM_TOLERANCE):
                    raise PayloadError(
                        f"a vector has norm {norms.max().item():.4g}, above the bound {bound:.4g} its mechanism allows"
                    )

    def _norm_bound(self) -> float:
        noise = self.privatization.noise
        if noise is not None and getattr(noise, "name", None) == "clipped":
            return float(noise.max_norm)
        return DEFAULT_NORM_BOUND

    # ------------------------------------------------------------------ header
    def header(self) -> dict[str, Any]:
        worst = self.worst_case_loss()
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "kind": self.kind,
            "encoder": self.encoder.to_dict(),
            "privatization": self.privatization.to_dict(),
            "dtype": DTYPE_NAMES[self.vectors.dtype],
            "shape": list(self.vectors.shape),
            "lengths": self.lengths,
            "privacy": {"slot": self.privatization.slot_loss().to_dict(), "worst_case_row": worst.to_dict()},
            "public": self.public,
            "extra": self.extra,
        }

    # ------------------------------------------------------------------ serialisation
    def to_bytes(self) -> bytes:
        header = json.dumps(self.header(), sort_keys=True, allow_nan=True)
        return st_save(
            {"vectors": self.vectors.contiguous(), "mask": self.mask.contiguous()}, metadata={"textfree": header}
        )

    def sha256(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically: a partial file never appears under ``path``."""
        return atomic_write_bytes(path, self.to_bytes())

    @classmethod
    def load(
        cls, path: str | os.PathLike, *, max_bytes: int = DEFAULT_MAX_BYTES, max_rows: int = MAX_ROWS
    ) -> "Payload":
        path = Path(path)
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise PayloadError(f"cannot read payload file {str(path)!r}: {exc.strerror}") from None
        if size > max_bytes:
            raise PayloadError(f"payload file is {size} bytes, above the limit of {max_bytes}")
        try:
            data = path.read_bytes()
        except OSError as exc:  # a directory, a file gone or unreadable since the stat
            raise PayloadError(f"cannot read payload file {str(path)!r}: {exc.strerror}") from None
        return cls.from_bytes(data, max_bytes=max_bytes, max_rows=max_rows)

    def to_base64(self) -> str:
        return base64.b64encode(self.to_bytes()).decode("ascii")

    @classmethod
    def from_base64(cls, text: str, *, max_bytes: int = DEFAULT_MAX_BYTES, max_rows: int = MAX_ROWS) -> "Payload":
        if not isinstance(text, str) or len(text) > (max_bytes * 4) // 3 + 4:
            raise PayloadError("base64 payload missing or above the size limit")
        try:
            data = base64.b64decode(text, validate=True)
        except (ValueError, TypeError):
            raise PayloadError("payload is not valid base64") from None
        return cls.from_bytes(data, max_bytes=max_bytes, max_rows=max_rows)

    @classmethod
    def from_bytes(cls, data: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES, max_rows: int = MAX_ROWS) -> "Payload":
        """The payload in ``data``, checked (:class:`PayloadError` says what is wrong). ``max_rows`` (at most
        ``MAX_ROWS``) is enforced from the safetensors header, before any tensor is built: :class:`PayloadTooLarge`."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise PayloadError(f"payload must be bytes, got {type(data).__name__}")
        data = bytes(data)
        try:
            tensors_meta, header = _parse_container(data, max_bytes, min(max_rows, MAX_ROWS))
            try:
                tensors = st_load(data)
            except Exception as exc:  # safetensors raises its own error type; never let it escape unexplained
                raise PayloadError(f"safetensors could not read the payload: {exc}") from None
            return _payload_from_parts(tensors_meta, header, tensors)
        except PayloadError:
            raise
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            # a hostile header can reach past the field checks (a 5,000-digit integer, brackets nested 3,000 deep,
            # a list where a string belongs): still a bad payload, never a crash or a server error
            raise PayloadError(f"payload header is malformed ({type(exc).__name__}: {exc})"[:400]) from None


def _parse_container(data: bytes, max_bytes: int, max_rows: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check the safetensors framing and the shape limits, and return (tensor entries, textfree header) before
    loading anything."""
    n = len(data)
    if n > max_bytes:
        raise PayloadError(f"payload is {n} bytes, above the limit of {max_bytes}")
    if n < 8:
        raise PayloadError(f"payload is truncated: {n} bytes, not even a safetensors header length")
    (hlen,) = struct.unpack("<Q", data[:8])
    if hlen == 0 or hlen > MAX_HEADER_BYTES:
        raise PayloadError(f"safetensors header length {hlen} is outside 1..{MAX_HEADER_BYTES}")
    if 8 + hlen > n:
        raise PayloadError(f"payload is truncated: header says {hlen} header bytes, only {n - 8} follow")
    try:
        meta = json.loads(data[8 : 8 + hlen].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"safetensors header is not valid UTF-8 JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise PayloadError("safetensors header must be a JSON object")
    metadata = meta.pop("__metadata__", None)
    if not isinstance(metadata, dict) or not isinstance(metadata.get("textfree"), str):
        raise PayloadError("not a textfree payload: the safetensors metadata has no 'textfree' header")
    if set(meta) != {"vectors", "mask"}:
        raise PayloadError(f"a payload holds exactly the tensors 'vectors' and 'mask', found {sorted(meta)[:10]}")
    body = n - 8 - hlen
    spans = []
    for name, entry in meta.items():
        if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
            raise PayloadError(f"tensor entry {name!r} is malformed")
        shape, offsets = entry["shape"], entry["data_offsets"]
        if not (
            isinstance(shape, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape)
        ):
            raise PayloadError(f"tensor {name!r} has a malformed shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(x, int) for x in offsets)):
            raise PayloadError(f"tensor {name!r} has malformed data_offsets {offsets!r}")
        if not 0 <= offsets[0] <= offsets[1] <= body:
            raise PayloadError(
                f"payload is truncated or inconsistent: tensor {name!r} spans {offsets} of {body} data bytes"
            )
        spans.append(tuple(offsets))
    if meta["vectors"]["dtype"] not in ALLOWED_VECTOR_DTYPES:
        raise PayloadError(f"vectors must be F32, F16 or BF16, got dtype {meta['vectors']['dtype']!r}")
    if meta["mask"]["dtype"] != "BOOL":
        raise PayloadError(f"mask must be BOOL, got dtype {meta['mask']['dtype']!r}")
    if len(meta["vectors"]["shape"]) != 3 or len(meta["mask"]["shape"]) != 2:
        raise PayloadError(
            f"vectors must be [B, S, d] and mask [B, S]; got {meta['vectors']['shape']} and {meta['mask']['shape']}"
        )
    _check_shape_limits(meta["vectors"]["shape"], max_rows)
    spans.sort()
    if spans[0][0] != 0 or spans[-1][1] != body or spans[0][1] != spans[1][0]:
        raise PayloadError("payload data section has gaps, overlaps or trailing bytes")
    try:
        header = json.loads(metadata["textfree"])
    except json.JSONDecodeError as exc:
        raise PayloadError(f"the textfree header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise PayloadError("the textfree header must be a JSON object")
    return meta, header


def _check_shape_limits(shape: list[int], max_rows: int) -> None:
    """The limits on [B, S, d], read from the safetensors header: too many rows is :class:`PayloadTooLarge`."""
    b, s, d = shape
    if b > max_rows:
        raise PayloadTooLarge(b, max_rows)
    if b < 1 or s > MAX_SLOTS or not 1 <= d <= MAX_DIM:
        raise PayloadError(
            f"vectors shape {tuple(shape)} outside limits (rows 1..{max_rows}, slots <= {MAX_SLOTS}, width "
            f"1..{MAX_DIM})"
        )


def _payload_from_parts(meta: dict[str, Any], header: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Payload:
    if header.get("format") != FORMAT:
        raise PayloadError(f"header.format must be {FORMAT!r}, got {header.get('format')!r}")
    if header.get("format_version") != FORMAT_VERSION:
        raise PayloadError(
            f"unsupported payload format_version {header.get('format_version')!r}; this reader knows {FORMAT_VERSION}"
        )
    known = {
        "format",
        "format_version",
        "kind",
        "encoder",
        "privatization",
        "dtype",
        "shape",
        "lengths",
        "privacy",
        "public",
        "extra",
    }
    unknown = set(header) - known
    if unknown:
        raise PayloadError(f"unknown header field(s) {sorted(unknown)}")
    vectors, mask = tensors["vectors"], tensors["mask"]
    if header.get("shape") != list(vectors.shape):
        raise PayloadError(
            f"header.shape {header.get('shape')!r} does not match the vectors' shape {list(vectors.shape)}"
        )
    if header.get("dtype") != DTYPE_NAMES.get(vectors.dtype):
        raise PayloadError(f"header.dtype {header.get('dtype')!r} does not match the vectors' dtype {vectors.dtype}")
    lengths = header.get("lengths")
    if not isinstance(lengths, list) or lengths != [int(x) for x in mask.sum(dim=1).tolist()]:
        raise PayloadError("header.lengths does not match the mask")
    try:
        privatization = SlotPrivatization.from_dict(header.get("privatization"))
    except (ValueError, TypeError) as exc:
        raise PayloadError(f"header.privatization is invalid: {exc}") from None
    extra = header.get("extra", {})
    if not isinstance(extra, dict):
        raise PayloadError("header.extra must be a JSON object")
    payload = Payload(
        vectors=vectors,
        mask=mask,
        encoder=EncoderInfo.from_dict(header.get("encoder")),
        privatization=privatization,
        kind=header.get("kind"),
        public=header.get("public"),
        extra=extra,
    )
    stated = header.get("privacy")
    computed = payload.header()["privacy"]
    if not isinstance(stated, dict) or not _same_losses(stated, computed):
        raise PayloadError(
            f"header.privacy {stated!r} is inconsistent with its mechanism and lengths ({computed})"[:400]
        )
    return payload


def _same_losses(a: dict[str, Any], b: dict[str, Any]) -> bool:
    try:
        for key in b:
            for field_ in ("epsilon", "delta"):
                x, y = float(a[key][field_]), float(b[key][field_])
                if not (x == y or math.isclose(x, y, rel_tol=1e-9)):
                    return False
            if a[key]["notion"] != b[key]["notion"]:
                return False
        return set(a) == set(b)
    except (KeyError, TypeError, ValueError):
        return False
