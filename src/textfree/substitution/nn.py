"""Exact L2 nearest-neighbour search over an embedding table, for a batch of query vectors.

Two backends find a short list of ``k + rerank`` candidates per query in float32:

* ``"matmul"``: torch, in query chunks: ``argmin_t ||t||^2 - 2 q.t`` with precomputed float32 row norms. The
  ``||q||^2`` term of ``||q - t||^2`` is the same for every row, so it changes no ranking; leaving it out
  removes its rounding error, which would grow with the noise (``||q||`` is large when eta is small).
* ``"faiss"``: exhaustive ``faiss.IndexFlatIP`` over rows augmented to ``[t, ||t||^2]`` and queries ``[2q, -1]``,
  whose inner product is minus the same score (the same work as ``IndexFlatL2``, without the ``||q||^2`` term).
* ``"auto"`` (default): per call, faiss for large batches and matmul for small ones
  (:data:`AUTO_FAISS_MIN_QUERIES`, with the measurement behind it).

Then both re-rank the short list in float64 and *certify* it: every float32 score is within a proven bound E
(:func:`textfree.substitution.distances.gamma`) of the real one, so a row outside the list cannot beat the
list's k-th best when the list's worst float32 score exceeds that k-th best by more than E. Queries that fail
the check (near-ties at float32 precision, rare) are searched again exhaustively in float64. The result is
the exact nearest neighbour of the float64 query, with ties broken arbitrarily; tests compare it to float64
brute force.

Candidate restriction (PCT2T): ``candidate_mask`` [V] (one set for all queries), [N, V] (a set per query), or
[G, V] sets with ``set_index`` [N] choosing one per query. A set searched on its own gets its own sub-table (and
faiss sub-index), built on first use and cached, so it costs only the size of the set. Several sets in one call:
below :data:`SINGLE_PASS_MAX_QUERIES` queries one masked matmul pass over the whole table (the table is read
once), from there on one search per set.
"""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict

import torch

from ..geometry import gamma

__all__ = [
    "NearestNeighbors",
    "BACKENDS",
    "AUTO_FAISS_MIN_QUERIES",
    "SINGLE_PASS_MAX_QUERIES",
    "resolve_backend",
    "faiss_available",
]

BACKENDS = ("auto", "matmul", "faiss")


@functools.lru_cache(maxsize=1)
def faiss_available() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


#: ``backend="auto"`` sends a batch of at least this many queries to faiss and smaller ones to matmul.
#: Measured with benchmarks/bench_nn_search.py on 2 CPU cores (AMD EPYC; torch 2.13 CPU wheel with MKL,
#: faiss-cpu 1.15 wheel with OpenBLAS), exact k=1 search over MiniLM's 30,522 x 384 table: faiss's path for small
#: batches is slow (100 queries: 72 ms vs 20 ms with matmul; over a 21,777-row table, 300 queries: 149 ms vs
#: 51 ms); between 300 and 400 queries it switches to BLAS and then beats torch's matmul (MKL) on this CPU by
#: 1.5-1.8x (1000 queries: 119 ms vs 208 ms; raw IndexFlatL2 111 ms). Both backends return the same exact
#: neighbours; only speed differs. Figures in docs/substitution.md.
AUTO_FAISS_MIN_QUERIES = 400

#: Per-query candidate sets: below this many queries one masked pass over the whole table (memory-bound regime,
#: the table is read once); from it on, one search per set over that set's own sub-table (fewer flops).
SINGLE_PASS_MAX_QUERIES = AUTO_FAISS_MIN_QUERIES


def resolve_backend(backend: str, n_queries: int) -> str:
    """The backend that serves a batch of ``n_queries`` queries: "matmul" or "faiss"."""
    if backend != "auto":
        return backend
    return "faiss" if n_queries >= AUTO_FAISS_MIN_QUERIES and faiss_available() else "matmul"


