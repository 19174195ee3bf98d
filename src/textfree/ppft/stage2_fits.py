"""What stage 2 fits before its loop, beyond the paper: the client's slot centre and class subspace, the server's
answer head (:class:`~textfree.ppft.train_config.Stage2Config` ``center_mu``, ``subspace_epochs``, ``answer_head``).

Each fit is split where the text stops. The client side (the centre, from the client's own clean slots; the payloads
it releases for the subspace and the head) holds the :class:`~textfree.ppft.batches.ClientCache`. The server side
(:func:`fit_class_subspace`, :func:`fit_answer_head`) gets payload rows, or a function that returns a fresh release
of them, and nothing that holds the prompts' text, as the stage-2 loop does.

Each is written to the run directory as soon as it is fitted, so a resumed run reuses it instead of drawing it again
(a centre drawn from OS entropy could not be drawn again the same).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable

import torch

from ..accel import is_main_process, wait_for_everyone
from ..rng import secure_generator, seeded_generator
from .batches import ClientCache, PayloadExample, require_payload_examples
from .checkpoint import CENTER_FILE, load_center_file, save_center
from .model import TextFreeLM
from .train_config import Stage2Config

__all__ = ["fit_center", "fit_class_subspace", "answer_head_payloads", "fit_answer_head", "ANSWER_HEAD"]

log = logging.getLogger("textfree.ppft")

ANSWER_HEAD = "answer_head"  # the projection with its trained answer head, before the stage-2 loop


def fit_center(
    cfg: Stage2Config, run: Path, lm: TextFreeLM, cache: ClientCache, examples, k: int, noise_seed: int, family: str
) -> dict[str, Any]:
    """The client's slot centre: the mu-GDP mean of the training prompts' mean unit slots (each distinct private text
    once), followed with ``subspace_epochs`` by the class subspace's rows, which :func:`fit_class_subspace` fits from
    the payloads of :func:`_subspace_payloads` (the client's release); set on ``lm`` and in
    its config, and written to ``run`` at once (a resumed run reuses it, so it is drawn once even from OS entropy);
    returns what the summary records of it."""
    from ..mechanisms.centering import PrivateMean, center_sha256, prompt_mean_slots
    from ..mechanisms.transforms import k_pool, l2_normalize

    first = _first_of_each_prompt(examples)
    slots = []
    for i in first:
        pooled, _ = k_pool(
            cache.hidden[i].unsqueeze(0).float(), torch.ones(1, cache.hidden[i].shape[0], dtype=torch.bool), k
        )
        slots.append(l2_normalize(pooled[0]))
    mech = PrivateMean(float(cfg.center_mu))
    reuse = cfg.resume and (run / CENTER_FILE).is_file()
    wait_for_everyone()  # every process has looked for the file before the main process may write it
    draw = not reuse and is_main_process()  # under accelerate launch the main process draws it once
    if not reuse and not draw:
        wait_for_everyone()  # ... and the others read what it wrote
    if not draw:
        center = load_center_file(run)  # a resume with other settings (subspace_epochs too) was refused before this
        log.info("slot centre: reused %s", run / CENTER_FILE)
    else:
        gen = secure_generator() if cfg.secure_noise else seeded_generator(noise_seed * 100_003 + 90_001, warn=False)
        center = mech.sample(prompt_mean_slots(slots), generator=gen).to(torch.float32)
        if cfg.subspace_epochs is not None:
            lm.center = center
            released = _subspace_payloads(cfg, lm, cache, examples, k, noise_seed, family)  # client side
            center = torch.cat([center.unsqueeze(0), fit_class_subspace(released)])  # server side: payload rows only
        save_center(run, center)
        wait_for_everyone()
    lm.center = center
    lm.server.config = lm.config.replace(center_mu=float(cfg.center_mu), center_sha256=center_sha256(center))
    loss = mech.privacy_loss(1)
    norm = float(center.reshape(-1, center.shape[-1])[0].norm())  # the centre: the map's first row
    log.info(
        "slot centre from %d training prompts: norm %.3f, sigma %.4g, %s-GDP (eps %.3g at delta %g per prompt)",
        len(slots),
        norm,
        mech.sigma(len(slots)),
        cfg.center_mu,
        loss.epsilon,
        loss.delta,
    )
    info = {
        "mu": float(cfg.center_mu),
        "prompts": len(slots),
        "sigma": mech.sigma(len(slots)),
        "norm": norm,
        "epsilon": loss.epsilon,
        "delta": loss.delta,
        "sha256": lm.config.center_sha256,
    }
    if center.dim() == 2:
        info["subspace"] = {
            "rank": center.shape[0] - 1,
            "epochs": cfg.subspace_epochs,
            "prompts": len(slots),
            "releases_per_prompt": cfg.subspace_epochs if cfg.epsilon is not None else 0,
        }
    return info


def _first_of_each_prompt(examples) -> list[int]:
    """The index of each distinct private text's first example (a row's prompt formats share one private text)."""
    first: dict[str, int] = {}
    for i, ex in enumerate(examples):
        first.setdefault(ex.private, i)
    return list(first.values())


def _subspace_payloads(
    cfg: Stage2Config, lm: TextFreeLM, cache: ClientCache, examples, k: int, noise_seed: int, family: str
) -> list[PayloadExample]:
    """The client's release for the class subspace: ``subspace_epochs`` passes over each distinct training prompt,
    centred on ``lm.center`` and noised as this run's client noises (clean for an upper-bound run), one payload row
    per prompt and pass, with its public text and target."""
    privatizer = lm.privatizer(cfg.epsilon, k=k, mechanism=family, match=cfg.noise_match)
    first = _first_of_each_prompt(examples)
    rows = []
    for epoch in range(cfg.subspace_epochs):
        gen = None
        if cfg.epsilon is not None:
            gen = (
                secure_generator()
                if cfg.secure_noise
                else seeded_generator(noise_seed * 100_003 + 70_000 + epoch, warn=False)
            )
        for i in first:
            hidden = cache.hidden[i].unsqueeze(0).float()
            x, m = privatizer.privatization.apply(hidden, torch.ones(hidden.shape[:2], dtype=torch.bool), generator=gen)
            rows.append(PayloadExample(x[0][m[0]], cache.public[i], cache.targets[i]))
    log.info("class subspace: the client releases %d passes over %d training prompts", cfg.subspace_epochs, len(first))
    return rows


def fit_class_subspace(payloads: list[PayloadExample]) -> torch.Tensor:
    """Server side: the class subspace [m, d] of payload rows, each reduced to its mean slot and labelled by its
    target (by normalised text): :func:`~textfree.mechanisms.subspace.class_subspace` of those. It reads the rows'
    vectors and targets only; the client then projects its centred slots onto the basis."""
    from ..data import normalize_answer
    from ..mechanisms.subspace import class_subspace

    payloads = require_payload_examples(payloads, "fit_class_subspace")
    labels = [normalize_answer(row.target) for row in payloads]
    basis = class_subspace(torch.stack([row.vectors.mean(dim=0) for row in payloads]), labels)
    log.info(
        "class subspace: rank %d from %d payload rows (%d targets)", basis.shape[0], len(payloads), len(set(labels))
    )
    return basis


def answer_head_payloads(
    cfg: Stage2Config, cache: ClientCache, privatizer, noise_seed: int
) -> Callable[[int], list[PayloadExample]]:
    """Client side: the release the answer head trains on, one fresh draw of every training prompt per pass
    (passes 0.. train the head, -1 checks it), seeded as the run's noise is (OS entropy with ``secure_noise``)."""

    def release(epoch: int) -> list[PayloadExample]:
        gen = None
        if cfg.epsilon is not None:
            gen = (
                secure_generator()
                if cfg.secure_noise
                else seeded_generator(noise_seed * 100_003 + 50_000 + epoch, warn=False)
            )
        return cache.privatize(privatizer, generator=gen)

    return release


