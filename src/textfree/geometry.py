"""Exact Euclidean geometry of an embedding table: rounding-error bounds and the diameter.

Fast distance computations use the expansion ``||a - b||^2 = ||a||^2 - 2 a.b + ||b||^2`` in float32 (one matrix
multiply), which is not exact. Here we bound its error rigorously and use the bound to turn a fast float32 pass
into an exact answer: every float32 result that could be the true optimum is re-checked in float64 by direct
differences. ``gamma(n)`` is Higham's constant: a length-``n`` dot product computed in floating point, in any
summation order, with or without fused multiply-adds, is within ``gamma(n) * sum |a_i b_i|`` of the real value.
"""

from __future__ import annotations

import torch

__all__ = ["FLOAT32_UNIT_ROUNDOFF", "gamma", "max_pairwise_distance"]

#: Unit roundoff of IEEE float32 (round to nearest): 2^-24.
FLOAT32_UNIT_ROUNDOFF = 2.0**-24


def gamma(n: int, u: float = FLOAT32_UNIT_ROUNDOFF) -> float:
    """Higham's gamma_n = n u / (1 - n u): the relative error bound of an n-term float dot product."""
    if n * u >= 1.0:
        raise ValueError(f"gamma is undefined for n={n}, u={u}: n*u must be < 1")
    return n * u / (1.0 - n * u)


def _exact_max_sq_dist(rows: torch.Tensor, table: torch.Tensor, chunk: int = 2048) -> float:
    """max over ``rows`` x ``table`` of the squared distance, in float64 by direct differences (chunked)."""
    best = 0.0
    for i in range(0, rows.shape[0], 256):
        r64 = rows[i : i + 256].to(torch.float64)
        for start in range(0, table.shape[0], chunk):
            block = table[start : start + chunk].to(torch.float64)
            dist = torch.cdist(r64, block, compute_mode="donot_use_mm_for_euclid_dist")
            best = max(best, float(dist.max()) ** 2)
    return best


def max_pairwise_distance(vectors: torch.Tensor, *, chunk_size: int = 1024) -> float:
    """The exact maximum L2 distance between two rows of ``vectors`` [V, d] (0.0 for V < 2).

    Pass 1 (float32, chunked, upper triangle only, never a V x V matrix): the largest approximate squared
    distance of each row to the rows after its chunk start, and the global approximate maximum M.
    Every float32 squared distance is within E of the real one (E from :func:`gamma` and the largest row
    norm), so the true maximising pair has a row whose approximate maximum is at least M - 2E.
    Pass 2 (float64, direct differences): exact distances of those few candidate rows to all rows.
    """
    if vectors.dim() != 2:
        raise ValueError(f"vectors must be [V, d], got shape {tuple(vectors.shape)}")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an int >= 1, got {chunk_size!r}")
    n, d = vectors.shape
    if n < 2:
        return 0.0
    v32 = vectors.detach().to(torch.float32).contiguous()
    sq = v32.to(torch.float64).square().sum(dim=1)
    sq32 = sq.to(torch.float32)
    row_max = torch.empty(n, dtype=torch.float32)
    for start in range(0, n, chunk_size):
        stop = min(start + chunk_size, n)
        # ||a||^2 + ||b||^2 - 2 a.b for rows [start, stop) against rows [start, n).
        block = torch.addmm(sq32[start:], v32[start:stop], v32[start:].T, alpha=-2.0)
        block += sq32[start:stop, None]
        row_max[start:stop] = block.max(dim=1).values
    approx_max = float(row_max.max())
    max_norm = float(sq.max().sqrt())
    # |error| of one squared distance: the dot product (gamma_d * |a||b| <= gamma_d T^2, doubled), the rounded
    # norms (u T^2 each) and the two additions (u * magnitude <= u * 4 T^2 each): generously 4 gamma_{d+8} T^2.
    err = 4.0 * gamma(d + 8) * (2.0 * max_norm) ** 2
    candidates = torch.nonzero(row_max >= approx_max - 2.0 * err).flatten()
    return _exact_max_sq_dist(v32[candidates], v32) ** 0.5
