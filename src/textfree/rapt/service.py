"""RAPT as a served system: registers ``"rapt"`` with the server (:mod:`textfree.server.registry`) when imported.

A finished RAPT run directory (``textfree rapt train --out RUN``) is served at ``POST /v1/classify``: the client
privatizes each example locally with T2T / PCT2T at the run's eta and categories, prepends the public plain tokens
(privatized with it) and sends only that text; the server answers labels and class probabilities. The classifier is
:func:`textfree.rapt.model.load_classifier`'s (``adapter/`` on the base encoder, or ``model/``, and its task
head): the reconstruction head is never saved, so it is never loaded.

* :func:`is_rapt_run` recognises a run from its files (``summary.json`` of system ``rapt``, or a ``train_config.json``
  with RAPT's settings), so ``textfree serve --model ID=RUN`` serves it without ``--system``.
* The model card carries names and hashes only (:func:`rapt_card`): the base encoder's public name and weights'
  sha256 (the client builds its word table from its own copy and checks it), the sha256 of the served weights and of
  ``plain_tokens.json``, the categories and eta the run was trained at, the number of labels, never a server path.
* ``plain_tokens.json`` is read into memory once and published in the model's client bundle (and at
  ``GET /v1/models/{id}/plain_tokens``): the bytes served are the bytes hashed for the card, and the same bytes are
  what the model reads its plain tokens from. A run that carries its base encoder (``base_encoder/``, a published
  run) publishes it in the bundle too, as the client's ``encoder/``: the client builds its word table from it.
* Fine-tuning jobs (:func:`fine_tune`, :mod:`textfree.rapt.finetune`): a tenant's examples, privatized to text on
  their device and uploaded with their labels, train the chosen method (``methods``: every PEFT method of
  :data:`~textfree.lm.adapters.ADAPTER_METHODS`) with the reconstruction head; the job's run directory is a RAPT run
  that :func:`load_adapter` serves at ``/v1/classify`` with ``adapter=<id>``.

Importing this module is cheap: torch, transformers and peft load with the first model.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Hashable, Sequence

from ..atomic import _sha256_file
from ..lm.adapters import ADAPTER_METHODS
from ..server.config import ServerConfig
from ..server.errors import ApiError
from ..server.registry import FineTuneJob, ServedModel, ServedSystem, register_system

__all__ = [
    "RAPT_SYSTEM",
    "RaptModel",
    "fine_tune",
    "is_rapt_run",
    "load_adapter",
    "load_model",
    "rapt_card",
    "weights_entry",
]

_WEIGHT_SUFFIXES = (".safetensors", ".bin")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def is_rapt_run(source: str) -> bool:
    """Whether ``source`` is a RAPT run directory: its ``summary.json`` names system ``rapt``, or its
    ``train_config.json`` holds RAPT's settings (plain tokens, reconstruction). Never raises."""
    run = Path(source)
    if not run.is_dir():
        return False
    summary = _read_json(run / "summary.json")
    if isinstance(summary, dict) and summary.get("system") == "rapt":
        return True
    saved = _read_json(run / "train_config.json")
    config = saved.get("config") if isinstance(saved, dict) else None
    return isinstance(config, dict) and {"encoder", "plain_length", "rec_weight", "reconstruction"} <= set(config)


def weights_entry(run: str | Path) -> dict[str, str | None]:
    """``{"kind": "adapter" | "model", "sha256", "task_head_sha256"}`` of a run's served weights: the sha256 of its
    one weights file (or of the list of ``name sha256`` lines of several, sharded, ones) and of its task head
    (``task_head.safetensors``; null for a run without one). ValueError without weights."""
    run = Path(run)
    head = run / "task_head.safetensors"
    head_sha = _sha256_file(head) if head.is_file() else None
    for kind in ("adapter", "model"):
        folder = run / kind
        if not folder.is_dir():
            continue
        files = sorted(f for f in folder.iterdir() if f.is_file() and f.name.endswith(_WEIGHT_SUFFIXES))
        if not files:
            raise ValueError(f"{str(folder)!r} holds no weights file ({', '.join(_WEIGHT_SUFFIXES)})")
        if len(files) == 1:
            sha = _sha256_file(files[0])
        else:
            sha = hashlib.sha256("".join(f"{f.name} {_sha256_file(f)}\n" for f in files).encode()).hexdigest()
        return {"kind": kind, "sha256": sha, "task_head_sha256": head_sha}
    raise ValueError(f"{str(run)!r} holds neither adapter/ nor model/")


