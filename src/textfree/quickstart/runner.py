"""The quickstart's run: privatized semantic search over the FAQ through a real server.

For every eta, each question is privatized HERE by :meth:`textfree.client.Client.embed` (its token embeddings, the
L2-Laplace d_chi noise of SnD clipped to C, :func:`textfree.snd.noise.privatize_tokens`' distribution), one request
per question, and only that payload is sent; the server's sentence embedding (denoised here with ``denoise=True``)
is searched against the answers' embeddings, computed here in clear (they are public). The clean reference (each
question's own embedding without noise) is computed here too and never sent. Privacy is the library's accounting of
each payload (:meth:`textfree.payload.Payload.worst_case_loss`: eta x B per token, composed over the tokens); bytes
are what the client's HTTP layer sent (:class:`.wire.WireLog`).
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Sequence

import torch

from .corpus import Faq
from .search import accuracy, rank_answers
from .wire import WireLog

__all__ = ["LocalSide", "run_search", "EXAMPLE_INDEX"]

#: The question shown as the worked example.
EXAMPLE_INDEX = 0
Say = Callable[[str], None]
Tick = Callable[[str, int, int], None]


class LocalSide:
    """The client's clean side, for public text and the reference only: the encoder's table and its full model, run
    by SnD's own ``clean`` pipeline (:func:`textfree.snd.evaluate.embed_texts`), the computation the server runs."""

    def __init__(self, encoder: str | os.PathLike | None = None, max_tokens: int = 128):
        from ..encoders.loading import load_hf_encoder
        from ..encoders.table import EmbeddingTableEncoder

        tokenizer, model, self.name, self.sha256 = load_hf_encoder(encoder)
        self.table = EmbeddingTableEncoder(
            model.get_input_embeddings().weight, tokenizer, name=self.name, sha256=self.sha256, max_length=max_tokens
        )
        self.model = model.eval().requires_grad_(False)
        self.max_tokens = max_tokens

    @property
    def dim(self) -> int:
        return self.table.dim

    def embed(self, texts: Sequence[str], stats: dict | None = None) -> torch.Tensor:
        from ..snd.evaluate import embed_texts

        emb, _ = embed_texts(
            list(texts), pipeline="clean", eta=None, table_encoder=self.table, server_model=self.model,
            generator=None, max_tokens=self.max_tokens, return_clean=False, stats=stats,
        )  # fmt: skip
        return emb


def _row(name: str, eta: float | None, emb: torch.Tensor, answers: torch.Tensor, faq: Faq, clean: torch.Tensor):
    from ..snd.evaluate import similarity

    ranked = rank_answers(emb, answers)
    return {
        "pipeline": name,
        "eta": eta,
        **accuracy(ranked, faq.labels),
        "cos_to_clean": similarity(emb, clean)["cos"],
        "found": [faq.answers[int(i)].id for i in ranked[:, 0]],
    }


def _loss(p) -> dict:
    return {"epsilon": p.epsilon, "delta": p.delta, "notion": p.notion}


def _eta_rows(client, faq: Faq, *, model, eta, denoise, seed, wire, answers, clean, tick) -> list[dict]:
    """The rows of one eta: the server's answers, and with ``denoise`` the answers denoised here."""
    from ..payload import Payload
    from ..snd.train import batch_noise_seed

    raw, den, losses, times = [], [], [], []
    first = len(wire.posts("/v1/embed"))
    n = len(faq.questions)
    for i, q in enumerate(faq.questions):
        t0 = time.perf_counter()
        s = None if seed is None else batch_noise_seed(seed, "quickstart", eta, i)  # one stream per question
        r = client.embed(q.text, model=model, epsilon=eta, seed=s, denoise=denoise)
        times.append(time.perf_counter() - t0)
        raw.append(r.raw_embeddings[0] if denoise else r.embeddings[0])
        if denoise:
            den.append(r.embeddings[0])
        losses.append(r.privacy)
        tick(f"eta {eta:g}", i + 1, n)
    bodies = [s.body for s in wire.posts("/v1/embed")[first:]]
    example = Payload.from_bytes(bodies[EXAMPLE_INDEX])
    pr = example.privatization
    common = {
        "noise_to_signal": None,  # filled by run_search (it knows the mean token norm)
        "requests": len(bodies),
        "body_bytes_mean": sum(map(len, bodies)) / len(bodies),
        "body_bytes_min": min(map(len, bodies)),
        "body_bytes_max": max(map(len, bodies)),
        "seconds_per_question": sum(times) / len(times),
        "privacy_per_token": _loss(pr.slot_loss()),
        "input_diameter": pr.input_diameter,
        "privacy_per_question_mean": sum(p.epsilon for p in losses) / len(losses),
        "privacy_per_question_max": max(p.epsilon for p in losses),
        "privacy_notion": losses[0].notion,
        "example_received": {
            "shape": list(example.vectors.shape),
            "dtype": str(example.vectors.dtype).replace("torch.", ""),
            "body_bytes": len(bodies[EXAMPLE_INDEX]),
            "tensors": ["vectors", "mask"],  # all a payload may hold: Payload.from_bytes refuses anything else
            "privacy": _loss(losses[EXAMPLE_INDEX]),
        },
    }
    rows = [{**_row("server", eta, torch.tensor(raw), answers, faq, clean), **common}]
    if denoise:
        rows.append({**_row("denoised", eta, torch.tensor(den), answers, faq, clean), **common})
    return rows


