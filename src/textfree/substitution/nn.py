"""L2 nearest-neighbour search over an embedding table, for a batch of query vectors: exact (the default) or,
opt-in, approximate (``search="approximate"``, below).

Exact search. Two backends find a short list of ``k + rerank`` candidates per query in float32:

* ``"matmul"``: torch, in query chunks: ``argmin_t ||t||^2 - 2 q.t`` with precomputed float32 row norms. The
  ``||q||^2`` term of ``||q - t||^2`` is the same for every row, so it changes no ranking; leaving it out
  removes its rounding error, which would grow with the noise (``||q||`` is large when eta is small).
* ``"faiss"``: exhaustive ``faiss.IndexFlatIP`` over rows augmented to ``[t, ||t||^2]`` and queries ``[2q, -1]``,
  whose inner product is minus the same score (the same work as ``IndexFlatL2``, without the ``||q||^2`` term).
* ``"bf16"``: torch, a bfloat16 matmul against a bfloat16 copy of the table (Intel AMX, or the AVX512-BF16 dot
  product instructions, run it several times faster than the float32 one), short list of ``k + BF16_SHORTLIST``
  rows, certified with the bfloat16 error bound (:func:`bf16_score_error`); queries it cannot certify go through
  the float32 path below.
* ``"auto"`` (default): ``"bf16"`` where the CPU multiplies bfloat16 natively (:func:`bf16_native`: AMX-BF16 or
  AVX512-BF16 in the CPU's flags, and torch's oneDNN to use them); elsewhere, per call, faiss for large batches and
  matmul for small ones (:data:`AUTO_FAISS_MIN_QUERIES`, with the measurement behind it). :func:`choose_backend` is
  that decision as a plain function of the measured capabilities. The backend changes the speed only, never a
  result: every exact backend returns the exact nearest neighbours.

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

Approximate search (``search="approximate"``, opt-in): one pass over an int8 copy of the table instead of the
float32 one, then the same float64 re-rank, without the certificate. Each dimension i of the table is scaled by
its own factor D_i (its largest |t_i| maps to 127) and rounded to int8, once per table (candidate sets use the
same codes); a query is scaled the other way (q_i D_i), then by its own factor s so that its largest entry maps to
127, and rounded to int8. The integer product q~.t~ approximates q.t / s up to the two roundings (the int32
accumulation is exact), and ``2 s q~.t~ - ||t||^2`` (float32) approximates ``2 q.t - ||t||^2``, largest for the
nearest row. The ``k + shortlist`` best rows per query are re-ranked exactly in float64 and the k best returned.
The answer is the exact nearest neighbour whenever that row makes the int8 short list, and otherwise the best
row of the list. It is a fixed function of each query and the public table (no randomness, nothing trained): the
same queries give the same answers, and since every score is computed element by element from exact integer
products, a query's answer does not depend on the other queries of its batch (up to exact ties of int8 scores).
Candidate sets work as in the exact search; rows outside a query's set never come back. The int8 matmul is
torch's ``_int_mm`` where the CPU runs it natively (:func:`int8_native`: AVX-512 / AMX); on an AVX2-only CPU,
where torch emulates it 28x slower than a float32 product (docs/benchmarks.md), a float32 product of the same
integer codes, exact while d * 127^2 < 2^24 (every partial sum is then an integer float32 holds); where a torch
build has no ``_int_mm`` at all, a float64 one. All three give the same products, so the same answers. Measured
with benchmarks/bench_approx_search.py (MiniLM's table, 3,000 queries, 1 thread, AVX512-VNNI): 3.3x faster than
the exact search. Agreement with the exact search:
:data:`DEFAULT_SHORTLIST` and docs/substitution.md, which also explains why an approximate answer does not change
the privacy of T2T (post-processing). This mode reads the float32 rows it re-ranks from ``table_vectors`` itself
when that is already a float32 CPU tensor (no copy): do not modify it in place afterwards.
"""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict

import torch