def _plain_file(run: Path, model_id: str, config: dict[str, Any]):
    """(PlainTokens, PublicFile, card entry) of the run's ``plain_tokens.json``, read once; (None, None, None) for a
    run trained without plain tokens. ValueError for a missing, oversized or damaged file."""
    from ..server.public_files import PublicFileError, read_public_file
    from ..substitution.plain import PLAIN_FILE, PlainTokens

    path = run / PLAIN_FILE
    if not path.is_file():
        if int(config.get("plain_length") or 0) > 0:
            raise ValueError(
                f"the run was trained with {config['plain_length']} plain tokens but has no {PLAIN_FILE}: a client "
                "could not privatize for it"
            )
        return None, None, None
    try:
        public = read_public_file(path, "the plain tokens")
    except PublicFileError as exc:
        raise ValueError(str(exc)) from None
    try:
        plain = PlainTokens.from_dict(json.loads(public.data.decode("utf-8")), where=str(path))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"the plain tokens {str(path)!r} are damaged: {exc}") from None
    entry = {
        "sha256": public.sha256,
        "bytes": public.size,
        "length": plain.length,
        "sequences": len(plain.sequences),
        "url": f"/v1/models/{model_id}/plain_tokens",
    }
    return plain, public, entry


def rapt_card(
    model_id: str, config: dict[str, Any], summary: dict[str, Any], weights: dict[str, str], plain: dict | None
) -> dict[str, Any]:
    """The public card of a RAPT run: names and hashes only (see the module docstring)."""
    from ..data.tasks import PAIR_TASKS
    from ..encoders.loading import DEFAULT_ENCODER, encoder_id, resolve_encoder_path, weights_sha256
    from ..server.models import public_name
    from ..substitution.cli_support import parse_pos

    encoder = config["encoder"]
    local = None if encoder == DEFAULT_ENCODER else encoder
    categories = parse_pos(config.get("pos"))
    eta = config.get("eta")
    return {
        "id": model_id,
        "object": "model",
        "task": "classify",
        "route": "/v1/classify",
        "payload_kind": "privatized_text",
        "system": "rapt",
        # the base encoder: its public word table is the client's T2T table (a name, never the server's path)
        "encoder_id": public_name(encoder_id(local)),
        "encoder_sha256": weights_sha256(resolve_encoder_path(local)),  # null for a hub name not stored locally
        "mechanism": "pct2t" if categories else "t2t",
        "eta": None if eta is None else float(eta),
        "pos_categories": None if categories is None else list(categories),
        "epsilon_per_word": summary.get("epsilon_per_word"),
        "num_labels": int(summary["num_labels"]),
        "sentences": 2 if config.get("task") in PAIR_TASKS else 1,
        "max_tokens": int(config["max_length"]),
        "method": config.get("method"),
        "weights": weights,
        "plain_tokens": plain,
        "adapters": [],
    }


def client_files(run: Path, plain, card: dict[str, Any]) -> dict:
    """The public files a client of the run holds (its client bundle, by name): the plain tokens (``plain``, the
    :class:`~textfree.server.public_files.PublicFile` read once; None without), and the base encoder the run carries
    (``base_encoder/``, as ``encoder/``; its weights must be the card's ``encoder_sha256``). ValueError for an encoder
    that cannot be published or is not the card's."""
    from ..bundle import ENCODER_DIR, PLAIN_TOKENS_FILE
    from ..server.public_files import PublicFileError, public_dir
    from .model import BASE_ENCODER_DIR

    files = {} if plain is None else {PLAIN_TOKENS_FILE: plain}
    if (run / BASE_ENCODER_DIR).is_dir():
        try:
            encoder = public_dir(run / BASE_ENCODER_DIR, ENCODER_DIR)
        except PublicFileError as exc:
            raise ValueError(f"cannot publish the run's base encoder: {exc}") from None
        weights = encoder.get(f"{ENCODER_DIR}/model.safetensors")
        if weights is None or weights.sha256 != card["encoder_sha256"]:
            raise ValueError(
                f"the run's {BASE_ENCODER_DIR}/ holds no model.safetensors of the card's encoder sha256 "
                f"{str(card['encoder_sha256'])[:16]}...: a client would build another word table"
            )
        files.update(encoder)
    return files


@dataclass
class _Prepared:
    """A validated classify request: its examples, as the model's batch builder reads them."""

    examples: list

    @property
    def rows(self) -> int:
        return len(self.examples)


