"""The L2-Laplace sampler is tested as a distribution, not as code.

Significance: every KS test rejects at alpha = 1e-6, so a correct sampler fails a run with probability 1e-6
per test; seeds are fixed, so the suite is deterministic.
"""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from textfree.mechanisms import L2Laplace, sample_gamma, sample_gamma_integer_shape, sample_unit_directions

ALPHA = 1e-6
N = 20_000


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def radius_ks_pvalue(noise: torch.Tensor, d: int, eps: float) -> float:
    radii = noise.norm(dim=-1).numpy()
    return stats.kstest(radii, stats.gamma(a=d, scale=1.0 / eps).cdf).pvalue


@pytest.mark.parametrize("d,eps", [(1, 1.0), (2, 3.0), (16, 0.5), (384, 75.0), (384, 28.0)])
def test_radius_follows_gamma_d_over_eps(d, eps):
    z = L2Laplace(eps).noise(N, d, generator=gen(d))
    assert z.dtype == torch.float64
    assert radius_ks_pvalue(z, d, eps) > ALPHA


@pytest.mark.parametrize("d,eps", [(2, 3.0), (384, 75.0)])
def test_mean_radius_is_d_over_eps(d, eps):
    z = L2Laplace(eps).noise(N, d, generator=gen(1))
    mean = z.norm(dim=-1).mean().item()
    sd_of_mean = math.sqrt(d) / eps / math.sqrt(N)  # Gamma(d, 1/eps) has sd sqrt(d)/eps
    assert abs(mean - d / eps) < 6 * sd_of_mean
    assert L2Laplace(eps).expected_noise_norm(d) == pytest.approx(d / eps)


def test_gamma_helper_matches_gamma_distribution():
    r = sample_gamma_integer_shape(7, 0.25, N, generator=gen(2)).numpy()
    assert stats.kstest(r, stats.gamma(a=7, scale=0.25).cdf).pvalue > ALPHA


@pytest.mark.parametrize("shape,scale", [(1, 1.0), (2.5, 2.0), (7, 0.25), (384, 1 / 28)])
def test_marsaglia_tsang_gamma_matches_gamma_distribution(shape, scale):
    # shape 1 rejects ~5% of proposals, so the redraw loop runs several rounds there.
    r = sample_gamma(shape, scale, N, generator=gen(11)).numpy()
    assert np.isfinite(r).all() and (r > 0).all()
    assert stats.kstest(r, stats.gamma(a=shape, scale=scale).cdf).pvalue > ALPHA


def test_marsaglia_tsang_gamma_agrees_with_the_sum_of_exponentials():
    fast = sample_gamma(384, 0.5, N, generator=gen(12)).numpy()
    plain = sample_gamma_integer_shape(384, 0.5, N, generator=gen(13)).numpy()
    assert stats.ks_2samp(fast, plain).pvalue > ALPHA


def test_marsaglia_tsang_gamma_is_a_function_of_the_generator_state():
    assert torch.equal(sample_gamma(3, 1.0, 1000, generator=gen(14)), sample_gamma(3, 1.0, 1000, generator=gen(14)))
    assert not torch.equal(sample_gamma(3, 1.0, 1000, generator=gen(14)), sample_gamma(3, 1.0, 1000, generator=gen(15)))
    assert sample_gamma(3, 1.0, 0, generator=gen(14)).shape == (0,)


@pytest.mark.parametrize("bad", [0.5, 0, -2, float("nan"), float("inf"), "3", True])
def test_marsaglia_tsang_gamma_refuses_a_bad_shape_with_its_value(bad):
    with pytest.raises(ValueError, match=f"got {bad!r}".replace("(", r"\(").replace(")", r"\)")):
        sample_gamma(bad, 1.0, 10, generator=gen())