from ..geometry import gamma
from .nn_table import INT8_MAX, SubTable, all_pairs, int8_matmul, keys64, top_columns

__all__ = [
    "NearestNeighbors",
    "BACKENDS",
    "SEARCH_MODES",
    "DEFAULT_SHORTLIST",
    "AUTO_FAISS_MIN_QUERIES",
    "SINGLE_PASS_MAX_QUERIES",
    "resolve_backend",
    "faiss_available",
    "amx_bf16_available",
    "bf16_native",
    "choose_backend",
    "cpu_flags",
    "BF16_NATIVE_FLAGS",
    "int8_native",
    "bf16_score_error",
    "BF16_SHORTLIST",
]

BACKENDS = ("auto", "matmul", "faiss", "bf16")

#: ``search="exact"`` (the default): certified exact nearest neighbours. ``search="approximate"``: an int8 pass
#: and a float64 re-rank of its short list (module docstring).
SEARCH_MODES = ("exact", "approximate")

#: Approximate search keeps ``k + DEFAULT_SHORTLIST`` rows per query from the int8 pass. Measured with k = 1 on
#: MiniLM's 21,777 x 384 word table, queries = the rows of 9,232 SST-2 words + L2-Laplace noise at each of eta =
#: 10, 25, 50, 75, 100, 150, 200 (64,624 queries): the exact neighbour missed a list of 1 row (shortlist 0) for
#: 1,057 queries, of 2 rows for 46, of 4, 5 or 8 rows for none. 7 leaves a margin for other tables.
DEFAULT_SHORTLIST = 7


@functools.lru_cache(maxsize=1)
def faiss_available() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


#: ``backend="bf16"`` keeps ``k + BF16_SHORTLIST`` rows per query from the bfloat16 pass for the certificate. Measured
#: on
#: MiniLM's 21,777 x 384 word table with 5,000 noisy SST-2 words per eta (benchmarks/bench_nn_search.py
#: ``--bf16-certificate``): docs/substitution.md.
BF16_SHORTLIST = 15

#: ``bfloat16`` unit roundoff: 8 significant bits.
BF16_UNIT_ROUNDOFF = 2.0**-8


#: CPU flags under which torch's bfloat16 matmul runs on native instructions (through oneDNN): Intel AMX's tile
#: unit, or the AVX512-BF16 dot products (Intel Cooper Lake and later, AMD Zen 4 and later). Without either, the
#: bfloat16 product is emulated and far slower than float32 (14x on an AVX2-only AMD EPYC, docs/benchmarks.md).
BF16_NATIVE_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


def _cpuinfo_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The ``flags`` of the first CPU in Linux's cpuinfo (empty where there is none)."""
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """This CPU's capability flags, once per process: those torch reports true
    (``torch._C._cpu._get_cpu_capability()``: amx_bf16, avx512_bf16, avx512_vnni, ...), with Linux's cpuinfo flags
    where torch cannot tell (an older build); empty where neither can."""
    flags: set[str] = set()
    try:
        flags |= {name for name, value in torch._C._cpu._get_cpu_capability().items() if value is True}
    except (AttributeError, RuntimeError):
        pass
    if not flags & BF16_NATIVE_FLAGS:
        flags |= _cpuinfo_flags()
    return frozenset(flags)


def amx_bf16_available() -> bool:
    """True where this CPU has AMX-BF16 (Intel Sapphire Rapids and later). False where the build or the CPU cannot
    tell. ``backend="auto"`` asks :func:`bf16_native`, which also counts AVX512-BF16."""
    return "amx_bf16" in cpu_flags()


@functools.lru_cache(maxsize=1)
def bf16_native() -> bool:
    """Whether torch's bfloat16 matmul runs natively here: AMX-BF16 or AVX512-BF16 among :func:`cpu_flags`, and
    torch's oneDNN (mkldnn), which carries those kernels, available. Measured once per process (cached)."""
    return bool(cpu_flags() & BF16_NATIVE_FLAGS) and torch.backends.mkldnn.is_available()


