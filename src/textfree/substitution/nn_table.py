"""The tables :class:`~textfree.substitution.nn.NearestNeighbors` searches, and its selection kernels.

:class:`SubTable` holds one candidate set (or the whole table): its float32 rows, their norms, and the indexes each
search builds on first use (faiss, bfloat16, int8 codes). The kernels pick the top-r columns of a score block, key
short-list rows in float64 and multiply int8 codes exactly. The search itself, its certificate and its backends are
in :mod:`textfree.substitution.nn`.
"""

from __future__ import annotations

import torch

__all__ = ["SubTable", "BLOCK", "INT8_MAX", "keys64", "all_pairs", "top_columns", "int8_matmul"]

#: Approximate search: columns per block of the two-step top-r selection (a max per block, then the best blocks'
#: columns). 128 and 256 were fastest for 256 queries x 21,777 rows (3.5 / 3.4 ms against 8.3 ms for topk; 32: 20 ms).
BLOCK = 128

#: The largest |value| of an int8 code (symmetric: -127..127, so negation never overflows).
INT8_MAX = 127.0


class SubTable:
    """One candidate set: its rows (original ids), float32 vectors, norms and, lazily, a faiss index."""

    def __init__(
        self, vectors: torch.Tensor, ids: torch.Tensor | None, *, exact: bool = True, parent: "SubTable" = None
    ):
        self.ids = ids  # None: all rows, in order
        self.parent = parent  # the full table, whose int8 codes a candidate set reuses
        if exact:
            # Stored as [d, V] contiguous: torch's matmul with few queries runs ~1.5x faster on that layout than on
            # a transposed [V, d] view (10 queries x 21,777 rows: 3.6 ms vs 5.4 ms); ``vectors`` is a [V, d] view.
            self.vt = vectors.T.contiguous()
            self.vectors = self.vt.T
        else:
            # Approximate search scans the int8 copy and only gathers short-list rows from here: row-major, so
            # that each gathered row is one contiguous read.
            self.vt = None
            self.vectors = vectors.contiguous()
        norms64 = self.vectors.to(torch.float64).square().sum(dim=1)
        self.sqnorm64 = norms64
        self.sqnorm32 = norms64.to(torch.float32)
        self.max_norm = float(norms64.max().sqrt()) if len(norms64) else 0.0
        self._faiss = None
        self._int8 = None
        self._int8_f32 = None
        self._bf16 = None

    def __len__(self) -> int:
        return self.vectors.shape[0]

    def faiss_index(self):
        """faiss.IndexFlatIP over rows [t, ||t||^2]: with query [2q, -1] the inner product is -(||t||^2 - 2 q.t)."""
        if self._faiss is None:
            import faiss

            augmented = torch.cat([self.vectors, self.sqnorm32[:, None]], dim=1).contiguous()  # faiss keeps a copy
            index = faiss.IndexFlatIP(augmented.shape[1])
            index.add(augmented.numpy())
            self._faiss = index
        return self._faiss

    def bf16_index(self) -> torch.Tensor:
        """The exact search's ``"bf16"`` pass: [d + 1, V] bfloat16, the table's columns over a last row of squared
        norms, so that a query [q, -1/2] scores q.t - ||t||^2 / 2 in one matmul. Made on first use."""
        if self._bf16 is None:
            self._bf16 = torch.cat([self.vt, self.sqnorm32[None, :]]).to(torch.bfloat16)
        return self._bf16

    def int8_index(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Approximate search: (codes [d, V'] int8, dim_scale [d] float64, neg_sqnorm [V'] float32).

        ``codes[i, j] = round(t_ji / dim_scale[i])`` with ``dim_scale[i] = max_j |t_ji| / 127`` (1 for an all-zero
        dimension); ``neg_sqnorm = -||t||^2``. V' rounds V up to a multiple of :data:`BLOCK`: padding columns
        have zero codes and ``neg_sqnorm = -inf``, so they never rank.
        """
        if self._int8 is None:
            v, d = self.vectors.shape
            padded = -(-v // BLOCK) * BLOCK
            codes = torch.zeros(d, padded, dtype=torch.int8)
            if self.parent is not None:  # a candidate set: the full table's codes, so that scores match its own
                parent_codes, dim_scale, _ = self.parent.int8_index()
                codes[:, :v] = parent_codes[:, self.ids]
            else:
                t64 = self.vectors.to(torch.float64)
                dim_scale = t64.abs().amax(dim=0) / INT8_MAX
                dim_scale = torch.where(dim_scale > 0, dim_scale, torch.ones_like(dim_scale))
                codes[:, :v] = (t64 / dim_scale).round().T.to(torch.int8)
            neg_sqnorm = torch.full((padded,), float("-inf"), dtype=torch.float32)
            neg_sqnorm[:v] = -self.sqnorm32
            self._int8 = (codes, dim_scale, neg_sqnorm)
        return self._int8

    def int8_codes_float32(self) -> torch.Tensor:
        """The int8 codes [d, V'] as float32 (the same integers), for CPUs without a native int8 product
        (:func:`textfree.substitution.nn.int8_native`). Made on first use."""
        if self._int8_f32 is None:
            self._int8_f32 = self.int8_index()[0].to(torch.float32)
        return self._int8_f32

    def to_original(self, local: torch.Tensor) -> torch.Tensor:
        return local if self.ids is None else self.ids[local]


def keys64(sub: SubTable, ids: torch.Tensor, rows: torch.Tensor, qq: torch.Tensor, near: torch.Tensor) -> torch.Tensor:
    """float64 keys of rows [m, d] (table ids ``ids``) for their queries ``qq`` [m, d]: ||q - t||^2 where ``near``,
    else ||t||^2 - 2 q.t (:meth:`textfree.substitution.nn.NearestNeighbors._rerank64`). Each form is computed only where
    it is used."""

    def direct(r, q):
        diff = r - q
        return torch.einsum("md,md->m", diff, diff)

    def expanded(r, q, i):
        return sub.sqnorm64[i] - 2.0 * torch.einsum("md,md->m", r, q)

    if bool(near.all()):
        return direct(rows, qq)
    if not bool(near.any()):
        return expanded(rows, qq, ids)
    keys = torch.empty(len(ids), dtype=torch.float64)
    keys[near] = direct(rows[near], qq[near])
    keys[~near] = expanded(rows[~near], qq[~near], ids[~near])
    return keys


def all_pairs(shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, column) indices of every entry of a [n, r] array, row-major."""
    n, r = shape
    return torch.arange(n).repeat_interleave(r), torch.arange(r).repeat(n)


def top_columns(scores: torch.Tensor, r: int, by_blocks: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, columns) [c, r] of the r largest entries of each row of ``scores`` [c, V], unordered.

    The r largest lie in the r blocks of :data:`BLOCK` consecutive columns with the largest maxima (a column outside
    them has r blocks above its own, each holding a column at least as large), so blocks are selected first: one
    max pass instead of a top-r pass over every column, several times cheaper for wide tables. More precisely,
    every column left out is at most the smallest value returned: what a certificate needs. ``by_blocks=False``
    (or a table of at most 2r blocks) takes the plain top-r. A last, shorter block is one block too; its missing
    columns are filled with -inf, so they are never chosen while r columns above -inf exist: callers whose
    candidate sets may hold fewer than r rows pass ``by_blocks=False``."""
    c, v = scores.shape
    n_full = v // BLOCK
    if not by_blocks or n_full <= 2 * r:
        top = scores.topk(r, dim=1, sorted=False)
        return top.values, top.indices
    maxima = scores[:, : n_full * BLOCK].unflatten(1, (n_full, BLOCK)).amax(dim=2)
    if v > n_full * BLOCK:
        maxima = torch.cat([maxima, scores[:, n_full * BLOCK :].amax(dim=1, keepdim=True)], dim=1)
    blocks = maxima.topk(r, dim=1, sorted=False).indices
    cols = (blocks[:, :, None] * BLOCK + torch.arange(BLOCK)).flatten(1)  # [c, r * BLOCK]
    outside = cols >= v
    picked = torch.gather(scores, 1, cols.clamp(max=v - 1)).masked_fill_(outside, float("-inf"))
    top = picked.topk(r, dim=1, sorted=False)
    return top.values, torch.gather(cols, 1, top.indices)


def int8_matmul(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """a [n, d] int8 @ b [d, m] int8 into ``out`` [n, m] int32, exactly: torch._int_mm, or a float64 matmul of the
    same integers (exact while d * 127^2 < 2^53) where this torch build has no CPU ``_int_mm``."""
    try:
        return torch._int_mm(a, b, out=out)
    except (AttributeError, RuntimeError, NotImplementedError):
        return out.copy_(a.to(torch.float64) @ b.to(torch.float64))
