"""Class subspace: spend a unit slot's norm on the directions that tell the task's answers apart.

After centring (:mod:`textfree.mechanisms.centering`) a unit slot still spreads its norm over every direction the
encoder uses; on Pri-SLJA only about a third of a centred slot's energy lies in the span of the 40 charges' mean
slots. The noise is isotropic, so the share of the norm spent elsewhere is lost to a reader of the answer. The
client can project each centred slot onto a public subspace B (orthonormal rows [m, d]) and renormalise,
``unit(B^T B x)``, before the noise: every slot stays a unit vector, so the mechanism and its per-slot guarantee
(2 eps, and the slot's mu) are unchanged, while the payload carries the answer's directions at full norm and
little else (for the server and for an attacker alike).

:func:`class_subspace` fits B from labelled vectors (normally the server's mean noisy payload slots of the training
prompts, each labelled with its training target): the span of the class means after removing their average, by SVD,
strongest direction first. The fit only reads payloads the server received and targets it trains on, so B is
post-processing of those releases; how many releases it reads is the caller's to account (the stage-2 summary
records it).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["check_basis", "class_subspace", "project_slots"]

_ORTHO_TOL = 1e-3  # float32 storage of an orthonormal basis


def check_basis(basis: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """A subspace basis is a finite float tensor [m, d] of orthonormal rows, 1 <= m < d (of width ``dim`` when
    given)."""
    if not isinstance(basis, torch.Tensor) or basis.dim() != 2 or not basis.is_floating_point():
        raise ValueError(f"a subspace basis must be a 2-D float tensor [m, d], got {basis!r}"[:200])
    m, d = basis.shape
    if dim is not None and d != dim:
        raise ValueError(f"the subspace basis has width {d}, the slots have width {dim}")
    if not 1 <= m < d:
        raise ValueError(f"a subspace basis needs 1 <= m < d rows, got m={m} for d={d}")
    if not torch.isfinite(basis).all():
        raise ValueError("the subspace basis has non-finite values")
    gram = basis.to(torch.float64) @ basis.to(torch.float64).T
    err = float((gram - torch.eye(m, dtype=torch.float64)).abs().max())
    if err > _ORTHO_TOL:
        raise ValueError(
            f"the subspace basis rows are not orthonormal (largest |B B^T - I| entry {err:.3g} > {_ORTHO_TOL})"
        )
    return basis


def project_slots(slots: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """``unit(B^T B x)`` for each slot x [..., d], B [m, d] orthonormal rows (cast to the slots' device and dtype).
    A slot orthogonal to the subspace maps to zero (norm <= 1 all the same)."""
    from .transforms import l2_normalize

    basis = basis.to(slots.device, slots.dtype)
    if basis.shape[-1] != slots.shape[-1]:
        raise ValueError(f"the subspace basis has width {basis.shape[-1]}, the slots have width {slots.shape[-1]}")
    return l2_normalize((slots @ basis.T) @ basis)


def class_subspace(
    vectors: torch.Tensor, labels: Sequence[object], *, rank: int | None = None, rtol: float = 1e-6
) -> torch.Tensor:
    """The orthonormal basis [m, d] of the span of the class means of ``vectors`` [n, d] (one label per row) after
    subtracting the average of the class means (each class counted once), strongest direction first.

    m = ``rank`` when given (at most the number of classes - 1), else every direction whose singular value exceeds
    ``rtol`` times the largest. Refused with fewer than 2 classes, or when the class means coincide.
    """
    if not isinstance(vectors, torch.Tensor) or vectors.dim() != 2 or not vectors.is_floating_point():
        raise ValueError(f"class_subspace takes float vectors [n, d], got {vectors!r}"[:200])
    labels = list(labels)
    if len(labels) != vectors.shape[0]:
        raise ValueError(f"class_subspace needs one label per vector: {vectors.shape[0]} vectors, {len(labels)} labels")
    if not torch.isfinite(vectors).all():
        raise ValueError("class_subspace: the vectors have non-finite values")
    classes = sorted(set(labels), key=str)
    if len(classes) < 2:
        raise ValueError(f"class_subspace needs at least 2 classes, got {len(classes)}")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank < len(classes)):
        raise ValueError(f"rank must be an integer in [1, {len(classes) - 1}] (classes - 1), got {rank!r}")
    index = {c: i for i, c in enumerate(classes)}
    idx = torch.tensor([index[label] for label in labels])
    x = vectors.to(torch.float64)
    sums = torch.zeros(len(classes), x.shape[1], dtype=torch.float64).index_add_(0, idx, x)
    means = sums / torch.bincount(idx, minlength=len(classes)).to(torch.float64).unsqueeze(1)
    spread = means - means.mean(dim=0)
    u, s, _ = torch.linalg.svd(spread.T, full_matrices=False)  # u [d, C]: left singular vectors, strongest first
    keep = int((s > rtol * s[0]).sum()) if float(s[0]) > 0 else 0
    if keep == 0:
        raise ValueError("class_subspace: the class means coincide; there is no direction to keep")
    m = min(keep, rank) if rank is not None else keep
    m = min(m, x.shape[1] - 1)
    return u[:, :m].T.contiguous().to(torch.float32)