def int8_native() -> bool:
    """Whether torch runs int8 matrix products natively on this CPU (an AVX-512 or AMX capability). On an AVX2-only
    CPU ``torch._int_mm`` is emulated: 0.82 s against 0.029 s for the float32 product of the same size (100 words
    x MiniLM's word table, 1 thread, docs/benchmarks.md), so the approximate search multiplies its int8 codes in
    float32 there."""
    return torch.backends.cpu.get_cpu_capability().upper().startswith(("AVX512", "AMX"))


def bf16_score_error(d: int, qnorm: torch.Tensor, max_row_norm: float) -> torch.Tensor:
    """A bound on |S~ - S| for every row t (||t|| <= T = ``max_row_norm``) of the bfloat16 pass's score
    S~ = -2 fl_bf16([q~, -1/2] . [t~, n~]) against the exact S = ||t||^2 - 2 q.t, for queries of norm ``qnorm``
    (n~: the float32 squared norm rounded to bfloat16).

    With u = 2^-8 (bfloat16) and u' = u + 2^-23 (a float64 query and the float64 norm are rounded twice, through
    float32): q~_i = q_i (1 + a_i), t~_i = t_i (1 + b_i), n~ = ||t||^2 (1 + e), |a_i|, |b_i|, |e| <= u'. Each product
    of two bfloat16 numbers is exact in float32; float32 accumulation of the d + 1 terms in any order adds at most
    gamma_{d+1} times the sum of their magnitudes; the bfloat16 output rounds once more (u). With
    B = sum |q_i t_i| + ||t||^2 / 2 <= ||q|| T + T^2 / 2,
    |fl_bf16(...) - (q.t - ||t||^2 / 2)| <= c B, c = 2u' + u'^2 + (gamma_{d+1} + u (1 + gamma_{d+1})) (1 + u')^2,
    and the exact factor -2 doubles it. Hardware that flushes subnormal inputs or products to zero moves each of
    the d + 1 terms by at most 2^-126 (1 + ||q|| + T + T^2), added too."""
    u = BF16_UNIT_ROUNDOFF
    u1 = u + 2.0**-23
    g = gamma(d + 1)
    c = 2 * u1 + u1 * u1 + (g + u * (1 + g)) * (1 + u1) ** 2
    t = float(max_row_norm)
    return 2.0 * c * (qnorm * t + t * t / 2.0) + (d + 1) * 2.0**-125 * (1.0 + qnorm + t + t * t)


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


def choose_backend(n_queries: int, *, bf16: bool, faiss: bool) -> str:
    """What ``backend="auto"`` runs for a batch of ``n_queries`` queries, given the measured capabilities: ``bf16``,
    whether bfloat16 products run natively (:func:`bf16_native`); ``faiss``, whether faiss is installed.

    * native bfloat16: "bf16" at every batch size. Measured with benchmarks/bench_nn_search.py (``--threads 1
      --repeats 7``) on a 2-core AMD EPYC with AVX512-BF16 and no AMX, torch 2.13, load average 5-6.6 from other
      jobs, L2-Laplace queries at eta 100, no wrong neighbour anywhere: on MiniLM's 30,522 x 384 table the bf16
      search took 0.65 of faiss IndexFlatL2's time and 0.44 of the float32 matmul search's at 1000 queries, 0.11
      and 0.46 at 100 queries; on a random 30,522 x 768 table 0.39 and 0.30 at 1000, 0.07 and 0.30 at 100. On an
      Intel CPU with AMX 0.55-0.70 of faiss's at 1000 queries (docs/benchmarks.md). Without either, bfloat16 is
      emulated, 14x slower than float32;
    * otherwise "faiss" from :data:`AUTO_FAISS_MIN_QUERIES` queries on where faiss is installed, else "matmul".
    """
    if bf16:
        return "bf16"
    return "faiss" if n_queries >= AUTO_FAISS_MIN_QUERIES and faiss else "matmul"