def fit_answer_head(
    cfg: Stage2Config, run: Path, server, payloads: Callable[[int], list[PayloadExample]]
) -> dict[str, Any]:
    """Server side: train the answer head on the client's fresh payloads (``payloads(epoch)``, from
    :func:`answer_head_payloads`) and give ``server`` a projection with it (kept in ``run``/answer_head, so a resumed
    run reuses the same head); its classes and its accuracy on one more fresh draw (``payloads(-1)``) for the
    summary."""
    from .answer_head import class_vectors, head_accuracy, train_answer_head
    from .projection import Projection

    saved = run / ANSWER_HEAD
    if cfg.resume and (saved / "config.json").is_file():
        server.projection = Projection.load(saved, device=server.device)
        log.info("answer head: reused %s", saved)
    else:
        t0 = time.time()
        head = train_answer_head(
            payloads,
            epochs=cfg.answer_head_epochs,
            generator=seeded_generator(cfg.seed + 7919, warn=False),
            standardize=cfg.answer_head_standardize,
            hidden=cfg.answer_head_hidden,
        )
        server.projection = server.projection.with_answer_head(
            head, class_vectors(server, head.specs[0].classes), options=cfg.answer_head_options
        )
        if is_main_process():  # the head is seeded: every process trained the same one; one writes it
            server.projection.save(saved)
        wait_for_everyone()
        log.info("answer head trained in %.1f s", time.time() - t0)
    accuracy = head_accuracy(server.projection, payloads(-1))
    log.info("answer head: %.3f of the training rows on a fresh draw", accuracy)
    return {
        "classes": len(server.projection.config.answer_classes),
        "epochs": cfg.answer_head_epochs,
        "standardize": server.projection.config.answer_standardize,
        "hidden": server.projection.config.answer_hidden,
        "options": server.projection.config.answer_options,
        "train_accuracy_fresh_draw": accuracy,
    }