def run_search(
    url: str,
    api_key: str,
    faq: Faq,
    *,
    model: str,
    etas: Sequence[float],
    denoise: bool = False,
    seed: int | None = None,
    encoder: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    local: LocalSide | None = None,
    say: Say = lambda msg: None,
    tick: Tick = lambda label, done, total: None,
) -> dict[str, Any]:
    """Run the search for every eta against the server at ``url``; a JSON-ready dict of the rows, the wire record
    and the timings (:mod:`.report` prints it). ``encoder``: the client's local copy of the served encoder (default:
    the packaged all-MiniLM-L6-v2). ``seed``: reproducible noise (NOT private)."""
    from ..client import Client
    from ..snd.evaluate import noise_to_signal

    t_start = time.perf_counter()
    if local is None:
        say("loading the encoder here (the client's copy: token table, and the clean reference)")
        local = LocalSide(encoder)
    say(f"embedding the {len(faq.answers)} public answers here, in clear (they are public)")
    answers = local.embed([a.text for a in faq.answers])
    stats: dict = {}
    clean = local.embed([q.text for q in faq.questions], stats=stats)  # the reference: never sent
    mean_norm = stats["token_norm_sum"] / stats["n_tokens"]
    rows = [{**_row("clean", None, clean, answers, faq, clean), "noise_to_signal": 0.0, "sent": False}]
    t_local = time.perf_counter() - t_start
    wire = WireLog()
    http = wire.http_client()
    try:
        with Client(url, api_key=api_key, encoder=encoder, http_client=http, cache_dir=cache_dir) as client:
            card = client.model_card(model)
            for eta in etas:
                say(f"eta {eta:g}: privatizing {len(faq.questions)} questions here, one request each")
                for row in _eta_rows(
                    client, faq, model=model, eta=float(eta), denoise=denoise, seed=seed, wire=wire,
                    answers=answers, clean=clean, tick=tick,
                ):  # fmt: skip
                    row["noise_to_signal"] = noise_to_signal(float(eta), local.dim, mean_norm)
                    row["sent"] = True
                    rows.append(row)
    finally:
        http.close()
    example = faq.questions[EXAMPLE_INDEX]
    return {
        "model": model,
        "encoder": local.name,
        "encoder_sha256": card.get("encoder_sha256"),
        "encoder_dim": local.dim,
        "clip_norm": card.get("clip_norm"),
        "denoiser": card.get("denoiser"),
        "denoised": denoise,
        "seeded": seed is not None,
        "corpus": {"answers": len(faq.answers), "questions": len(faq.questions)},
        "mean_token_norm": mean_norm,
        "rows": rows,
        "example": {
            "question": example.text,
            "answer": example.answer,
            "found": {_label(r): r["found"][EXAMPLE_INDEX] for r in rows},
            "answers": {a.id: a.text for a in faq.answers if a.id in {r["found"][EXAMPLE_INDEX] for r in rows}},
        },
        "wire": wire.summary(),
        "seconds": {"local_reference": t_local, "search": time.perf_counter() - t_start},
    }


def _label(row: dict) -> str:
    return (
        "clean"
        if row["eta"] is None
        else f"eta {row['eta']:g}" + (" denoised" if row["pipeline"] == "denoised" else "")
    )