def resolve_backend(backend: str, n_queries: int) -> str:
    """The backend that serves a batch of ``n_queries`` queries: ``backend`` itself, or for "auto" the choice of
    :func:`choose_backend` on this machine's capabilities ("bf16", "faiss" or "matmul")."""
    if backend != "auto":
        return backend
    return choose_backend(n_queries, bf16=bf16_native(), faiss=faiss_available())


class NearestNeighbors:
    """L2 nearest neighbours among the rows of ``table_vectors`` [V, d]: exact by default.

    ``search(queries [N, d], k=1, candidate_mask=None)`` returns int64 row indices [N, k], nearest first.
    Queries may be float32 or float64; exactness is with respect to the queries as given.

    ``search="approximate"`` (opt-in) trades exactness for speed: an int8 pass keeps ``k + shortlist`` rows per
    query and float64 re-ranks them (module docstring). ``backend`` chooses the engine of the exact search; the
    approximate pass always runs on torch, so it takes "auto" or "matmul" and refuses "faiss" and "bf16".
    """

    def __init__(
        self,
        table_vectors: torch.Tensor,
        backend: str = "auto",
        *,
        search: str = "exact",
        shortlist: int = DEFAULT_SHORTLIST,
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
        if search not in SEARCH_MODES:
            raise ValueError(f"NearestNeighbors: search must be one of {SEARCH_MODES}, got {search!r}")
        if search == "approximate" and backend in ("faiss", "bf16"):
            raise ValueError(
                f"NearestNeighbors: search='approximate' runs an int8 torch pass; backend={backend!r} is an engine of "
                "the exact search (use backend='auto' or 'matmul')"
            )
        limits = (
            ("chunk_size", chunk_size, 1),
            ("rerank", rerank, 1),
            ("shortlist", shortlist, 0),
            ("max_cached_subsets", max_cached_subsets, 0),
        )
        for name, value, low in limits:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"NearestNeighbors: {name} must be an int >= {low}, got {value!r}")
        vectors = table_vectors.detach().to(torch.float32).cpu()
        if not torch.isfinite(vectors).all():
            raise ValueError("NearestNeighbors: table_vectors contains NaN or infinite values")
        self.backend = backend
        self.search_mode = search
        self.shortlist = shortlist
        self.chunk_size = chunk_size
        self.rerank = rerank
        self.max_cached_subsets = max_cached_subsets
        self._full = SubTable(vectors, None, exact=self.exact)
        self._subsets: OrderedDict[bytes, SubTable] = OrderedDict()
        self.n_fallback = 0  # queries re-searched in float64 because the float32 pass was not conclusive
        self.n_bf16_fallback = 0  # queries the bfloat16 pass could not certify, handed to the float32 pass

    @property
    def exact(self) -> bool:
        """True for the exact search, False for ``search="approximate"``."""
        return self.search_mode == "exact"

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

    def _subset(self, mask: torch.Tensor) -> SubTable:
        if bool(mask.all()):
            return self._full
        key = hashlib.blake2b(mask.numpy().tobytes(), digest_size=16).digest()
        sub = self._subsets.get(key)
        if sub is None:
            ids = torch.nonzero(mask).flatten()
            sub = SubTable(self._full.vectors[ids], ids, exact=self.exact, parent=self._full)
            if self.max_cached_subsets:
                self._subsets[key] = sub
                while len(self._subsets) > self.max_cached_subsets:
                    self._subsets.popitem(last=False)
        else:
            self._subsets.move_to_end(key)
        return sub

    # ------------------------------------------------------------------ search

    def _search_in(self, sub: SubTable, q: torch.Tensor, k: int, sets=None) -> torch.Tensor:
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
        q64 = q.to(torch.float64)
        if not self.exact:
            r = min(k + self.shortlist, len(sub))
            cand = self._int8_topr(sub, q64, r, sets)
            keys = self._rerank64(sub, q64, cand, sets)[0]
            order = keys.argsort(dim=1, stable=True)[:, :k]
            return sub.to_original(torch.gather(cand, 1, order))
        backend = resolve_backend(self.backend, n)
        if backend != "bf16":
            return sub.to_original(self._search32(sub, q, q64, k, sets, available, backend))
        r = min(k + BF16_SHORTLIST, len(sub))
        qnorm = q64.norm(dim=1)
        approx, cand = self._bf16_topr(sub, q64, r, sets)
        err = bf16_score_error(self.dim, qnorm, sub.max_norm)
        # A query too large for bfloat16 / float32 (inf or NaN scores) is never certified here.
        usable = torch.isfinite(approx).any(dim=1) & ~torch.isnan(approx).any(dim=1) & (qnorm < 1e30)
        best_local, bad = self._certify(sub, q64, k, approx, cand, err, sets, available <= r, usable)
        if len(bad):
            self.n_bf16_fallback += int(len(bad))
            bad_sets = None if sets is None else (sets[0], sets[1][bad])
            best_local[bad] = self._search32(sub, q[bad], q64[bad], k, bad_sets, available[bad], "matmul")
        return sub.to_original(best_local)

    def _search32(self, sub: SubTable, q, q64, k: int, sets, available, backend: str) -> torch.Tensor:
        """The float32 pass (matmul or faiss) with its certificate, float64 search for what it cannot certify:
        local indices [N, k]."""
        r = min(k + self.rerank, len(sub))
        qnorm = q64.norm(dim=1)
        if sets is None and backend == "faiss":
            approx, cand = self._faiss_topr(sub, q, r)
        else:
            approx, cand = self._matmul_topr(sub, q, r, sets)
        # Both compute ||t||^2 - 2 q.t in float32. Its error: the dot product gamma_d ||q|| T (x2), rounding q to
        # float32 u ||q|| T (x2), the rounded norm u T^2, the final addition u (T^2 + 2 ||q|| T); all covered by
        # 2 gamma_{d+4} (2 ||q|| T + T^2), T the largest row norm of the table searched.
        t = sub.max_norm
        err = 2.0 * gamma(self.dim + 4) * (2.0 * qnorm * t + t * t)
        best_local, bad = self._certify(sub, q64, k, approx, cand, err, sets, available <= r)
        if len(bad):
            self.n_fallback += int(len(bad))
            bad_sets = None if sets is None else sets[0][sets[1][bad]]
            best_local[bad] = self._exact_topk(sub, q64[bad], k, bad_sets)
        return best_local

    def _certify(self, sub, q64, k, approx, cand, err, sets, whole, usable=None):
        """Re-rank the short lists in float64; (best k local rows [N, k], queries not certified). A list of the r
        best approximate scores is certified when its worst approximate score, less the error bound ``err``,
        still exceeds the exact k-th best: no row outside it can then beat the k found. ``whole``: the list holds
        every candidate of the query."""
        # Only rows that may be among the k best need float64: one whose approximate score exceeds the k-th best
        # approximate score by more than 2 err is truly worse than k listed rows.
        kth_approx = approx.kthvalue(k, dim=1).values
        contenders = approx <= (kth_approx + 2.0 * err)[:, None]
        keys, offset, err64 = self._rerank64(sub, q64, cand, sets, only=contenders)
        order = keys.argsort(dim=1)[:, :k]
        best_local = torch.gather(cand, 1, order)
        kth_exact = torch.gather(keys, 1, order[:, -1:]).squeeze(1) - offset + err64
        worst_listed = approx.max(dim=1).values
        certified = (worst_listed - err > kth_exact) | whole
        if usable is not None:
            certified &= usable
        return best_local, torch.nonzero(~certified).flatten()

    def _bf16_topr(self, sub: SubTable, q64: torch.Tensor, r: int, sets=None) -> tuple[torch.Tensor, torch.Tensor]:
        """The r smallest scores -2 fl_bf16([q~, -1/2] . [t~, ||t||^2~]) ~ ||t||^2 - 2 q.t of the bfloat16 pass
        and their rows, unordered."""
        qb = torch.cat([q64.to(torch.float32), torch.full((q64.shape[0], 1), -0.5)], dim=1).to(torch.bfloat16)
        index = sub.bf16_index()
        by_blocks = sets is None or int(sets[0].sum(dim=1)[sets[1]].min()) >= r
        approx = torch.empty(q64.shape[0], r, dtype=torch.float64)
        cand = torch.empty(q64.shape[0], r, dtype=torch.int64)
        for start in range(0, q64.shape[0], self.chunk_size):
            sl = slice(start, start + self.chunk_size)
            scores = qb[sl] @ index  # [c, V] bfloat16, largest best
            if sets is not None:
                scores.masked_fill_(~sets[0][sets[1][sl]], float("-inf"))
            vals, cand[sl] = top_columns(scores, r, by_blocks)
            approx[sl] = vals.to(torch.float64).mul_(-2.0)  # exact: bfloat16 -> float64, times -2
        return approx, cand

    def _rerank64(self, sub: SubTable, q64: torch.Tensor, cand: torch.Tensor, sets=None, only=None):
        """float64 ranking keys of the listed rows [N, r] (smaller is nearer; +inf for rows outside a query's set,
        which fill its list when the set has fewer than r rows), with per query the ``offset`` that puts them on
        the scale of the scores, s(t) = ||t||^2 - 2 q.t = key - offset, and a bound on that s's float64 error.

        A query near the table (||q|| <= 4 T) is keyed by ||q - t||^2 from direct differences (offset ||q||^2): the
        expanded form would lose the last digits of near-ties to ||q||^2 (error ~ u ||q|| T against ~ u ||q - t||
        ||q|| here). A far query is keyed by the expanded s itself (offset 0): differences would lose t to q.
        ``only`` [N, r] bool: compute these entries alone, the others stay +inf."""
        n, r = cand.shape
        d = self.dim
        t = sub.max_norm
        keys = torch.full((n, r), float("inf"), dtype=torch.float64)
        qsq = q64.square().sum(dim=1)
        qn = qsq.sqrt()
        near = qn <= 4.0 * t
        step = max(1, (1 << 22) // (r * d))  # at most about 32 MB of float64 rows per step
        for start in range(0, n, step):
            sl = slice(start, start + step)
            qi, ri = torch.nonzero(only[sl], as_tuple=True) if only is not None else all_pairs(cand[sl].shape)
            ids = cand[sl][qi, ri]
            keys[sl][qi, ri] = keys64(sub, ids, sub.vectors[ids].to(torch.float64), q64[sl][qi], near[sl][qi])
        if sets is not None:
            keys.masked_fill_(~sets[0][sets[1][:, None], cand], float("inf"))
        # float64 rounding, by Higham's gamma with u = 2^-53: direct, d + 3 roundings of terms up to (||q|| + T)^2
        # and the subtraction of ||q||^2; expanded, the same for T^2 + 2 ||q|| T.
        g = gamma(d + 4, 2.0**-53)
        err = torch.where(near, 2.0 * g * ((qn + t) ** 2 + qsq), 2.0 * g * (t * t + 2.0 * qn * t))
        return keys, torch.where(near, qsq, torch.zeros_like(qsq)), err

    def _int8_topr(self, sub: SubTable, q64: torch.Tensor, r: int, sets=None) -> torch.Tensor:
        """Approximate search: the r rows with the best int8 score per query (module docstring), unordered."""
        codes, dim_scale, neg_sqnorm = sub.int8_index()
        v = len(sub)
        # q = m u with |u_i| <= 1 first, so that no product below can overflow float64 whatever the query's size.
        m = q64.abs().amax(dim=1, keepdim=True)
        m = torch.where(m > 0, m, torch.ones_like(m))  # a zero query: any scale will do
        scaled = (q64 / m) * dim_scale
        s = scaled.abs().amax(dim=1, keepdim=True) / INT8_MAX  # > 0 for a nonzero query
        s = torch.where(s > 0, s, torch.ones_like(s))
        q8 = (scaled / s).round().to(torch.int8)  # |scaled / s| <= 127 by construction
        # q~.t~ ~ q.t / (m s), so score = 2 m s q~.t~ - ||t||^2 ~ 2 q.t - ||t||^2. Capping 2 m s at 1e25 keeps float32
        # finite (|q~.t~| <= 127^2 d) for huge queries, whose ranking the product decides alone anyway; for tiny ones
        # it underflows to 0 and the norm decides, as it should. The float64 re-rank has the last word.
        two_s = (2.0 * m * s).clamp(max=1e25).to(torch.float32)
        # No native int8 kernel: multiply the same integers in float32, exact while every partial sum stays below 2^24.
        in_float32 = not int8_native() and codes.shape[0] * INT8_MAX**2 < 2**24
        if in_float32:
            codes, q8 = sub.int8_codes_float32(), q8.to(torch.float32)
        cand = torch.empty(q64.shape[0], r, dtype=torch.int64)
        # Block selection needs r real columns per query: a smaller candidate set would let padding columns in.
        by_blocks = sets is None or int(sets[0].sum(dim=1)[sets[1]].min()) >= r
        # [chunk, V'] buffers reused by every chunk (int32 products, float32 scores): fresh ones would be new pages
        # (page faults) each time.
        rows = min(self.chunk_size, q64.shape[0])
        products = None if in_float32 else torch.empty(rows, codes.shape[1], dtype=torch.int32)
        buffer = torch.empty(rows, codes.shape[1], dtype=torch.float32)
        for start in range(0, q64.shape[0], self.chunk_size):
            sl = slice(start, start + self.chunk_size)
            c = q8[sl].shape[0]
            # int32 -> float32 is exact while 127^2 d < 2^24 (d < 1040), else rounded (relative 6e-8).
            if in_float32:
                scores = torch.matmul(q8[sl], codes, out=buffer[:c])
            else:
                scores = buffer[:c].copy_(int8_matmul(q8[sl], codes, out=products[:c]))
            scores.mul_(two_s[sl]).add_(neg_sqnorm)  # [c, V'] float32
            if sets is not None:
                scores[:, :v].masked_fill_(~sets[0][sets[1][sl]], float("-inf"))
            cand[sl] = top_columns(scores if by_blocks else scores[:, :v], r, by_blocks)[1]
        return cand

    def _matmul_topr(self, sub: SubTable, q: torch.Tensor, r: int, sets=None) -> tuple[torch.Tensor, torch.Tensor]:
        q32 = q.to(torch.float32)
        vt = sub.vt
        by_blocks = sets is None or int(sets[0].sum(dim=1)[sets[1]].min()) >= r
        approx = torch.empty(q.shape[0], r, dtype=torch.float32)
        cand = torch.empty(q.shape[0], r, dtype=torch.int64)
        for start in range(0, q.shape[0], self.chunk_size):
            sl = slice(start, start + self.chunk_size)
            scores = torch.addmm(sub.sqnorm32, q32[sl], vt, beta=-1.0, alpha=2.0)  # -(||t||^2 - 2 q.t), exactly
            if sets is not None:
                scores.masked_fill_(~sets[0][sets[1][sl]], float("-inf"))
            vals, cand[sl] = top_columns(scores, r, by_blocks)
            approx[sl] = vals.neg_()
        return approx.to(torch.float64), cand

    def _faiss_topr(self, sub: SubTable, q: torch.Tensor, r: int) -> tuple[torch.Tensor, torch.Tensor]:
        augmented = torch.cat([2.0 * q.to(torch.float32), -torch.ones(q.shape[0], 1)], dim=1).contiguous()
        ip, idx = sub.faiss_index().search(augmented.numpy(), r)
        cand = torch.from_numpy(idx).to(torch.int64)
        if (cand < 0).any():  # cannot happen with r <= len(sub); guard against silent garbage anyway
            raise RuntimeError("faiss returned fewer neighbours than requested")
        return -torch.from_numpy(ip).to(torch.float64), cand

    def _exact_topk(self, sub: SubTable, q64: torch.Tensor, k: int, masks: torch.Tensor | None = None) -> torch.Tensor:
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