class RaptModel:
    """A RAPT classifier served at ``/v1/classify`` (its task head; no reconstruction head: :func:`load_classifier` has
    none)."""

    task = "classify"

    def __init__(self, model_id: str, classifier, tokenizer, plain, *, card: dict, max_length: int, public_files):
        self.id = model_id
        self.classifier = classifier.eval()
        self.tokenizer = tokenizer
        self.plain = plain
        self.card = card
        self.max_length = max_length
        self.public_files = public_files

    @classmethod
    def load(cls, model_id: str, source: str, *, device: str = "cpu") -> "RaptModel":
        """The RAPT run at ``source`` (a directory, or a Hugging Face hub id ``owner/name``); ValueError (naming what
        is missing or damaged) for anything else."""
        from ..lm.hub import resolve_source
        from .model import BASE_ENCODER_DIR, load_classifier

        run = Path(resolve_source(source))
        if not is_rapt_run(run):
            raise ValueError(
                f"{str(source)!r} is not a RAPT run (textfree rapt train --out writes one: summary.json of system "
                "'rapt', train_config.json, tokenizer/, adapter/ or model/)"
            )
        saved, summary = _read_json(run / "train_config.json"), _read_json(run / "summary.json")
        if not isinstance(summary, dict) or "num_labels" not in summary:
            raise ValueError(f"{str(run)!r} is not a finished RAPT run (its summary.json names no num_labels)")
        if not isinstance(saved, dict) or not isinstance(saved.get("config"), dict):
            raise ValueError(f"{str(run)!r} is not a finished RAPT run (no readable train_config.json)")
        plain, public, entry = _plain_file(run, model_id, saved["config"])  # the bytes published are the ones read
        classifier, tokenizer, _, config = load_classifier(run)
        bundled = run / BASE_ENCODER_DIR  # a published run carries its base encoder: the card names that one
        if bundled.is_dir():
            config = {**config, "encoder": str(bundled)}
        card = rapt_card(model_id, config, summary, weights_entry(run), entry)
        files = client_files(run, public, card)
        return cls(
            model_id,
            classifier.to(device),
            tokenizer,
            plain,
            card=card,
            max_length=int(config["max_length"]),
            public_files=files,
        )

    @property
    def device(self):
        return next(self.classifier.parameters()).device

    def prepare(self, examples: Sequence[Any], public: Sequence[str] | None, config: ServerConfig) -> _Prepared:
        """The request's examples checked against this card (4xx ``ApiError``)."""
        from ..server.models import check_examples
        from ..substitution.examples import PrivatizedExample

        if public is not None:
            raise ApiError(422, "invalid_request", "/v1/classify takes no public text")
        check_examples(examples, self.card, config)
        items = [
            PrivatizedExample(
                tuple(ex.parts), 0, None if ex.plain is None else tuple(ex.plain), ex.sequence
            )  # the label is unused: the server predicts it
            for ex in examples
        ]
        return _Prepared(items)

    def run(self, key: Hashable, items: list[_Prepared]) -> list[tuple[list[int], list[list[float]]]]:
        """(labels, class probabilities) per request: one forward pass over every example of the micro-batch (the
        labels the batch builder needs are placeholders: the loss the forward pass also returns is ignored)."""
        import torch

        from .model import encode_examples

        examples = [ex for item in items for ex in item.examples]
        batch = encode_examples(self.tokenizer, examples, self.plain, max_length=self.max_length)
        device = self.device
        batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        with torch.no_grad():  # the classifier's own forward (its task head); no reconstruction head is loaded
            probs = torch.softmax(self.classifier(batch)["logits"].float(), dim=-1).cpu()
        labels, rows = probs.argmax(dim=-1).tolist(), probs.tolist()
        out, start = [], 0
        for item in items:
            out.append((labels[start : start + item.rows], rows[start : start + item.rows]))
            start += item.rows
        return out


def load_model(model_id: str, source: str, config: ServerConfig) -> ServedModel:
    """The classify handler of the RAPT run at ``source`` (in process)."""
    return RaptModel.load(model_id, source, device=config.device)


def load_adapter(model_id: str, run_dir: str, device: str) -> ServedModel:
    """What a finished job wrote (a RAPT run directory), as an in-process classify handler of ``model_id``."""
    return RaptModel.load(model_id, run_dir, device=device)


def fine_tune(job: FineTuneJob) -> dict[str, Any]:
    """Train the job's method with the reconstruction head on its uploaded examples (text privatized on the client
    + labels), starting from the served run's recipe, into ``job.run_dir`` (:mod:`textfree.rapt.finetune`)."""
    from ..lm.hub import resolve_source
    from .finetune import job_config, train_on_uploaded

    base = resolve_source(job.init)  # a run served by hub id: its local copy
    cfg = job_config(base, job.run_dir, job.hyperparameters, cpu=job.device == "cpu")
    return train_on_uploaded(base, cfg, job.rows, on_step=job.on_step)


RAPT_SYSTEM = register_system(
    ServedSystem(
        name="rapt",
        task="classify",
        payload_kind="privatized_text",
        load=load_model,
        fine_tune=fine_tune,
        load_adapter=load_adapter,
        methods=ADAPTER_METHODS,
        detect=is_rapt_run,
    )
)