@pytest.mark.parametrize("d", [2, 3, 50, 384])
def test_direction_is_uniform_on_the_sphere(d):
    u = sample_unit_directions(N, d, generator=gen(3))
    assert torch.allclose(u.norm(dim=-1), torch.ones(N, dtype=torch.float64))
    # For u uniform on S^(d-1), (1 + u_i) / 2 ~ Beta((d-1)/2, (d-1)/2) for every coordinate i.
    a = (d - 1) / 2
    for i in (0, d - 1):
        p = stats.kstest(((1 + u[:, i]) / 2).numpy(), stats.beta(a, a).cdf).pvalue
        assert p > ALPHA, f"coordinate {i}: p={p}"
    # No preferred direction: the mean vector is ~0 (each coordinate has variance 1/d).
    mean = u.mean(dim=0)
    assert mean.abs().max().item() < 6 / math.sqrt(N * d) * math.sqrt(2 * math.log(d) + 1)


def test_direction_independent_of_radius():
    z = L2Laplace(2.0).noise(N, 3, generator=gen(4))
    r = z.norm(dim=-1)
    cos_first_axis = z[:, 0] / r
    rho, p = stats.spearmanr(r.numpy(), cos_first_axis.numpy())
    assert p > ALPHA


def per_coordinate_gamma_noise(n, d, eps, generator):
    """The bug in SnD's and BeamClean's public code: one Gamma radius per *coordinate*."""
    direction = sample_unit_directions(n, d, generator=generator)
    rng = np.random.default_rng(int(torch.randint(0, 2**31, (1,), generator=generator)))
    radius = torch.from_numpy(rng.gamma(d, 1.0 / eps, size=(n, d)))
    return direction * radius


@pytest.mark.parametrize("d", [16, 384])
def test_the_per_coordinate_gamma_bug_is_caught(d):
    eps = 10.0
    buggy = per_coordinate_gamma_noise(N, d, eps, gen(5))
    assert radius_ks_pvalue(buggy, d, eps) < ALPHA
    good = L2Laplace(eps).noise(N, d, generator=gen(5))
    assert radius_ks_pvalue(good, d, eps) > ALPHA


def test_sample_adds_noise_per_vector_and_keeps_dtype_and_shape():
    x = torch.zeros(4, 5, 8)
    y = L2Laplace(1.0).sample(x, generator=gen(6))
    assert y.shape == x.shape and y.dtype == x.dtype
    norms = y.norm(dim=-1).flatten()
    assert len(set(np.round(norms.numpy(), 6))) == 20  # one independent radius per vector


def test_same_generator_state_same_noise_different_seed_different_noise():
    m = L2Laplace(5.0)
    a = m.noise(3, 4, generator=gen(7))
    b = m.noise(3, 4, generator=gen(7))
    c = m.noise(3, 4, generator=gen(8))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "75", None, True])
def test_invalid_epsilon_is_refused_with_its_value(bad):
    with pytest.raises(ValueError, match="epsilon"):
        L2Laplace(bad)


def test_privacy_map_is_epsilon_times_distance():
    m = L2Laplace(75.0)
    assert m.privacy_loss(2.0).epsilon == 150.0
    assert m.privacy_loss(0.0).epsilon == 0.0
    assert m.privacy_loss(2.0).notion == "metric"
    with pytest.raises(ValueError):
        m.privacy_loss(-1.0)


def test_empirical_likelihood_ratio_respects_metric_privacy():
    """In d=1 the L2-Laplace is the Laplace(1/eps): P[y in bin | x] / P[y in bin | x'] <= exp(eps |x - x'|)."""
    eps, shift = 1.0, 0.5
    m = L2Laplace(eps)
    a = m.sample(torch.zeros(200_000, 1, dtype=torch.float64), generator=gen(9)).squeeze(1).numpy()
    b = m.sample(torch.full((200_000, 1), shift, dtype=torch.float64), generator=gen(10)).squeeze(1).numpy()
    bins = np.linspace(-2, 2.5, 10)
    ha, _ = np.histogram(a, bins)
    hb, _ = np.histogram(b, bins)
    ratio = np.maximum(ha / hb, hb / ha)
    # The bound is exp(0.5) = 1.65; sampling error on bins of >= ~10k counts is a few percent.
    assert ratio.max() < math.exp(eps * shift) * 1.1
    assert ratio.max() > math.exp(eps * shift) * 0.8  # the bound is tight for Laplace: the test can fail
