"""``Client``: talk to a ``textfree serve`` server. Private text is privatized HERE; only the payload is sent.

    from textfree.client import Client

    client = Client("http://127.0.0.1:8000", api_key="tf_...")          # needs: pip install "textfree[server]"
    result = client.generate("A 46-year-old man has ...", public="Options:\\nA. ...", model="ddx")
    print(result.answers[0], result.privacy)

Before privatizing, the client reads the model's card (``GET /v1/models/{id}``) and loads its own copy of the
encoder the card names: ``encoder=`` (a local path: an override), else the one the server publishes in the model's
client bundle, else the packaged all-MiniLM-L6-v2. It REFUSES
(:class:`ModelMismatchError`) when that encoder's sha256, width or kind differ from the card's, when ``k`` differs,
or when the card asks for a payload shape it does not make; a server cannot talk it into sending anything else.
Idempotent calls are retried with exponential backoff on connection errors, 5xx and 429 (``Retry-After`` is
honoured). A retried ``generate`` resends the SAME payload: no fresh noise, so no extra privacy cost. Uploads and job
submissions carry an ``Idempotency-Key``, so their retries never store a dataset or start a job twice.

The **client bundle** (:meth:`Client.bundle`, :mod:`textfree.bundle`): every public file a client holds for a model
(a PPFT run's client encoder, an SnD denoiser, RAPT's plain tokens), named on the card by the sha256 of its manifest.
It is downloaded once into a cache (``cache_dir=``, else ``$TEXTFREE_BUNDLE_CACHE``, else
``~/.cache/textfree/bundles``; one ``<sha256>/`` directory per bundle, renamed into place only once complete), every
file checked against the manifest and the manifest against the card, and checked again whole before each client
uses it; a mismatched or damaged bundle is a :class:`ClientError` and is never used.

``classify(texts, model=..., eta=..., pos=...)`` is RAPT's client: it privatizes every example HERE with T2T / PCT2T
over its own copy of the card's encoder word table (checked against the card's sha256), prepends the model's public
plain tokens (from its client bundle, checked against the card's sha256), and sends only the privatized text;
words outside PCT2T's categories are sent unchanged, by PCT2T's design (``pos="all"`` privatizes every word).
``upload_examples(texts, labels, model=...)`` privatizes training examples the same way and uploads only that text and
the labels (a dataset of the model's kind), for a fine-tuning job whose adapter ``classify(..., adapter=...)`` uses.

``embed(..., denoise=True)`` is Split-N-Denoise's client: it keeps the clean token embeddings X, the noisy ones X~
and the noise Z = X~ - X in memory only, sends only the payload (X~), and denoises the server's e_n with the
model's public denoiser, from its client bundle, checked against the card's sha256 and encoder sha256.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import random
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence
from urllib.parse import quote

from .bundle import (
    DENOISER_FILE,
    ENCODER_DIR,
    MAX_BUNDLE_BYTES,
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_MANIFEST_BYTES,
    PLAIN_TOKENS_FILE,
    BundleError,
    Manifest,
    install,
    verify_dir,
)

__all__ = [
    "Client",
    "ClientError",
    "ServerError",
    "ModelMismatchError",
    "GenerateResult",
    "EmbedResult",
    "ClassifyResult",
    "UploadedExamples",
]

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
JOB_TERMINAL = ("succeeded", "failed", "cancelled")
MAX_RETRY_AFTER_S = 30.0
#: The environment variable naming the client-bundle cache (``Client(cache_dir=...)`` overrides it).
BUNDLE_CACHE_ENV = "TEXTFREE_BUNDLE_CACHE"


class ClientError(RuntimeError):
    """The client could not complete a call (network down after every retry, a reply it cannot read)."""


class ServerError(ClientError):
    """The server answered with an error: ``status`` and the ``type``/``message`` of its JSON error body."""

    def __init__(self, status: int, type: str, message: str):
        super().__init__(f"{status} {type}: {message}")
        self.status, self.type, self.message = status, type, message


class ModelMismatchError(ValueError):
    """The model card asks for another encoder, width, k or payload kind than this client would send."""


@dataclass
class GenerateResult:
    model: str
    answers: list[str]
    usage: dict[str, Any]
    privacy: Any  # textfree.mechanisms.PrivacyLoss: the worst-case loss of one row of the payload sent
    payload_bytes: int


@dataclass
class EmbedResult:
    """Sentence embeddings: the server's (``denoised`` False) or the client's denoising of them (``denoised`` True;
    the server's raw ``e_n`` stay in ``raw_embeddings``). ``epsilon``: the noise level the payload was made at."""

    model: str
    embeddings: list[list[float]]
    usage: dict[str, Any]
    privacy: Any
    payload_bytes: int
    denoised: bool = False
    raw_embeddings: list[list[float]] | None = None
    epsilon: float | None = None
    denoiser_sha256: str | None = None


@dataclass
class ClassifyResult:
    """Labels of examples privatized here (RAPT). ``examples``: exactly what was sent, one ``{"parts", "plain",
    "sequence"}`` per example (the privatized text); ``words_privatized``: each example's own words that went through
    the mechanism; ``privacy``: the worst-case loss of one example (words x eta x D_max, metric privacy)."""

    model: str
    labels: list[int]
    probabilities: list[list[float]]
    usage: dict[str, Any]
    examples: list[dict[str, Any]]
    words_privatized: list[int]
    eta: float
    pos_categories: list[str] | None
    privacy: Any
    bytes_sent: int


@dataclass
class UploadedExamples:
    """A dataset of examples privatized here and uploaded for a classify model (RAPT). ``dataset``: the server's
    dataset object (``id``, ``rows``, ...); ``examples``: exactly what was sent, one ``{"parts", "plain", "sequence"}``
    per example (the labels were sent beside them); ``words_privatized``, ``eta``, ``pos_categories`` and ``privacy``
    (the worst-case loss of one example) as for :class:`ClassifyResult`."""

    dataset: dict[str, Any]
    examples: list[dict[str, Any]]
    words_privatized: list[int]
    eta: float
    pos_categories: list[str] | None
    privacy: Any
    bytes_sent: int


@dataclass
class _Privatized:
    """Examples privatized here for a classify model: what is sent, and what it cost."""

    sent: list[dict[str, Any]]
    counts: list[int]
    eta: float
    categories: tuple[str, ...] | None
    mechanism: Any

    @property
    def privacy(self):
        return self.mechanism.privacy_loss(max(self.counts))


def _httpx():
    try:
        import httpx
    except ImportError as exc:  # pragma: no cover - part of the [server] extra
        raise ImportError('textfree.client needs httpx: pip install "textfree[server]"') from exc
    return httpx


class Client:
    """A synchronous client of one server.

    url: the server's base URL. api_key: sent as ``Authorization: Bearer`` (default ``$TEXTFREE_API_KEY``).
    timeout: seconds per HTTP attempt. retries: extra attempts of an idempotent call (so ``retries + 1`` in all).
    backoff: first wait in seconds, doubled per attempt (with jitter). encoder: a local encoder directory, overriding
    the one the server publishes in the model's client bundle (default: the bundle's, else the packaged
    all-MiniLM-L6-v2). http_client: an ``httpx.Client`` to use instead of a new one.
    max_epsilon: the largest noise epsilon this client releases at (default ``$TEXTFREE_MAX_EPSILON``, else no cap):
    without an explicit epsilon the server's model card picks it, so a cap keeps a careless or hostile card from
    choosing a weak one; a release above the cap (or a clean one) is refused before anything is sent.
    cache_dir: where downloaded client bundles are kept, one ``<sha256>/`` directory each (default
    ``$TEXTFREE_BUNDLE_CACHE``, else ``$XDG_CACHE_HOME/textfree/bundles``, else ``~/.cache/textfree/bundles``).
    progress: called with one line when a bundle is downloaded (e.g. a CLI's stderr).
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.25,
        encoder: str | os.PathLike | None = None,
        http_client=None,
        max_epsilon: float | None = None,
        cache_dir: str | os.PathLike | None = None,
        progress: Callable[[str], None] | None = None,
    ):
        httpx = _httpx()
        if retries < 0 or backoff < 0 or timeout <= 0:
            raise ValueError("retries and backoff must be >= 0 and timeout > 0")
        if max_epsilon is None and os.environ.get("TEXTFREE_MAX_EPSILON"):
            try:
                max_epsilon = float(os.environ["TEXTFREE_MAX_EPSILON"])
            except ValueError:
                raise ValueError(
                    f"TEXTFREE_MAX_EPSILON must be a number, got {os.environ['TEXTFREE_MAX_EPSILON']!r}"
                ) from None
        if max_epsilon is not None and not (
            isinstance(max_epsilon, (int, float)) and math.isfinite(max_epsilon) and max_epsilon > 0
        ):
            raise ValueError(f"max_epsilon must be a number > 0, got {max_epsilon!r}")
        self.max_epsilon = max_epsilon
        self.url = url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("TEXTFREE_API_KEY")
        self.retries = retries
        self.backoff = backoff
        self.encoder_path = encoder
        self._http = http_client if http_client is not None else httpx.Client(timeout=timeout)
        self._own_http = http_client is None
        self._encoders: dict[tuple[str, str], Any] = {}
        self._cards: dict[str, dict] = {}
        self.cache_dir = _cache_dir(cache_dir)
        self.progress = progress
        self._bundles: dict[str, Path] = {}  # sha256 -> a bundle directory checked whole by this client
        self._denoisers: dict[str, Any] = {}  # sha256 -> Denoiser, each checked when it was loaded
        self._plain: dict[str, Any] = {}  # sha256 -> the PlainTokens of a model, each checked when loaded

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ HTTP
    def _request(self, method: str, path: str, **kwargs) -> Any:
        """The JSON object the server answers to ``method path`` (retried: see the module docstring)."""
        headers = self._headers(kwargs.pop("headers", None))

        def once():
            response = self._http.request(method, f"{self.url}{path}", headers=headers, **kwargs)
            if response.status_code >= 400:
                return None, response
            try:
                reply = response.json()
            except ValueError:
                raise ClientError(f"{method} {path}: the server's reply is not JSON") from None
            if not isinstance(reply, dict):
                raise ClientError(f"{method} {path}: the server's reply is not a JSON object")
            return reply, None

        return self._retrying(method, path, once)

    def _download(self, path: str, *, limit: int) -> bytes:
        """The bytes of ``GET path``, streamed and refused (:class:`ClientError`) past ``limit`` bytes; retried as
        :meth:`_request`."""
        headers = self._headers(None)

        def once():
            with self._http.stream("GET", f"{self.url}{path}", headers=headers) as response:
                if response.status_code >= 400:
                    response.read()
                    return None, response
                data = bytearray()
                for chunk in response.iter_bytes():
                    data.extend(chunk)
                    if len(data) > limit:
                        raise ClientError(f"GET {path}: the server sent more than the {limit} bytes expected; refused")
                return bytes(data), None

        return self._retrying("GET", path, once)

    def _headers(self, headers: dict | None) -> dict:
        headers = dict(headers or {})
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _retrying(self, method: str, path: str, once: Callable[[], tuple[Any, Any]]) -> Any:
        """``once()`` -> (value, None), or (None, an error response); connection errors, 5xx and 429 are retried with
        backoff (``Retry-After`` honoured), other errors raise :class:`ServerError` at once."""
        httpx = _httpx()
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            wait = self.backoff * (2**attempt) * (0.5 + random.random() / 2)
            try:
                value, response = once()
            except httpx.TransportError as exc:
                last = ClientError(f"{method} {path}: {type(exc).__name__}: {exc}")
            else:
                if response is None:
                    return value
                last = _server_error(response)
                if response.status_code not in RETRY_STATUSES:
                    raise last
                retry_after = response.headers.get("retry-after", "")
                if retry_after.isascii() and retry_after.isdigit():  # "²".isdigit() is True, float("²") fails
                    wait = min(float(retry_after), MAX_RETRY_AFTER_S)
            if attempt < self.retries:
                time.sleep(wait)
        raise last  # type: ignore[misc]

    def health(self) -> dict:
        return self._request("GET", "/health")

    def models(self) -> list[dict]:
        """Every model card the server publishes."""
        data = self._request("GET", "/v1/models").get("data")
        if not isinstance(data, list) or not all(isinstance(c, dict) and isinstance(c.get("id"), str) for c in data):
            raise ClientError("GET /v1/models: the server's reply has no list of model cards with ids ('data')")
        for card in data:
            self._cards[card["id"]] = card
        return data

    def model_card(self, model: str) -> dict:
        card = self._request("GET", f"/v1/models/{quote(model, safe='')}")
        self._cards[model] = card
        return card

    # ------------------------------------------------------------------ privatization (local)
    def _encoder_source(self, model: str) -> str | os.PathLike | None:
        """The encoder to privatize for ``model`` with: ``encoder=`` (an override), else the client encoder of the
        model's client bundle (downloaded once, checked), else None (the packaged default)."""
        if self.encoder_path is not None:
            return self.encoder_path
        directory = self.bundle(model)
        if directory is not None and (directory / ENCODER_DIR).is_dir():
            return directory / ENCODER_DIR
        return None

    def _encoder(self, kind: str, max_length: int, model: str):
        from .encoders import load_encoder

        source = self._encoder_source(model)
        key = (kind, str(source))
        if key not in self._encoders:
            self._encoders[key] = load_encoder(source, kind)
        enc = self._encoders[key]
        enc.max_length = max_length
        return enc

    def privatizer(self, model: str, *, epsilon: float | None = None, k: int | None = None, no_noise: bool = False):
        """A local :class:`~textfree.privatizer.Privatizer` matching ``model``'s card (refuses a mismatch)."""
        from .privatizer import Privatizer

        card = self._cards.get(model) or self.model_card(model)
        task = card.get("task")
        if task == "classify":
            raise ModelMismatchError(
                f"model {model!r} classifies privatized text (system {card.get('system')!r}): use classify() "
                "(textfree ask --system rapt), not a payload"
            )
        if task not in ("generate", "embed"):
            raise ModelMismatchError(f"model {model!r} has task {task!r}; this client knows generate and embed")
        _check_card(card, model)
        if k is not None and k != card["k"]:
            raise ModelMismatchError(f"k={k} but model {model!r} takes k={card['k']}")
        eps = None if no_noise else (epsilon if epsilon is not None else card.get("epsilon"))
        if eps is None and not no_noise:
            raise ModelMismatchError(
                f"model {model!r} was trained without noise, so there is no default epsilon: pass epsilon=..., or "
                "no_noise=True for a clean payload (NOT private)"
            )
        if self.max_epsilon is not None and (eps is None or eps > self.max_epsilon):
            chosen = (
                "a clean payload (no noise)"
                if eps is None
                else f"epsilon {eps:g}" + ("" if epsilon is not None else " (the model card's)")
            )
            raise ClientError(
                f"refused: {chosen} is above this client's max_epsilon {self.max_epsilon:g}; nothing was sent"
            )
        enc = self._encoder(card["encoder_kind"], int(card.get("max_private_tokens") or card["max_slots"]), model)
        if enc.dim != card["encoder_dim"]:
            raise ModelMismatchError(
                f"the local encoder has width {enc.dim}; model {model!r} takes {card['encoder_dim']}"
            )
        if card.get("encoder_sha256") and enc.sha256 != card["encoder_sha256"]:
            raise ModelMismatchError(
                f"the local encoder ({enc.sha256 and enc.sha256[:12]}...) is not the one model {model!r} was trained "
                f"with ({card['encoder_id']}, sha256 {card['encoder_sha256'][:12]}...): "
                + _encoder_hint(card, self.encoder_path)
            )
        if task == "embed":
            from .mechanisms import Clipped, L2Laplace

            if card["mechanism"] != "l2_laplace":
                raise ModelMismatchError(
                    f"this client makes l2_laplace token payloads; model {model!r} asks for {card['mechanism']!r}"
                )
            noise = None if eps is None else Clipped(L2Laplace(eps), max_norm=float(card["clip_norm"]))
            # each token is eta d_chi-private; two tokens lie at most 2C apart (every row of the table has norm <= C),
            # so a token costs at most eta * 2C: the payload states that worst case instead of an unbounded one
            clip = float(card["clip_norm"])
            privatizer = Privatizer(enc, noise, k=1, normalize=False, renormalize=False, sensitivity=2 * clip)
        else:
            from .mechanisms.factory import make_noise

            noise = make_noise(card["mechanism"], eps, dim=enc.dim, match=card.get("noise_match", "budget"))
            privatizer = Privatizer(
                enc,
                noise,
                k=card["k"],
                pad_to=card["max_slots"] if card.get("fixed_slots") else None,
                center=_card_center(card, model, enc.dim),
                repeat_mean=bool(card.get("repeat_mean")),
            )
        # the payload names the encoder by the card's id, not by a local path (which could name the user)
        enc.name = card.get("encoder_id") or enc.name
        return privatizer

    # ------------------------------------------------------------------ calls
    def generate(
        self,
        private_text: str | Sequence[str],
        public: str | Sequence[str] | None = None,
        *,
        model: str,
        epsilon: float | None = None,
        k: int | None = None,
        seed: int | None = None,
        no_noise: bool = False,
        max_new_tokens: int | None = None,
        adapter: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        sampling_seed: int | None = None,
    ) -> GenerateResult:
        """Privatize ``private_text`` locally, send the payload (+ ``public``), return the answers.

        ``epsilon`` defaults to the epsilon the model was trained at; ``seed`` makes the noise reproducible
        (experiments only: NOT private). ``temperature`` (0: greedy), ``top_p`` and ``sampling_seed`` ask the server
        to sample the answer (the sampling seed has nothing to do with the privacy noise)."""
        texts = [private_text] if isinstance(private_text, str) else list(private_text)
        pub = None if public is None else ([public] if isinstance(public, str) else list(public))
        payload = self.privatizer(model, epsilon=epsilon, k=k, no_noise=no_noise).privatize(
            texts, seed=seed, public=pub
        )
        del texts, private_text  # from here on only the payload exists
        body = payload.to_bytes()
        params = {"model": model}
        if max_new_tokens is not None:
            params["max_new_tokens"] = max_new_tokens
        if adapter is not None:
            params["adapter"] = adapter  # one of this key's fine-tuned adapters of `model`
        for name, value in (("temperature", temperature), ("top_p", top_p), ("seed", sampling_seed)):
            if value is not None:
                params[name] = value
        reply = self._request(
            "POST", "/v1/generate", content=body, params=params, headers={"Content-Type": "application/octet-stream"}
        )
        answers = _reply_rows(reply, "answers", payload.batch_size, "/v1/generate", str)
        return GenerateResult(reply["model"], answers, reply.get("usage", {}), payload.worst_case_loss(), len(body))

    def embed(
        self,
        private_text: str | Sequence[str],
        *,
        model: str,
        epsilon: float | None = None,
        seed: int | None = None,
        no_noise: bool = False,
        denoise: bool = False,
    ) -> EmbedResult:
        """Noisy, clipped token embeddings (made locally) -> the server's sentence embeddings (SnD-style).

        ``denoise=True`` (Split-N-Denoise): the model's card must name a denoiser (else :class:`ClientError`);
        ``epsilon`` defaults to the card's, else to the denoiser's ``eta_min`` (the most private level it was trained
        for) and must lie in its ``[eta_min, eta_max]`` (else :class:`ClientError`, nothing sent: it was not trained
        there). The denoiser is fetched (cached, checked) before anything is sent; then only the payload X~ is sent
        and the server's e_n is denoised here with X~ and Z = X~ - X, which never leave this process."""
        texts = [private_text] if isinstance(private_text, str) else list(private_text)
        if denoise:
            return self._denoised_embed(texts, model=model, epsilon=epsilon, seed=seed, no_noise=no_noise)
        payload = self.privatizer(model, epsilon=epsilon, no_noise=no_noise).privatize(texts, seed=seed)
        del texts, private_text
        body = payload.to_bytes()
        reply = self._post_embed(model, body)
        embeddings = _reply_rows(reply, "embeddings", payload.batch_size, "/v1/embed", list)
        eps = getattr(payload.privatization.noise, "epsilon", None) or getattr(
            getattr(payload.privatization.noise, "inner", None), "epsilon", None
        )
        return EmbedResult(
            reply["model"], embeddings, reply.get("usage", {}), payload.worst_case_loss(), len(body), epsilon=eps
        )

    def _post_embed(self, model: str, body: bytes) -> dict:
        return self._request(
            "POST",
            "/v1/embed",
            content=body,
            params={"model": model},
            headers={"Content-Type": "application/octet-stream"},
        )

    def _denoised_embed(
        self, texts: list[str], *, model: str, epsilon: float | None, seed: int | None, no_noise: bool
    ) -> EmbedResult:
        """:meth:`embed` with ``denoise=True``; every check runs before the payload is made and sent."""
        import torch

        card = self._cards.get(model) or self.model_card(model)
        if card.get("task") != "embed":
            raise ModelMismatchError(f"model {model!r} serves {card.get('task')!r}, not embed: nothing to denoise")
        entry = _denoiser_entry(card, model)
        if no_noise:
            raise ClientError("denoise=True needs noise (it denoises the noise added here): drop no_noise")
        eps = epsilon if epsilon is not None else (card.get("epsilon") or entry["eta_min"])
        if not (isinstance(eps, (int, float)) and entry["eta_min"] <= eps <= entry["eta_max"]):
            raise ClientError(
                f"epsilon {eps!r} is outside [{entry['eta_min']:g}, {entry['eta_max']:g}], the noise levels the "
                f"denoiser of model {model!r} was trained for; nothing was sent (pick an epsilon in that range, or "
                "denoise=False)"
            )
        privatizer = self.privatizer(model, epsilon=float(eps))  # card, encoder and max_epsilon checks
        denoiser = self.denoiser(model)
        payload = privatizer.privatize(texts, seed=seed)
        x = _clean_tokens(privatizer, texts, payload)  # X: the clean token embeddings, never sent
        del texts
        body = payload.to_bytes()  # X~ (and its header): all that leaves
        reply = self._post_embed(model, body)
        raw = _reply_rows(reply, "embeddings", payload.batch_size, "/v1/embed", list)
        x_tilde, mask = payload.vectors.to(torch.float32), payload.mask.to(torch.bool)
        z = (x_tilde - x) * mask.unsqueeze(-1)  # Z: the effective noise (after clipping), never sent
        del x
        try:
            e_n = torch.tensor(raw, dtype=torch.float32)
            denoised = denoiser.denoise(e_n, x_tilde, z, mask, eta=float(eps))
        except (ValueError, RuntimeError) as exc:
            raise ClientError(f"model {model!r}'s denoiser cannot read this answer: {exc}") from None
        finally:
            del z
        return EmbedResult(
            reply["model"],
            denoised.tolist(),
            reply.get("usage", {}),
            payload.worst_case_loss(),
            len(body),
            denoised=True,
            raw_embeddings=raw,
            epsilon=float(eps),
            denoiser_sha256=entry["sha256"],
        )

    def denoiser(self, model: str):
        """The client-side denoiser of embed model ``model`` (a :class:`~textfree.snd.denoiser.Denoiser`): from this
        client's memory, else the model's client bundle (:meth:`bundle`: downloaded once, cached, checked). Its sha256
        must be the card's ``denoiser`` entry's and its ``encoder_sha256``, widths and eta range the card's: a
        mismatched file is a :class:`ClientError`, never used; a denoiser of another model is refused."""
        from .snd.denoiser import Denoiser, DenoiserError

        card = self._cards.get(model) or self.model_card(model)
        entry = _denoiser_entry(card, model)
        sha = entry["sha256"]
        if sha in self._denoisers:
            return self._denoisers[sha]
        data = self._bundle_file(model, DENOISER_FILE, sha, "denoiser")
        try:
            loaded = Denoiser.from_bytes(data, expected_sha256=sha)
        except DenoiserError as exc:
            raise ClientError(f"the denoiser of model {model!r} cannot be used: {exc}; not used") from None
        _check_denoiser(loaded.config, card, entry, model)
        self._denoisers[sha] = loaded
        return loaded

    # ------------------------------------------------------------------ the client bundle: a model's public files
    def bundle(self, model: str) -> Path | None:
        """The local directory of model ``model``'s client bundle (every public file a client holds for it: a PPFT
        run's client encoder and slot centre, an SnD denoiser, RAPT's plain tokens; docs/server.md), or None when its
        card names none (``client_bundle`` null).

        From this client's memory, else the cache (``cache_dir/<sha256>/``: checked whole first, every file against
        the manifest and the manifest against the card), else downloaded once from ``GET /v1/models/{id}/bundle``
        (the manifest, checked against the card's sha256) and ``.../bundle/{file}`` (each file, checked against the
        manifest) into a temporary directory renamed into place when complete. A mismatched or damaged bundle is a
        :class:`ClientError` and is never used: a damaged cached one is removed (the next call downloads it afresh),
        a mismatched download is never cached."""
        card = self._cards.get(model) or self.model_card(model)
        entry = _bundle_entry(card, model)
        if entry is None:
            return None
        sha = entry["sha256"]
        if sha in self._bundles:
            return self._bundles[sha]
        directory = self.cache_dir / sha
        if directory.exists():
            try:
                verify_dir(directory, sha)
            except BundleError as exc:
                if directory.is_dir() and not directory.is_symlink():
                    shutil.rmtree(directory, ignore_errors=True)
                else:
                    directory.unlink(missing_ok=True)
                raise ClientError(
                    f"the cached client bundle {str(directory)!r} of model {model!r} is damaged ({exc}): it was "
                    "removed from the cache and not used (call again to download it afresh)"
                ) from None
        else:
            directory = self._download_bundle(model, entry)
        self._bundles[sha] = directory
        return directory

    def _download_bundle(self, model: str, entry: dict) -> Path:
        """Download, check and install model ``model``'s client bundle (see :meth:`bundle`)."""
        route = f"/v1/models/{quote(model, safe='')}/bundle"
        source = f"the client bundle the server sent for model {model!r}"
        raw = self._download(route, limit=MAX_MANIFEST_BYTES)
        got = hashlib.sha256(raw).hexdigest()
        if got != entry["sha256"]:
            raise ClientError(
                f"{source} has a manifest of sha256 {got[:16]}..., not the card's {entry['sha256'][:16]}...: refused, "
                "nothing cached, nothing used"
            )
        try:
            manifest = Manifest.from_bytes(raw)
        except BundleError as exc:
            raise ClientError(f"{source} is refused: {exc}; nothing cached, nothing used") from None
        if (manifest.total_bytes, len(manifest.files)) != (entry["bytes"], entry["files"]):
            raise ClientError(
                f"{source} lists {len(manifest.files)} files of {manifest.total_bytes} bytes, not the card's "
                f"{entry['files']} of {entry['bytes']}: refused, nothing cached, nothing used"
            )
        if self.progress is not None:
            self.progress(
                f"downloading the client bundle of model {model!r} ({len(manifest.files)} files, "
                f"{manifest.total_bytes / 1e6:.1f} MB) into {self.cache_dir}"
            )
        try:
            return install(
                self.cache_dir, raw, lambda f: self._download(f"{route}/{quote(f.name, safe='/')}", limit=f.bytes)
            )
        except BundleError as exc:
            raise ClientError(f"{source} is refused: {exc}; nothing cached, nothing used") from None

    def _bundle_file(self, model: str, name: str, sha256: str, what: str) -> bytes:
        """The bytes of the file ``name`` of model ``model``'s client bundle, which the card names (its ``what``
        entry) by ``sha256``; a :class:`ClientError` when the bundle is missing, lacks it, or holds other bytes."""
        directory = self.bundle(model)
        if directory is None:
            raise ClientError(
                f"model {model!r}'s card names a {what} but no client bundle to get it from ('client_bundle' is null)"
            )
        try:
            data = (directory / name).read_bytes()
        except OSError:
            raise ClientError(f"the client bundle of model {model!r} holds no {what} ({name}): refused") from None
        got = hashlib.sha256(data).hexdigest()
        if got != sha256:
            raise ClientError(
                f"the {what} in the client bundle of model {model!r} has sha256 {got[:16]}..., not the card's "
                f"{sha256[:16]}...: refused, not used"
            )
        return data

    # ------------------------------------------------------------------ RAPT: text privatized here
    def classify(
        self,
        texts: str | Sequence[str] | Sequence[Sequence[str]],
        *,
        model: str,
        eta: float | None = None,
        pos: str | None = None,
        seed: int | None = None,
        adapter: str | None = None,
    ) -> ClassifyResult:
        """Privatize ``texts`` locally (RAPT: T2T / PCT2T at ``eta``, the model's plain tokens prepended and
        privatized with each example), send only the privatized text, return the labels (with ``adapter``: those
        of one of your fine-tuned adapters of the model).

        ``texts``: one text, a list of texts, or (a sentence-pair model, the card's ``sentences`` 2) a list of
        pairs. ``eta`` defaults to the eta the model was trained at (a model trained on clear text has none: pass
        one); ``max_epsilon`` caps it. ``pos`` (``"noun,verb"``, ``"all"``, ...) defaults to the card's categories
        and may only add to them: words outside the categories are sent unchanged, so fewer categories than the
        model's would send in clear words it was trained on privatized. ``seed`` makes the noise reproducible
        (experiments only: NOT private); otherwise it comes from OS entropy. Everything is checked, the word table
        and plain tokens loaded and the text privatized before anything is sent."""
        done = self._privatize_examples(texts, model=model, eta=eta, pos=pos, seed=seed)
        del texts  # from here on only the privatized text exists
        request = {"model": model, "examples": done.sent} | ({} if adapter is None else {"adapter": adapter})
        body = json.dumps(request).encode("utf-8")
        reply = self._request("POST", "/v1/classify", content=body, headers={"Content-Type": "application/json"})
        labels = _reply_rows(reply, "labels", len(done.sent), "/v1/classify", int)
        probabilities = _reply_rows(reply, "probabilities", len(done.sent), "/v1/classify", list)
        return ClassifyResult(
            reply["model"],
            labels,
            probabilities,
            reply.get("usage", {}),
            done.sent,
            done.counts,
            done.eta,
            None if done.categories is None else list(done.categories),
            done.privacy,
            len(body),
        )

    def _privatize_examples(
        self, texts: Any, *, model: str, eta: float | None, pos: str | None, seed: int | None
    ) -> _Privatized:
        """``texts`` privatized here for classify model ``model`` (see :meth:`classify`): everything checked, the word
        table and the plain tokens loaded, nothing sent but the card and plain-token reads."""
        card = self._cards.get(model) or self.model_card(model)
        examples = _classify_examples(texts, card, model)
        rate = self._rapt_eta(card, model, eta)
        categories = _rapt_categories(card, model, pos)
        mechanism = self._rapt_mechanism(card, model, categories).with_eta(rate)
        plain = self.plain_tokens(model)
        from .rng import secure_generator, seeded_generator
        from .substitution.examples import privatize_examples

        generator = secure_generator() if seed is None else seeded_generator(seed)
        private = privatize_examples(examples, [None] * len(examples), mechanism, plain, generator=generator)
        sent = [{"parts": list(e.parts), "plain": None if e.plain is None else list(e.plain), "sequence": e.sequence}
                for e in private]  # fmt: skip
        return _Privatized(sent, [e.words_privatized for e in private], rate, categories, mechanism)

    def _rapt_eta(self, card: dict, model: str, eta: float | None) -> float:
        """The eta to privatize at: the caller's, else the card's; refused above ``max_epsilon``."""
        rate = eta if eta is not None else card.get("eta")
        if rate is None:
            raise ModelMismatchError(
                f"model {model!r} was trained without privatization, so there is no default eta: pass eta=..."
            )
        if not _positive_number(rate):
            raise ValueError(f"eta must be a finite number > 0, got {rate!r}")
        if self.max_epsilon is not None and rate > self.max_epsilon:
            chosen = f"eta {rate:g}" + ("" if eta is not None else " (the model card's)")
            raise ClientError(
                f"refused: {chosen} is above this client's max_epsilon {self.max_epsilon:g}; nothing was sent"
            )
        return float(rate)

    def _rapt_mechanism(self, card: dict, model: str, categories: tuple[str, ...] | None):
        """T2T / PCT2T (eta 1) over this client's copy of the card's encoder word table (``encoder=``, else the
        client bundle's encoder, else the card's ``encoder_id``): its weights' sha256 must be the card's
        (:class:`ModelMismatchError`)."""
        from .encoders.loading import resolve_encoder_path, weights_sha256

        source = self._encoder_source(model) or card.get("encoder_id")
        if not source:
            raise ClientError(
                f"model {model!r}'s card names no encoder: pass its encoder's directory (encoder=, --encoder)"
            )
        resolved = resolve_encoder_path(os.fspath(source))
        want = card.get("encoder_sha256")
        if want is not None:
            got = weights_sha256(resolved)
            if got != want:
                raise ModelMismatchError(
                    f"the local encoder ({str(got)[:12]}...) is not the one model {model!r} was trained with "
                    f"({card.get('encoder_id')}, sha256 {str(want)[:12]}...): its word table would privatize "
                    "differently; " + _encoder_hint(card, self.encoder_path)
                )
        return _word_mechanism(resolved, want, categories)

    def plain_tokens(self, model: str):
        """The public :class:`~textfree.substitution.plain.PlainTokens` of classify model ``model`` (None: it has
        none): from this client's memory, else the model's client bundle (:meth:`bundle`: downloaded once, cached,
        checked). Their sha256 must be the card's ``plain_tokens`` entry's: a mismatched file is a
        :class:`ClientError`, never used."""
        card = self._cards.get(model) or self.model_card(model)
        entry = _plain_entry(card, model)
        if entry is None:
            return None
        sha = entry["sha256"]
        if sha in self._plain:
            return self._plain[sha]
        data = self._bundle_file(model, PLAIN_TOKENS_FILE, sha, "plain-token file")
        try:
            plain = _plain_tokens_of(data, entry)
        except ValueError as exc:
            raise ClientError(f"the plain tokens of model {model!r} cannot be used: {exc}; not used") from None
        self._plain[sha] = plain
        return plain

    # ------------------------------------------------------------------ datasets and fine-tuning jobs
    def upload_examples(
        self,
        texts: Sequence[str] | Sequence[Sequence[str]],
        labels: Sequence[int],
        *,
        model: str,
        name: str | None = None,
        eta: float | None = None,
        pos: str | None = None,
        seed: int | None = None,
    ) -> UploadedExamples:
        """Privatize the private training ``texts`` locally for classify model ``model`` exactly as :meth:`classify`
        does (RAPT: T2T / PCT2T at ``eta``, the model's plain tokens), and upload only that text and one label per
        example (an int in ``[0, the card's num_labels)``), as a dataset for a fine-tuning job
        (:meth:`create_fine_tuning_job`, ``method=...``).

        Each upload is a fresh release of every text: uploading the same texts again spends their privacy again."""
        labels = list(labels)
        if isinstance(texts, str) or len(texts) != len(labels):
            raise ValueError(f"give one label per text: {1 if isinstance(texts, str) else len(texts)} texts, "
                             f"{len(labels)} labels")  # fmt: skip
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in labels):
            raise ValueError("every label must be an int (the class index)")
        done = self._privatize_examples(texts, model=model, eta=eta, pos=pos, seed=seed)
        del texts  # from here on only the privatized text exists
        body = json.dumps({"model": model, "name": name, "examples": done.sent, "labels": labels}).encode("utf-8")
        headers = {"Content-Type": "application/json", "Idempotency-Key": uuid.uuid4().hex}
        dataset = self._request("POST", "/v1/datasets", content=body, headers=headers)
        categories = None if done.categories is None else list(done.categories)
        return UploadedExamples(dataset, done.sent, done.counts, done.eta, categories, done.privacy, len(body))

    def upload_dataset(
        self,
        texts: Sequence[str],
        targets: Sequence[str],
        public: Sequence[str] | None = None,
        *,
        model: str,
        name: str | None = None,
        epsilon: float | None = None,
        k: int | None = None,
        seed: int | None = None,
        no_noise: bool = False,
    ) -> dict:
        """Privatize the private ``texts`` locally (the model card's encoder, k and mechanism, as :meth:`generate`)
        and upload the payload with one ``targets`` text per row (sent in clear: the answers to train towards) and
        optional ``public`` text per row. Returns the dataset (``id``, ``rows``, ``privacy``: worst-case loss per row).

        Each upload is a fresh release of every text: uploading the same texts again spends their privacy again."""
        texts, targets = list(texts), list(targets)
        if not texts or len(targets) != len(texts):
            raise ValueError(f"give one target per text: {len(texts)} texts, {len(targets)} targets")
        pub = None if public is None else list(public)
        if pub is not None and len(pub) != len(texts):
            raise ValueError(f"give one public text per text (or none): {len(texts)} texts, {len(pub)} public")
        payload = self.privatizer(model, epsilon=epsilon, k=k, no_noise=no_noise).privatize(
            texts, seed=seed, public=pub
        )
        del texts  # from here on only the payload exists
        body = {"model": model, "name": name, "payload_b64": payload.to_base64(), "targets": targets}
        return self._request("POST", "/v1/datasets", json=body, headers={"Idempotency-Key": uuid.uuid4().hex})

    def datasets(self) -> list[dict]:
        return self._request("GET", "/v1/datasets")["data"]

    def dataset(self, dataset_id: str) -> dict:
        return self._request("GET", f"/v1/datasets/{quote(dataset_id, safe='')}")

    def create_fine_tuning_job(self, *, model: str, datasets: str | Sequence[str], **hyperparameters: Any) -> dict:
        """Start a job adapting ``model`` to your ``datasets`` (ids); ``hyperparameters``: epochs, lr, batch_size,
        max_steps, warmup_steps, weight_decay, grad_clip, ema_decay, seed, save_every, log_every (docs/server.md)."""
        ids = [datasets] if isinstance(datasets, str) else list(datasets)
        body = {"model": model, "datasets": ids, "hyperparameters": hyperparameters}
        return self._request("POST", "/v1/fine_tuning/jobs", json=body, headers={"Idempotency-Key": uuid.uuid4().hex})

    def job(self, job_id: str) -> dict:
        return self._request("GET", f"/v1/fine_tuning/jobs/{quote(job_id, safe='')}")

    def jobs(self) -> list[dict]:
        return self._request("GET", "/v1/fine_tuning/jobs")["data"]

    def cancel_job(self, job_id: str) -> dict:
        return self._request("POST", f"/v1/fine_tuning/jobs/{quote(job_id, safe='')}/cancel")

    def job_events(self, job_id: str, *, after: int = 0, limit: int = 100) -> dict:
        return self._request(
            "GET", f"/v1/fine_tuning/jobs/{quote(job_id, safe='')}/events", params={"after": after, "limit": limit}
        )

    def iter_job_events(self, job_id: str, *, poll: float = 1.0, timeout: float | None = None) -> Iterator[dict]:
        """Every event of the job, in order, as it happens, until the job ends (polled; each poll is retried)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        after = 0
        while True:
            page = self.job_events(job_id, after=after, limit=1000)
            for event in page["data"]:
                after = event["seq"]
                yield event
            if page["status"] in JOB_TERMINAL and not page["has_more"]:
                return
            if page["has_more"]:
                continue
            if deadline is not None and time.monotonic() > deadline:
                raise ClientError(f"job {job_id} did not finish within {timeout} s (it goes on on the server)")
            time.sleep(poll)

    def wait_job(
        self,
        job_id: str,
        *,
        poll: float = 1.0,
        timeout: float | None = None,
        on_event: Callable[[dict], None] | None = None,
    ) -> dict:
        """Wait until the job ends (``on_event`` sees each progress event); returns the final job object."""
        for event in self.iter_job_events(job_id, poll=poll, timeout=timeout):
            if on_event is not None:
                on_event(event)
        return self.job(job_id)


def _cache_dir(cache_dir: str | os.PathLike | None) -> Path:
    """Where downloaded client bundles go: ``cache_dir``, else ``$TEXTFREE_BUNDLE_CACHE``, else the user's cache."""
    if cache_dir is not None:
        return Path(os.path.expanduser(os.fspath(cache_dir)))
    if os.environ.get(BUNDLE_CACHE_ENV):
        return Path(os.path.expanduser(os.environ[BUNDLE_CACHE_ENV]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(os.path.expanduser(base)) / "textfree" / "bundles"


def _encoder_hint(card: dict, override: Any) -> str:
    """What to do about a local encoder that is not the card's."""
    if override is not None and card.get("client_bundle"):
        return "drop the encoder override (encoder=, --encoder) to use the one the server publishes"
    return "pass that encoder's directory (encoder=, --encoder)"


def _is_sha256(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _count(value: Any, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _bundle_entry(card: dict, model: str) -> dict | None:
    """The card's ``client_bundle`` entry, checked (None: the model publishes no public files)."""
    entry = card.get("client_bundle")
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise ClientError(f"model {model!r}'s card: 'client_bundle' is {entry!r}, not an object")
    if not _is_sha256(entry.get("sha256")):
        raise ClientError(f"model {model!r}'s card: the client bundle's sha256 {entry.get('sha256')!r} is not 64 hex "
                          "digits")  # fmt: skip
    if not _count(entry.get("bytes"), 0, MAX_BUNDLE_BYTES) or not _count(entry.get("files"), 1, MAX_FILES):
        raise ClientError(
            f"model {model!r}'s card: the client bundle's size {entry.get('bytes')!r} bytes in {entry.get('files')!r} "
            f"files is not within [0, {MAX_BUNDLE_BYTES}] bytes and [1, {MAX_FILES}] files"
        )
    return entry


def _denoiser_entry(card: dict, model: str) -> dict:
    """The card's ``denoiser`` entry, checked: a :class:`ClientError` naming the model without one or with one the
    client cannot use (a bad sha256, size or eta range)."""
    entry = card.get("denoiser")
    if entry is None:
        raise ClientError(
            f"model {model!r} has no denoiser (its card's 'denoiser' is null): embed without denoise=True, or ask the "
            "server to serve one (textfree serve --denoiser ID=PATH)"
        )
    if not isinstance(entry, dict):
        raise ClientError(f"model {model!r}'s card: 'denoiser' is {entry!r}, not an object")
    sha, size = entry.get("sha256"), entry.get("bytes")
    if not _is_sha256(sha):
        raise ClientError(f"model {model!r}'s card: the denoiser's sha256 {sha!r} is not 64 hex digits")
    if not _count(size, 1, MAX_FILE_BYTES):
        raise ClientError(
            f"model {model!r}'s card: the denoiser's size {size!r} is not a byte count in [1, {MAX_FILE_BYTES}]"
        )
    lo, hi = entry.get("eta_min"), entry.get("eta_max")
    if not all(_positive_number(v) for v in (lo, hi)):
        raise ClientError(f"model {model!r}'s card: the denoiser's eta range [{lo!r}, {hi!r}] is not two numbers > 0")
    if lo > hi:
        raise ClientError(f"model {model!r}'s card: the denoiser's eta_min {lo} is above its eta_max {hi}")
    return entry


@functools.lru_cache(maxsize=4)
def _word_mechanism(encoder: str, sha256: str | None, categories: tuple[str, ...] | None):
    """T2T / PCT2T at eta 1 over ``encoder``'s word table (its table and the tags of its words are costly: built once
    per process and (encoder, weights, categories); ``with_eta`` shares them)."""
    from .substitution.cli_support import build_t2t

    return build_t2t(table=encoder, eta=1.0, pos=None if categories is None else ",".join(categories))


def _classify_examples(texts: Any, card: dict, model: str) -> list[tuple[str, ...]]:
    """``texts`` as examples of the card's number of sentences (ValueError naming the problem)."""
    if card.get("task") != "classify":
        raise ModelMismatchError(f"model {model!r} serves {card.get('task')!r}, not classify")
    n = card.get("sentences")
    if n not in (1, 2):
        raise ClientError(f"model {model!r}'s card: 'sentences' is {n!r}, not 1 or 2")
    items = [texts] if isinstance(texts, str) else list(texts)
    examples = [(t,) if isinstance(t, str) else tuple(t) for t in items]
    if not examples:
        raise ValueError("give at least one text to classify")
    for i, ex in enumerate(examples):
        if len(ex) != n or not all(isinstance(p, str) and p.strip() for p in ex):
            raise ValueError(
                f"text {i}: model {model!r} takes {'one non-empty text' if n == 1 else 'pairs of non-empty texts'} "
                "per example"
            )
    return examples


def _rapt_categories(card: dict, model: str, pos: str | None) -> tuple[str, ...] | None:
    """The categories to privatize: ``pos`` (parsed), else the card's; None: plain T2T (every word). ``pos`` may add
    categories, never drop one of the card's (a ValueError: those words would be sent in clear)."""
    want = card.get("pos_categories")
    if want is not None and not (isinstance(want, list) and all(isinstance(c, str) and c for c in want)):
        raise ClientError(f"model {model!r}'s card: 'pos_categories' is {want!r}, not a list of categories")
    if pos is None:
        return None if want is None else tuple(want)
    from .substitution.cli_support import parse_pos
    from .substitution.pos import UNIVERSAL_TAGS

    chosen = parse_pos(pos)
    if chosen is None:
        raise ValueError(f"pos {pos!r} names no category (e.g. 'noun,verb' or 'all')")
    unknown = sorted(set(chosen) - set(UNIVERSAL_TAGS))
    if unknown:
        raise ValueError(f"pos {pos!r}: unknown categories {unknown} (known: {', '.join(UNIVERSAL_TAGS)}, or 'all')")
    dropped = ["every category (T2T)"] if want is None else sorted(set(want) - set(chosen))
    if dropped:
        raise ValueError(
            f"pos {pos!r} privatizes fewer words than model {model!r} was trained on (it privatizes "
            f"{', '.join(dropped)}): the words left out would be sent in clear; add them, or pos='all'"
        )
    return tuple(chosen)


def _plain_entry(card: dict, model: str) -> dict | None:
    """The card's ``plain_tokens`` entry, checked (None: the model takes no plain tokens)."""
    entry = card.get("plain_tokens")
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise ClientError(f"model {model!r}'s card: 'plain_tokens' is {entry!r}, not an object")
    sha, size = entry.get("sha256"), entry.get("bytes")
    if not _is_sha256(sha):
        raise ClientError(f"model {model!r}'s card: the plain tokens' sha256 {sha!r} is not 64 hex digits")
    if not _count(size, 1, MAX_FILE_BYTES):
        raise ClientError(
            f"model {model!r}'s card: the plain tokens' size {size!r} is not a byte count in [1, {MAX_FILE_BYTES}]"
        )
    for name in ("length", "sequences"):
        value = entry.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ClientError(f"model {model!r}'s card: the plain tokens' {name!r} is {value!r}, not a count >= 1")
    return entry


def _plain_tokens_of(data: bytes, entry: dict):
    """The :class:`~textfree.substitution.plain.PlainTokens` of a plain-token file (ValueError when it is not one, or
    not the card's shape)."""
    from .substitution.plain import PlainTokens

    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("not a JSON file") from None
    plain = PlainTokens.from_dict(obj, where="the file")
    if len(plain.sequences) != entry["sequences"]:
        raise ValueError(f"it does not hold the card's {entry['sequences']} sequence(s)")
    if plain.length != entry["length"]:
        raise ValueError(f"a sequence is not {entry['length']} words long, as the card says")
    return plain


def _positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _check_denoiser(config, card: dict, entry: dict, model: str) -> None:
    """Refuse (:class:`ClientError`) a denoiser trained for another model than ``card``'s: another encoder (sha256),
    other widths or another eta range than the card names."""
    want = card.get("encoder_sha256")
    if not want or config.encoder_sha256 != want:
        raise ClientError(
            f"the denoiser of model {model!r} was trained for the encoder with sha256 "
            f"{str(config.encoder_sha256)[:16]}..., but the model serves the encoder with sha256 {str(want)[:16]}...: "
            "a denoiser for another model is refused"
        )
    if config.token_dim != card.get("encoder_dim") or config.output_dim != card.get("output_dim"):
        raise ClientError(
            f"the denoiser of model {model!r} reads token width {config.token_dim} and output width "
            f"{config.output_dim}; the model has {card.get('encoder_dim')} and {card.get('output_dim')}: refused"
        )
    if (config.eta_min, config.eta_max) != (entry["eta_min"], entry["eta_max"]):
        raise ClientError(
            f"the denoiser of model {model!r} was trained for eta [{config.eta_min:g}, {config.eta_max:g}], not the "
            f"card's [{entry['eta_min']:g}, {entry['eta_max']:g}]: refused"
        )


def _clean_tokens(privatizer, texts: list[str], payload):
    """X: the clean token embeddings the payload's rows were made from (the privatizer's own batches and k=1
    slots), padded as the payload is; a :class:`ClientError` if they do not line up with its mask."""
    import torch

    from .mechanisms.transforms import k_pool

    chunks = []
    for start in range(0, len(texts), privatizer.batch_size):
        batch = privatizer.encoder.encode(texts[start : start + privatizer.batch_size])
        x, m = k_pool(batch.hidden.to(torch.float32), batch.mask, 1)
        chunks.append((x * m.unsqueeze(-1).to(x.dtype)).cpu())
    s = payload.vectors.shape[1]
    if any(c.shape[1] > s for c in chunks):
        raise ClientError("the clean token embeddings are longer than the payload's rows: cannot denoise")
    x = torch.cat([torch.nn.functional.pad(c, (0, 0, 0, s - c.shape[1])) for c in chunks])
    if x.shape != payload.vectors.shape:
        raise ClientError(f"the clean token embeddings {tuple(x.shape)} do not match the payload's")
    return x


def _card_center(card: dict, model: str, dim: int):
    """The public slot centre a model card carries (None: the model takes uncentred slots, as PPFT); its values must
    hash to the card's ``center_sha256``."""
    sha = card.get("center_sha256")
    if not sha:
        return None
    import torch

    from .mechanisms.centering import center_sha256, check_center

    try:
        center = check_center(torch.tensor(card.get("center"), dtype=torch.float32), dim)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ModelMismatchError(
            f"model {model!r}'s card names a slot centre but carries no usable one: {exc}"
        ) from None
    if center_sha256(center) != sha:
        raise ModelMismatchError(
            f"model {model!r}'s card: the slot centre's values do not hash to its center_sha256 {sha[:12]}..."
        )
    return center


# the card fields a client privatizes from: (type(s), required); the task's own ones are added below
_CARD_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "encoder_kind": ((str,), True),
    "encoder_dim": ((int,), True),
    "k": ((int,), True),
    "mechanism": ((str,), True),
    "encoder_id": ((str, type(None)), False),
    "encoder_sha256": ((str, type(None)), False),
    "epsilon": ((int, float, type(None)), False),
    "max_private_tokens": ((int, type(None)), False),
    "noise_match": ((str,), False),
    "fixed_slots": ((bool, type(None)), False),
    "repeat_mean": ((bool, type(None)), False),
}
_TASK_FIELDS = {"generate": {"max_slots": ((int,), True)}, "embed": {"clip_norm": ((int, float), True)}}


def _check_card(card: dict, model: str) -> None:
    """A card a client cannot privatize from is a :class:`ClientError` naming the field, never a KeyError or a payload
    made with a misread setting."""
    for name, (types, required) in {**_CARD_FIELDS, **_TASK_FIELDS[card["task"]]}.items():
        if name not in card:
            if required:
                raise ClientError(f"model {model!r}'s card has no {name!r}: the client cannot privatize for it")
            continue
        value = card[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ClientError(
                f"model {model!r}'s card: {name!r} is {value!r}, not a {' or '.join(t.__name__ for t in types)}"
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not (math.isfinite(value) and value > 0):
            raise ClientError(f"model {model!r}'s card: {name!r} must be a finite number > 0, got {value!r}")


def _reply_rows(reply: dict, field: str, rows: int, route: str, kind: type) -> list:
    """``reply[field]``: one ``kind`` per payload row, or a :class:`ClientError` saying what the server sent."""
    values = reply.get(field)
    if (
        not isinstance(reply.get("model"), str)
        or not isinstance(values, list)
        or len(values) != rows
        or not all(isinstance(v, kind) for v in values)
    ):
        raise ClientError(
            f"POST {route}: the server's reply has no model id and list of {rows} {kind.__name__} {field!r} "
            "(one per row sent)"
        )
    return list(values)


def _server_error(response) -> ServerError:
    try:
        err = response.json()["error"]
        return ServerError(response.status_code, str(err["type"]), str(err["message"]))
    except (ValueError, KeyError, TypeError):
        return ServerError(response.status_code, "http_error", response.text[:200])
