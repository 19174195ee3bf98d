"""Exact nearest-neighbour search: both backends against float64 brute force."""

import pytest
import torch

from textfree.geometry import gamma, max_pairwise_distance
from textfree.substitution import nn as nn_module
from textfree.substitution.nn import (
    AUTO_FAISS_MIN_QUERIES,
    SINGLE_PASS_MAX_QUERIES,
    NearestNeighbors,
    bf16_score_error,
    choose_backend,
    resolve_backend,
)

BACKENDS = ["matmul", "faiss", "bf16"]


def brute_force(queries: torch.Tensor, table: torch.Tensor, k: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    d = torch.cdist(queries.double(), table.double(), compute_mode="donot_use_mm_for_euclid_dist")
    if mask is not None:
        d = d.masked_fill(~mask if mask.dim() == 2 else ~mask[None, :], float("inf"))
    return d.topk(k, dim=1, largest=False).indices


def make_data(seed: int, v: int = 3000, dim: int = 24, n: int = 300, noise: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(v, dim, generator=g)
    rows = torch.randint(0, v, (n,), generator=g)
    queries = table[rows].double() + noise * torch.randn(n, dim, generator=g, dtype=torch.float64)
    return table, queries


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("noise", [0.01, 1.0, 30.0, 3000.0])
def test_exact_against_brute_force(backend, noise):
    table, queries = make_data(seed=int(noise * 10) % 97, noise=noise)
    nn = NearestNeighbors(table, backend)
    for k in (1, 3):
        assert torch.equal(nn.search(queries, k), brute_force(queries, table, k))
    assert torch.equal(nn.search(queries.float(), 1), brute_force(queries.float(), table, 1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_batch_and_chunking(backend):
    # More queries than AUTO_FAISS_MIN_QUERIES and than one matmul chunk, small chunk size on purpose.
    table, queries = make_data(seed=3, v=800, dim=8, n=AUTO_FAISS_MIN_QUERIES + 37, noise=2.0)
    nn = NearestNeighbors(table, backend, chunk_size=64)
    assert torch.equal(nn.search(queries, 2), brute_force(queries, table, 2))


@pytest.mark.parametrize("backend", ["auto", *BACKENDS])
def test_candidate_masks(backend):
    table, queries = make_data(seed=5, v=1000, dim=16, n=200, noise=3.0)
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(1000, generator=g) < 0.2
    nn = NearestNeighbors(table, backend)
    assert torch.equal(nn.search(queries, 2, candidate_mask=mask), brute_force(queries, table, 2, mask))
    assert bool(mask[nn.search(queries, 1, candidate_mask=mask)].all())
    # One set per query: three distinct sets, queries grouped by set.
    sets = torch.stack([torch.rand(1000, generator=g) < p for p in (0.1, 0.5, 0.9)])
    per_query = sets[torch.arange(200) % 3]
    assert torch.equal(nn.search(queries, 1, candidate_mask=per_query), brute_force(queries, table, 1, per_query))
    # Sets by index: a few sets, one chosen per query; both the single masked pass (few queries) and the
    # per-set searches (many queries) must agree with brute force, including a set smaller than the short list.
    sets[0, :] = False
    sets[0, :3] = True
    for n_q in (200, SINGLE_PASS_MAX_QUERIES + 10):
        rows = torch.randint(0, 1000, (n_q,), generator=g)
        qs = table[rows].double() + 3.0 * torch.randn(n_q, 16, generator=g, dtype=torch.float64)
        which = torch.randint(0, 3, (n_q,), generator=g)
        got = nn.search(qs, 2, candidate_mask=sets, set_index=which)
        assert torch.equal(got, brute_force(qs, table, 2, sets[which])), n_q
    # All-true mask is the full search.
    assert torch.equal(nn.search(queries, 1, candidate_mask=torch.ones(1000, dtype=torch.bool)), nn.search(queries, 1))


@pytest.mark.parametrize("n_twins", [7, 19])
def test_near_ties_fall_back_to_float64_and_stay_exact(n_twins):
    # Each row has twins a few float32 ulps away. 7 twins: more than the float32 short list holds (the float32
    # exactness check fails and the float64 search decides) but fewer than the bfloat16 one, whose float64 re-rank
    # must then tell them apart itself. 19: more than any short list holds, every pass hands them on.
    g = torch.Generator().manual_seed(11)
    base = torch.randn(50, 8, generator=g)
    twins = [base]
    for _ in range(n_twins):
        twins.append(torch.nextafter(twins[-1], torch.full_like(base, float("inf"))))
    table = torch.cat(twins)
    queries = base.double() + 1e-7 * torch.randn(50, 8, generator=g, dtype=torch.float64)
    for backend in BACKENDS:
        nn = NearestNeighbors(table, backend)
        assert torch.equal(nn.search(queries, 1), brute_force(queries, table, 1)), backend
        assert (nn.n_fallback > 0) == (backend != "bf16" or n_twins > 15), backend
        assert (nn.n_bf16_fallback > 0) == (backend == "bf16" and n_twins > 15), backend


def test_exact_fallback_directly():
    table, queries = make_data(seed=2, v=5000, dim=12, n=40, noise=1.5)
    nn = NearestNeighbors(table, "matmul")
    assert torch.equal(nn._exact_topk(nn._full, queries, 4), brute_force(queries, table, 4))


def test_auto_backend_resolution(monkeypatch):
    assert resolve_backend("matmul", 10**6) == "matmul"
    assert resolve_backend("faiss", 1) == "faiss"
    assert resolve_backend("bf16", 1) == "bf16"
    monkeypatch.setattr(nn_module, "bf16_native", lambda: True)
    assert resolve_backend("auto", 1) == resolve_backend("auto", 10**6) == "bf16"
    monkeypatch.setattr(nn_module, "bf16_native", lambda: False)
    assert resolve_backend("auto", AUTO_FAISS_MIN_QUERIES - 1) == "matmul"
    assert resolve_backend("auto", AUTO_FAISS_MIN_QUERIES) == "faiss"
    monkeypatch.setattr(nn_module, "faiss_available", lambda: False)
    assert resolve_backend("auto", 10**6) == "matmul"


def test_the_decision_function_on_each_kind_of_cpu():
    """choose_backend is a plain function of the measured capabilities: native bfloat16 -> bf16 at every size."""
    for n in (1, AUTO_FAISS_MIN_QUERIES - 1, AUTO_FAISS_MIN_QUERIES, 10**6):
        assert choose_backend(n, bf16=True, faiss=True) == choose_backend(n, bf16=True, faiss=False) == "bf16"
        assert choose_backend(n, bf16=False, faiss=False) == "matmul"
        assert choose_backend(n, bf16=False, faiss=True) == ("faiss" if n >= AUTO_FAISS_MIN_QUERIES else "matmul")


# torch's capability report on three machine kinds the project has run on (the flags that matter here)
AMX = {"avx2": True, "avx512_f": True, "avx512_bf16": True, "amx_bf16": True, "amx_tile": True, "cpu_name": "Xeon"}
AVX512_BF16 = {"avx2": True, "avx512_f": True, "avx512_bf16": True, "amx_bf16": False, "num_logical_cores": 2}
AVX2 = {"avx2": True, "avx512_f": False, "avx512_bf16": False, "amx_bf16": False, "cpu_name": "AMD EPYC"}


@pytest.mark.parametrize(
    "report, cpuinfo, mkldnn, native",
    [
        (AMX, "", True, True),  # Intel Sapphire Rapids: AMX (the only case the old rule caught)
        (AVX512_BF16, "", True, True),  # AVX512-BF16 without AMX (AMD Zen 4): measured faster than faiss there
        (AVX2, "", True, False),  # emulated bfloat16: 14x slower than float32
        (AVX512_BF16, "", False, False),  # no oneDNN in this torch build: nothing runs the native kernels
        (None, "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n", True, True),  # torch cannot tell: cpuinfo does
        (None, "flags\t\t: fpu sse2 avx2\n", True, False),
        (None, None, True, False),  # neither can tell: the float32 engines
    ],
)
def test_native_bfloat16_is_read_from_the_cpu_flags(monkeypatch, tmp_path, report, cpuinfo, mkldnn, native):
    import types

    def capability():
        if report is None:
            raise AttributeError("_get_cpu_capability")  # an older torch build
        return report

    monkeypatch.setattr(torch._C, "_cpu", types.SimpleNamespace(_get_cpu_capability=capability))
    path = tmp_path / "cpuinfo"
    if cpuinfo is not None:
        path.write_text("processor\t: 0\n" + cpuinfo)
    read_cpuinfo = nn_module._cpuinfo_flags
    monkeypatch.setattr(nn_module, "_cpuinfo_flags", lambda: read_cpuinfo(str(path)))
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: mkldnn)
    for fn in (nn_module.cpu_flags, nn_module.bf16_native):
        fn.cache_clear()
    try:
        assert nn_module.bf16_native() is native
        assert nn_module.amx_bf16_available() is (report is AMX)
        assert resolve_backend("auto", 1) == ("bf16" if native else "matmul")
        assert resolve_backend("auto", 10**6) == ("bf16" if native else "faiss")
    finally:
        for fn in (nn_module.cpu_flags, nn_module.bf16_native):
            fn.cache_clear()  # the real machine's answer again for the tests after this one


def test_auto_returns_what_every_exact_backend_returns():
    """Whatever auto picks on this machine, the answer is the exact one (the choice changes the speed only)."""
    table, queries = make_data(seed=11, v=2000, dim=32, n=50, noise=3.0)
    expected = brute_force(queries, table, 2)
    for backend in ("auto", *BACKENDS):
        assert torch.equal(NearestNeighbors(table, backend).search(queries, 2), expected), backend


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_bf16_score_error_bounds_every_row(scale):
    # The certificate's premise: |S~ - S| <= bound for every row, S~ the bfloat16 pass's score of the row (as the
    # search computes it), S = ||t||^2 - 2 q.t exactly. Queries of every size against a wide table, 64 dims.
    g = torch.Generator().manual_seed(7)
    table = scale * torch.randn(4000, 64, generator=g)
    queries = torch.cat(
        [
            scale
            * (10.0 ** torch.arange(-2, 3, dtype=torch.float64))[:, None]
            * torch.randn(5, 64, generator=g, dtype=torch.float64)
            for _ in range(40)
        ]
    )
    nn = NearestNeighbors(table, "bf16")
    sub = nn._full
    scores, rows = nn._bf16_topr(sub, queries, len(table))  # every row, in some order
    approx = torch.empty_like(scores).scatter_(1, rows, scores)
    exact = sub.sqnorm64 - 2.0 * queries @ table.double().T
    bound = bf16_score_error(64, queries.norm(dim=1), sub.max_norm)
    ratio = ((approx - exact).abs().amax(dim=1) / bound).max()
    assert ratio <= 1.0
    assert ratio > 0.1  # a bound 10x above every error seen would certify far less than it could


def test_bf16_pass_certifies_most_queries():
    # Noisy queries whose nearest row is clear: the bfloat16 short list settles nearly all of them.
    table, queries = make_data(seed=9, v=5000, dim=64, n=500, noise=0.5)
    nn = NearestNeighbors(table, "bf16")
    assert torch.equal(nn.search(queries, 1), brute_force(queries, table, 1))
    assert nn.n_bf16_fallback <= 25, nn.n_bf16_fallback


def test_validation_errors():
    table, queries = make_data(seed=1, v=20, dim=4, n=3)
    with pytest.raises(ValueError, match="backend"):
        NearestNeighbors(table, "annoy")
    with pytest.raises(ValueError, match=r"\[V, d\]"):
        NearestNeighbors(table[0])
    bad = table.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        NearestNeighbors(bad)
    nn = NearestNeighbors(table)
    with pytest.raises(ValueError, match=r"\[N, 4\]"):
        nn.search(queries[:, :3])
    with pytest.raises(ValueError, match="k must"):
        nn.search(queries, 0)
    with pytest.raises(ValueError, match="exceeds"):
        nn.search(queries, 21)
    with pytest.raises(ValueError, match="selects no row"):
        nn.search(queries, 1, candidate_mask=torch.zeros(20, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        nn.search(queries, 1, candidate_mask=torch.ones(20))
    with pytest.raises(ValueError, match="NaN or infinite"):
        nn.search(torch.full((1, 4), float("inf")))
    assert nn.search(queries[:0], 2).shape == (0, 2)
    assert nn.search(queries[:0], 1, candidate_mask=torch.ones(0, 20, dtype=torch.bool)).shape == (0, 1)
    two_sets = torch.ones(2, 20, dtype=torch.bool)
    with pytest.raises(ValueError, match="set_index values"):
        nn.search(queries, 1, candidate_mask=two_sets, set_index=torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="set_index must be"):
        nn.search(queries, 1, candidate_mask=two_sets, set_index=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="needs candidate_mask"):
        nn.search(queries, 1, set_index=torch.tensor([0, 1, 0]))
    with pytest.raises(ValueError, match="exceeds the number of candidates 1"):
        one = torch.zeros(2, 20, dtype=torch.bool)
        one[:, 0] = True
        nn.search(queries, 2, candidate_mask=one, set_index=torch.tensor([0, 1, 0]))


def test_diameter_exact_and_gamma():
    g = torch.Generator().manual_seed(4)
    for n, d in [(2, 3), (700, 9), (1500, 40)]:
        x = torch.randn(n, d, generator=g) * 3
        expected = float(torch.pdist(x.double()).max())
        assert max_pairwise_distance(x, chunk_size=257) == pytest.approx(expected, rel=1e-12)
    assert max_pairwise_distance(torch.ones(1, 5)) == 0.0
    assert gamma(10) == pytest.approx(10 * 2**-24 / (1 - 10 * 2**-24))
    with pytest.raises(ValueError):
        gamma(2**24)


# ---------------------------------------------------------------------------------------------------- approximate


@pytest.mark.parametrize("dim,noise", [(24, 0.3), (24, 3.0), (96, 0.05), (96, 30.0)])
def test_approximate_agrees_with_exact_and_returns_valid_ids(dim, noise):
    # Queries near table rows (rows + Gaussian noise); fixed seeds. The claim: >= 99% agreement on the nearest
    # row (in these draws it agrees on all of them), every id a table row, k ids per query, nearest first.
    table, queries = make_data(seed=dim + int(noise * 10), v=3000, dim=dim, n=400, noise=noise)
    approx = NearestNeighbors(table, search="approximate")
    assert not approx.exact and NearestNeighbors(table).exact
    want = brute_force(queries, table, 3)
    got = approx.search(queries, 3)
    assert got.shape == (400, 3) and got.dtype == torch.int64
    assert bool(((got >= 0) & (got < 3000)).all())
    assert float((got[:, 0] == want[:, 0]).double().mean()) >= 0.99
    d = torch.cdist(queries.double(), table.double()).gather(1, got)
    assert bool((d[:, :-1] <= d[:, 1:]).all())  # nearest first
    assert (
        float((approx.search(queries.float(), 1)[:, 0] == brute_force(queries.float(), table, 1)[:, 0]).double().mean())
        >= 0.99
    )


def test_approximate_is_deterministic_and_independent_of_the_batch(monkeypatch):
    table, queries = make_data(seed=21, v=2000, dim=32, n=SINGLE_PASS_MAX_QUERIES + 60, noise=2.0)
    first = NearestNeighbors(table, search="approximate").search(queries, 2)
    again = NearestNeighbors(table, search="approximate", chunk_size=64)
    assert torch.equal(again.search(queries, 2), first)
    assert torch.equal(again.search(queries, 2), first)  # cached int8 copy, same answer
    # Integer products are exact, so a query's answer does not depend on the rest of its batch...
    pieces = torch.cat([again.search(queries[i : i + 7], 2) for i in range(0, len(queries), 7)])
    assert torch.equal(pieces, first)
    # ...nor, with candidate sets, on whether the batch took the single masked pass or one search per set.
    g = torch.Generator().manual_seed(3)
    sets = torch.stack([torch.rand(2000, generator=g) < p for p in (0.1, 0.4)])
    which = torch.randint(0, 2, (len(queries),), generator=g)
    whole = again.search(queries, 1, candidate_mask=sets, set_index=which)  # >= SINGLE_PASS_MAX_QUERIES: per set
    small = [
        again.search(queries[i : i + 50], 1, candidate_mask=sets, set_index=which[i : i + 50])
        for i in range(0, len(queries), 50)
    ]
    assert torch.equal(torch.cat(small), whole)
    # torch._int_mm (native int8 CPUs) and the float32 product of the same codes (AVX2-only CPUs) give the same
    # answers; so does a float64 matmul of the same integers where a torch build has no _int_mm.
    calls = []
    int_mm = torch._int_mm
    monkeypatch.setattr(torch, "_int_mm", lambda *a, **kw: calls.append(1) or int_mm(*a, **kw))
    for native in (True, False):
        monkeypatch.setattr(nn_module, "int8_native", lambda native=native: native)
        calls.clear()
        assert torch.equal(NearestNeighbors(table, search="approximate").search(queries, 2), first), native
        assert bool(calls) == native  # the float32 path never calls _int_mm

    def missing(*args, **kwargs):
        raise RuntimeError("no _int_mm here")

    monkeypatch.setattr(nn_module, "int8_native", lambda: True)
    monkeypatch.setattr(torch, "_int_mm", missing)
    assert torch.equal(NearestNeighbors(table, search="approximate").search(queries, 2), first)


@pytest.mark.parametrize("v", [20, 700, 3000])
def test_approximate_with_full_shortlist_is_exact(v):
    # A short list that holds the whole table re-ranks every row in float64: the exact answer.
    table, queries = make_data(seed=v, v=v, dim=16, n=450, noise=1.0)
    full = NearestNeighbors(table, search="approximate", shortlist=v)
    assert torch.equal(full.search(queries, 2), brute_force(queries, table, 2))
    g = torch.Generator().manual_seed(v)
    sets = torch.stack([torch.rand(v, generator=g) < p for p in (0.2, 0.6)])
    which = torch.randint(0, 2, (450,), generator=g)
    for n_q in (100, 450):  # one masked pass (few queries) and one search per set (many)
        got = full.search(queries[:n_q], 1, candidate_mask=sets, set_index=which[:n_q])
        assert torch.equal(got, brute_force(queries[:n_q], table, 1, sets[which[:n_q]])), n_q


def test_approximate_never_leaves_the_candidate_set():
    table, queries = make_data(seed=8, v=1500, dim=16, n=SINGLE_PASS_MAX_QUERIES + 50, noise=3.0)
    g = torch.Generator().manual_seed(2)
    sets = torch.stack([torch.rand(1500, generator=g) < p for p in (0.002, 0.05, 0.5)])
    sets[0, :2] = True  # a set smaller than the short list (k + shortlist = 9 rows)
    approx = NearestNeighbors(table, search="approximate")
    for n_q in (50, SINGLE_PASS_MAX_QUERIES + 50):
        which = torch.randint(0, 3, (n_q,), generator=g)
        got = approx.search(queries[:n_q], 2, candidate_mask=sets, set_index=which)
        assert bool(sets[which[:, None], got].all()), n_q
        assert bool((got[:, 0] != got[:, 1]).all())
        want = brute_force(queries[:n_q], table, 1, sets[which])[:, 0]
        assert float((got[:, 0] == want).double().mean()) >= 0.99
    one = approx.search(queries, 1, candidate_mask=sets[1])
    assert bool(sets[1][one].all())
    per_query = sets[torch.arange(len(queries)) % 3]
    assert bool(per_query.gather(1, approx.search(queries, 1, candidate_mask=per_query)).all())


def test_approximate_handles_huge_and_tiny_queries():
    # Queries are scaled per row before the int8 rounding, so neither huge noise (tiny eta) nor tiny queries overflow.
    table, queries = make_data(seed=13, v=500, dim=8, n=60, noise=1.0)
    approx = NearestNeighbors(table, search="approximate")
    tiny = approx.search(queries * 1e-30, 1)[:, 0]
    assert float((tiny == brute_force(queries * 1e-30, table, 1)[:, 0]).double().mean()) >= 0.95
    # Far queries: ||t||^2 no longer matters at float64 precision, the nearest row is the one maximising q.t
    # (brute force cannot tell the distances apart, so that is the reference).
    farthest = (queries @ table.double().T).argmax(dim=1)
    for scale in (1e30, 1e300):
        got = approx.search(queries * scale, 1)[:, 0]
        assert bool(((got >= 0) & (got < 500)).all())
        assert float((got == farthest).double().mean()) >= 0.95, scale


def test_approximate_validation_errors():
    table, queries = make_data(seed=1, v=20, dim=4, n=3)
    with pytest.raises(ValueError, match="search must be one of .*'fuzzy'"):
        NearestNeighbors(table, search="fuzzy")
    for bad in (-1, 1.5, True, "4"):
        with pytest.raises(ValueError, match=f"shortlist must be an int >= 0, got {bad!r}"):
            NearestNeighbors(table, search="approximate", shortlist=bad)
    for engine in ("faiss", "bf16"):
        with pytest.raises(ValueError, match=f"backend='{engine}'"):
            NearestNeighbors(table, engine, search="approximate")
    approx = NearestNeighbors(table, "matmul", search="approximate", shortlist=0)
    assert approx.search(queries, 20).shape == (3, 20)
    with pytest.raises(ValueError, match="exceeds"):
        approx.search(queries, 21)
    assert approx.search(queries[:0], 2).shape == (0, 2)
