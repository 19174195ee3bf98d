"""``Client``: talk to a ``textfree serve`` server. Private text is privatized HERE; only the payload is sent.

    from textfree.client import Client

    client = Client("http://127.0.0.1:8000", api_key="tf_...")          # needs: pip install "textfree[server]"
    result = client.generate("A 46-year-old man has ...", public="Options:\\nA. ...", model="ddx")
    print(result.answers[0], result.privacy)

Before privatizing, the client reads the model's card (``GET /v1/models/{id}``) and loads its own copy of the
encoder the card names (``encoder=`` a local path, else the packaged all-MiniLM-L6-v2). It REFUSES
(:class:`ModelMismatchError`) when that encoder's sha256, width or kind differ from the card's, when ``k`` differs,
or when the card asks for a payload shape it does not make; a server cannot talk it into sending anything else.
Idempotent calls are retried with exponential backoff on connection errors, 5xx and 429 (``Retry-After`` is
honoured). A retried ``generate`` resends the SAME payload: no fresh noise, so no extra privacy cost. Uploads and job
submissions carry an ``Idempotency-Key``, so their retries never store a dataset or start a job twice.
"""

from __future__ import annotations

import math
import os
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence
from urllib.parse import quote

__all__ = ["Client", "ClientError", "ServerError", "ModelMismatchError", "GenerateResult", "EmbedResult"]

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
JOB_TERMINAL = ("succeeded", "failed", "cancelled")
MAX_RETRY_AFTER_S = 30.0


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
    model: str
    embeddings: list[list[float]]
    usage: dict[str, Any]
    privacy: Any
    payload_bytes: int


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
    backoff: first wait in seconds, doubled per attempt (with jitter). encoder: the local encoder directory
    (default: the packaged all-MiniLM-L6-v2). http_client: an ``httpx.Client`` to use instead of a new one.
    max_epsilon: the largest noise epsilon this client releases at (default ``$TEXTFREE_MAX_EPSILON``, else no cap):
    without an explicit epsilon the server's model card picks it, so a cap keeps a careless or hostile card from
    choosing a weak one; a release above the cap (or a clean one) is refused before anything is sent.
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

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ HTTP
    def _request(self, method: str, path: str, **kwargs) -> Any:
        httpx = _httpx()
        headers = dict(kwargs.pop("headers", {}) or {})
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            wait = self.backoff * (2**attempt) * (0.5 + random.random() / 2)
            try:
                response = self._http.request(method, f"{self.url}{path}", headers=headers, **kwargs)
            except httpx.TransportError as exc:
                last = ClientError(f"{method} {path}: {type(exc).__name__}: {exc}")
            else:
                if response.status_code < 400:
                    try:
                        reply = response.json()
                    except ValueError:
                        raise ClientError(f"{method} {path}: the server's reply is not JSON") from None
                    if not isinstance(reply, dict):
                        raise ClientError(f"{method} {path}: the server's reply is not a JSON object")
                    return reply
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
    def _encoder(self, kind: str, max_length: int):
        from .encoders import load_encoder

        key = (kind, str(self.encoder_path))
        if key not in self._encoders:
            self._encoders[key] = load_encoder(self.encoder_path, kind)
        enc = self._encoders[key]
        enc.max_length = max_length
        return enc

    def privatizer(self, model: str, *, epsilon: float | None = None, k: int | None = None, no_noise: bool = False):
        """A local :class:`~textfree.privatizer.Privatizer` matching ``model``'s card (refuses a mismatch)."""
        from .privatizer import Privatizer

        card = self._cards.get(model) or self.model_card(model)
        task = card.get("task")
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
        enc = self._encoder(card["encoder_kind"], int(card.get("max_private_tokens") or card["max_slots"]))
        if enc.dim != card["encoder_dim"]:
            raise ModelMismatchError(
                f"the local encoder has width {enc.dim}; model {model!r} takes {card['encoder_dim']}"
            )
        if card.get("encoder_sha256") and enc.sha256 != card["encoder_sha256"]:
            raise ModelMismatchError(
                f"the local encoder ({enc.sha256 and enc.sha256[:12]}...) is not the one model {model!r} was trained "
                "with "
                f"({card['encoder_id']}, sha256 {card['encoder_sha256'][:12]}...): pass encoder=<that encoder's "
                "directory>"
            )
        if task == "embed":
            from .mechanisms import Clipped, L2Laplace

            if card["mechanism"] != "l2_laplace":
                raise ModelMismatchError(
                    f"this client makes l2_laplace token payloads; model {model!r} asks for {card['mechanism']!r}"
                )
            noise = None if eps is None else Clipped(L2Laplace(eps), max_norm=float(card["clip_norm"]))
            privatizer = Privatizer(enc, noise, k=1, normalize=False, renormalize=False)
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
    ) -> EmbedResult:
        """Noisy, clipped token embeddings (made locally) -> the server's sentence embeddings (SnD-style)."""
        texts = [private_text] if isinstance(private_text, str) else list(private_text)
        payload = self.privatizer(model, epsilon=epsilon, no_noise=no_noise).privatize(texts, seed=seed)
        del texts, private_text
        body = payload.to_bytes()
        reply = self._request(
            "POST",
            "/v1/embed",
            content=body,
            params={"model": model},
            headers={"Content-Type": "application/octet-stream"},
        )
        embeddings = _reply_rows(reply, "embeddings", payload.batch_size, "/v1/embed", list)
        return EmbedResult(reply["model"], embeddings, reply.get("usage", {}), payload.worst_case_loss(), len(body))

    # ------------------------------------------------------------------ datasets and fine-tuning jobs
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