class _SubTable:
    """One candidate set: its rows (original ids), float32 vectors, norms and, lazily, a faiss index."""

    def __init__(self, vectors: torch.Tensor, ids: torch.Tensor | None):
        self.ids = ids  # None: all rows, in order
        # Stored as [d, V] contiguous: torch's matmul with few queries runs ~1.5x faster on that layout than on
        # a transposed [V, d] view (10 queries x 21,777 rows: 3.6 ms vs 5.4 ms); ``vectors`` is a [V, d] view.
        self.vt = vectors.T.contiguous()
        self.vectors = self.vt.T
        norms64 = self.vectors.to(torch.float64).square().sum(dim=1)
        self.sqnorm64 = norms64
        self.sqnorm32 = norms64.to(torch.float32)
        self.max_norm = float(norms64.max().sqrt()) if len(norms64) else 0.0
        self._faiss = None

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

    def to_original(self, local: torch.Tensor) -> torch.Tensor:
        return local if self.ids is None else self.ids[local]


class NearestNeighbors:
    """Exact L2 nearest neighbours among the rows of ``table_vectors`` [V, d].

    ``search(queries [N, d], k=1, candidate_mask=None)`` returns int64 row indices [N, k], nearest first.
    Queries may be float32 or float64; exactness is with respect to the queries as given.
    """

    def __init__(
        self,
        table_vectors: torch.Tensor,
        backend: str = "auto",
        *,
        chunk_size: int = 256,
        rerank: int = 4,
        max_cached_subsets: int = 64,
    ):
        if not isinstance(table_vectors, torch.Tensor) or table_vectors.dim() != 2:
            shape = tuple(table_vectors.shape) if isinstance(table_vectors, torch.Tensor) else type(table_vectors)
            raise ValueError(f"NearestNeighbors: table_vectors must be a [V, d] tensor, got {shape}")
        if table_vectors.shape[0] < 1 or table_vectors.shape[1] < 1:
            raise ValueError(f"NearestNeighbors: the table is empty: shape {tuple(table_vectors.shape)}")
        if backend not in BACKENDS:
            raise ValueError(f"NearestNeighbors: backend must be one of {BACKENDS}, got {backend!r}")
        if backend == "faiss" and not faiss_available():
            raise ValueError("NearestNeighbors: backend 'faiss' needs the faiss-cpu package")
        limits = (("chunk_size", chunk_size, 1), ("rerank", rerank, 1), ("max_cached_subsets", max_cached_subsets, 0))
        for name, value, low in limits:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"NearestNeighbors: {name} must be an int >= {low}, got {value!r}")
        vectors = table_vectors.detach().to(torch.float32).cpu()
        if not torch.isfinite(vectors).all():
            raise ValueError("NearestNeighbors: table_vectors contains NaN or infinite values")
        self.backend = backend
        self.chunk_size = chunk_size
        self.rerank = rerank
        self.max_cached_subsets = max_cached_subsets
        self._full = _SubTable(vectors, None)
        self._subsets: OrderedDict[bytes, _SubTable] = OrderedDict()
        self.n_fallback = 0  # queries re-searched in float64 because the float32 pass was not conclusive

    @property
    def num_rows(self) -> int:
        return len(self._full)

    @property
    def dim(self) -> int:
        return int(self._full.vectors.shape[1])

    # ------------------------------------------------------------------ public

    def search(
        self,
        queries: torch.Tensor,
        k: int = 1,
        candidate_mask: torch.Tensor | None = None,
        *,
        set_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Indices [N, k] of the k nearest rows, nearest first.

        ``candidate_mask``: None (all rows), [V] (one set for every query), [N, V] (a set per query), or
        [G, V] together with ``set_index`` [N] (query i may only return rows of set ``set_index[i]``).
        """
        q = self._check_queries(queries)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"NearestNeighbors.search: k must be an int >= 1, got {k!r}")
        n = q.shape[0]
        if candidate_mask is None:
            if set_index is not None:
                raise ValueError("NearestNeighbors.search: set_index needs candidate_mask")
            return self._search_in(self._full, q, k)
        mask = self._check_mask(candidate_mask, n, set_index is not None)
        if n == 0:
            return torch.empty(0, k, dtype=torch.int64)
        if mask.dim() == 1:
            return self._search_in(self._subset(mask), q, k)
        if set_index is None:
            mask, set_index = torch.unique(mask.to(torch.uint8), dim=0, return_inverse=True)
            mask = mask.bool()
        else:
            set_index = self._check_set_index(set_index, n, mask.shape[0])
        if n < SINGLE_PASS_MAX_QUERIES:
            # Few queries: reading the table is the cost, so one masked pass over it beats one pass per set.
            return self._search_in(self._full, q, k, (mask, set_index))
        out = torch.empty(n, k, dtype=torch.int64)
        for group in torch.unique(set_index).tolist():
            rows = torch.nonzero(set_index == group).flatten()
            out[rows] = self._search_in(self._subset(mask[group]), q[rows], k)
        return out

    # ------------------------------------------------------------------ validation

    def _check_queries(self, queries: torch.Tensor) -> torch.Tensor:
        if not isinstance(queries, torch.Tensor) or queries.dim() != 2 or queries.shape[1] != self.dim:
            shape = tuple(queries.shape) if isinstance(queries, torch.Tensor) else type(queries).__name__
            raise ValueError(f"NearestNeighbors.search: queries must be [N, {self.dim}], got {shape}")
        if not queries.is_floating_point():
            raise ValueError(f"NearestNeighbors.search: queries must be floating point, got {queries.dtype}")
        q = queries.detach().cpu()
        if not torch.isfinite(q).all():
            raise ValueError("NearestNeighbors.search: queries contain NaN or infinite values")
        return q

    def _check_mask(self, mask: torch.Tensor, n_queries: int, indexed: bool = False) -> torch.Tensor:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise ValueError(f"candidate_mask must be a bool tensor, got {getattr(mask, 'dtype', type(mask).__name__)}")
        mask = mask.cpu()
        if mask.dim() == 1 and mask.shape[0] == self.num_rows and not indexed:
            if not mask.any():
                raise ValueError("candidate_mask selects no row")
            return mask
        if mask.dim() == 2 and mask.shape[1] == self.num_rows and (indexed or mask.shape[0] == n_queries):
            if mask.shape[0] and not mask.any(dim=1).all():
                raise ValueError("candidate_mask selects no row for some queries")
            return mask
        v = self.num_rows
        want = f"[G, {v}] with set_index" if indexed else f"[{v}] or [{n_queries}, {v}]"
        raise ValueError(f"candidate_mask must be {want}, got {tuple(mask.shape)}")

    def _check_set_index(self, set_index: torch.Tensor, n: int, n_sets: int) -> torch.Tensor:
        if (
            not isinstance(set_index, torch.Tensor)
            or set_index.dtype not in (torch.int32, torch.int64)
            or set_index.shape != (n,)
        ):
            raise ValueError(f"set_index must be an int64 tensor [{n}], got {getattr(set_index, 'shape', set_index)!r}")
        set_index = set_index.cpu().to(torch.int64)
        if n and (int(set_index.min()) < 0 or int(set_index.max()) >= n_sets):
            raise ValueError(f"set_index values must lie in [0, {n_sets})")
        return set_index

    def _subset(self, mask: torch.Tensor) -> _SubTable:
        if bool(mask.all()):
            return self._full
        key = hashlib.blake2b(mask.numpy().tobytes(), digest_size=16).digest()
        sub = self._subsets.get(key)
        if sub is None:
            ids = torch.nonzero(mask).flatten()
            sub = _SubTable(self._full.vectors[ids], ids)
            if self.max_cached_subsets:
                self._subsets[key] = sub
                while len(self._subsets) > self.max_cached_subsets:
                    self._subsets.popitem(last=False)
        else:
            self._subsets.move_to_end(key)
        return sub

    # ------------------------------------------------------------------ search

    def _search_in(self, sub: _SubTable, q: torch.Tensor, k: int, sets=None) -> torch.Tensor:
        """k nearest rows of ``sub``; with ``sets`` = (masks [G, V], set_index [N]) only rows of each query's set
        (one masked matmul pass over the full table)."""
        n = q.shape[0]
        if sets is None:
            available = torch.full((n,), len(sub), dtype=torch.int64)
        else:
            available = sets[0].sum(dim=1)[sets[1]]
        if n and k > int(available.min()):
            raise ValueError(f"NearestNeighbors.search: k={k} exceeds the number of candidates {int(available.min())}")
        if n == 0:
            return torch.empty(0, k, dtype=torch.int64)
        r = min(k + self.rerank, len(sub))
        q64 = q.to(torch.float64)
        qnorm = q64.norm(dim=1)
        if sets is None and resolve_backend(self.backend, n) == "faiss":
            approx, cand = self._faiss_topr(sub, q, r)
        else:
            approx, cand = self._matmul_topr(sub, q, r, sets)
        # Both compute ||t||^2 - 2 q.t in float32. Its error: the dot product gamma_d ||q|| T (x2), rounding q to
        # float32 u ||q|| T (x2), the rounded norm u T^2, the final addition u (T^2 + 2 ||q|| T); all covered by
        # 2 gamma_{d+4} (2 ||q|| T + T^2), T the largest row norm of the table searched.
        t = sub.max_norm
        err = 2.0 * gamma(self.dim + 4) * (2.0 * qnorm * t + t * t)
        # Exact re-rank of the short list in float64: s(t) = ||t||^2 - 2 q.t = ||q - t||^2 - ||q||^2.
        exact = torch.empty(n, r, dtype=torch.float64)
        step = max(1, (1 << 22) // (r * self.dim))  # about 32 MB of float64 rows per step
        for start in range(0, n, step):
            sl = slice(start, start + step)
            rows = sub.vectors[cand[sl]].to(torch.float64)  # [c, r, d]
            exact[sl] = sub.sqnorm64[cand[sl]] - 2.0 * torch.einsum("crd,cd->cr", rows, q64[sl])
        if sets is not None:  # rows outside a query's set may fill its list when the set has < r rows
            exact.masked_fill_(~sets[0][sets[1][:, None], cand], float("inf"))
        order = exact.argsort(dim=1)[:, :k]
        best_local = torch.gather(cand, 1, order)
        kth_exact = torch.gather(exact, 1, order[:, -1:]).squeeze(1)
        worst_listed = approx.max(dim=1).values
        certified = (worst_listed - err > kth_exact) | (available <= r)
        bad = torch.nonzero(~certified).flatten()
        if len(bad):
            self.n_fallback += int(len(bad))
            bad_sets = None if sets is None else sets[0][sets[1][bad]]
            best_local[bad] = self._exact_topk(sub, q64[bad], k, bad_sets)
        return sub.to_original(best_local)

    def _matmul_topr(self, sub: _SubTable, q: torch.Tensor, r: int, sets=None) -> tuple[torch.Tensor, torch.Tensor]:
        q32 = q.to(torch.float32)
        vt = sub.vt
        approx = torch.empty(q.shape[0], r, dtype=torch.float32)
        cand = torch.empty(q.shape[0], r, dtype=torch.int64)
        for start in range(0, q.shape[0], self.chunk_size):
            sl = slice(start, start + self.chunk_size)
            scores = torch.addmm(sub.sqnorm32, q32[sl], vt, alpha=-2.0)
            if sets is not None:
                scores.masked_fill_(~sets[0][sets[1][sl]], float("inf"))
            vals, idx = scores.topk(r, dim=1, largest=False, sorted=False)
            approx[sl], cand[sl] = vals, idx
        return approx.to(torch.float64), cand

    def _faiss_topr(self, sub: _SubTable, q: torch.Tensor, r: int) -> tuple[torch.Tensor, torch.Tensor]:
        augmented = torch.cat([2.0 * q.to(torch.float32), -torch.ones(q.shape[0], 1)], dim=1).contiguous()
        ip, idx = sub.faiss_index().search(augmented.numpy(), r)
        cand = torch.from_numpy(idx).to(torch.int64)
        if (cand < 0).any():  # cannot happen with r <= len(sub); guard against silent garbage anyway
            raise RuntimeError("faiss returned fewer neighbours than requested")
        return -torch.from_numpy(ip).to(torch.float64), cand

    def _exact_topk(self, sub: _SubTable, q64: torch.Tensor, k: int, masks: torch.Tensor | None = None) -> torch.Tensor:
        """Exhaustive float64 search (the fallback): direct differences, chunked over the table."""
        best_val = torch.full((q64.shape[0], k), float("inf"), dtype=torch.float64)
        best_idx = torch.zeros(q64.shape[0], k, dtype=torch.int64)
        step = 4096
        for start in range(0, len(sub), step):
            block = sub.vectors[start : start + step].to(torch.float64)
            d = torch.cdist(q64, block, compute_mode="donot_use_mm_for_euclid_dist")
            if masks is not None:
                d.masked_fill_(~masks[:, start : start + block.shape[0]], float("inf"))
            vals = torch.cat([best_val, d], dim=1)
            idx = torch.cat([best_idx, torch.arange(start, start + block.shape[0]).expand(q64.shape[0], -1)], dim=1)
            top = vals.topk(k, dim=1, largest=False)
            best_val, best_idx = top.values, torch.gather(idx, 1, top.indices)
        return best_idx
