"""Exact nearest-neighbour search: both backends against float64 brute force."""

import pytest
import torch

from textfree.substitution import nn as nn_module
from textfree.geometry import gamma, max_pairwise_distance
from textfree.substitution.nn import AUTO_FAISS_MIN_QUERIES, SINGLE_PASS_MAX_QUERIES, NearestNeighbors, resolve_backend

BACKENDS = ["matmul", "faiss"]


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


def test_near_ties_fall_back_to_float64_and_stay_exact():
    # Each row has 7 twins a few float32 ulps away, more than the short list holds: float32 scores cannot
    # separate them, the exactness check fails and the float64 search decides (agreeing with brute force).
    g = torch.Generator().manual_seed(11)
    base = torch.randn(50, 8, generator=g)
    twins = [base]
    for _ in range(7):
        twins.append(torch.nextafter(twins[-1], torch.full_like(base, float("inf"))))
    table = torch.cat(twins)
    queries = base.double() + 1e-7 * torch.randn(50, 8, generator=g, dtype=torch.float64)
    for backend in BACKENDS:
        nn = NearestNeighbors(table, backend)
        assert torch.equal(nn.search(queries, 1), brute_force(queries, table, 1)), backend
        assert nn.n_fallback > 0, backend


def test_exact_fallback_directly():
    table, queries = make_data(seed=2, v=5000, dim=12, n=40, noise=1.5)
    nn = NearestNeighbors(table, "matmul")
    assert torch.equal(nn._exact_topk(nn._full, queries, 4), brute_force(queries, table, 4))


def test_auto_backend_resolution(monkeypatch):
    assert resolve_backend("matmul", 10**6) == "matmul"
    assert resolve_backend("faiss", 1) == "faiss"
    assert resolve_backend("auto", AUTO_FAISS_MIN_QUERIES - 1) == "matmul"
    assert resolve_backend("auto", AUTO_FAISS_MIN_QUERIES) == "faiss"
    monkeypatch.setattr(nn_module, "faiss_available", lambda: False)
    assert resolve_backend("auto", 10**6) == "matmul"


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
