import math

import pytest
import torch
from scipy import stats

from textfree.mechanisms import (
    Clipped,
    Gaussian,
    L2Laplace,
    analytic_delta,
    analytic_epsilon,
    classic_sigma,
    clip_l2,
    effective_noise,
)

ALPHA = 1e-6


def test_classic_sigma_golden_value():
    # sqrt(2 ln(1.25 / 1e-5)) = sqrt(2 * 11.736069) = 4.844805 (hand-computed)
    assert classic_sigma(1.0, 1e-5, 1.0) == pytest.approx(4.844805, abs=1e-6)
    assert classic_sigma(2.0, 1e-5, 3.0) == pytest.approx(4.844805 * 3 / 2, abs=1e-5)


def test_analytic_gaussian_golden_value():
    # Balle & Wang (2018): for eps=1, delta=1e-5, sensitivity 1 the analytic sigma is ~3.73 (vs 4.84 classic).
    assert analytic_epsilon(3.7307, 1e-5, 1.0) == pytest.approx(1.0, abs=1e-3)
    assert analytic_delta(1.0, 3.7307, 1.0) == pytest.approx(1e-5, rel=2e-3)
    # Where the classic formula is proved (epsilon < 1) the exact epsilon is below it.
    g = Gaussian.from_epsilon_delta(0.5, 1e-5, 1.0, calibration="classic")
    assert analytic_epsilon(g.sigma, 1e-5, 1.0) < 0.5


def test_gaussian_privacy_map_round_trips_its_calibration():
    g = Gaussian.from_epsilon_delta(2.0, 1e-6, 0.7)
    assert g.calibration == "analytic"  # the default: exact
    loss = g.privacy_loss(0.7)
    assert loss.epsilon == pytest.approx(2.0) and loss.delta == 1e-6 and loss.notion == "approx"
    assert analytic_delta(loss.epsilon, g.sigma, 0.7) <= 1e-6 * (1 + 1e-6)
    c = Gaussian.from_epsilon_delta(0.8, 1e-6, 0.7, calibration="classic")
    assert c.privacy_loss(0.7).epsilon == pytest.approx(0.8)  # the formula's figure where it is proved
    assert Gaussian(c.sigma, 1e-6, "analytic").privacy_loss(0.7).epsilon < 0.8


@pytest.mark.parametrize(
    "sigma,classic,exact",
    [
        # hand-checked: classic = sqrt(2 ln(1.25e5)) / sigma = 4.844805 / sigma; exact from Balle & Wang's delta(eps)
        # (scipy brentq on it, independently of the package): the formula is false above about eps 8.4 at delta 1e-5
        (0.1, 48.44805, 91.82),
        (0.2, 24.22403, 33.10),
        (0.3, 16.14935, 19.13),
        (0.8, 6.05601, 5.68),
    ],
)
def test_classic_loss_is_never_below_the_exact_loss(sigma, classic, exact):
    formula = 4.844805 / sigma
    assert formula == pytest.approx(classic, rel=1e-5)
    stated = Gaussian(sigma, 1e-5, "classic").privacy_loss(1.0).epsilon
    true = analytic_epsilon(sigma, 1e-5, 1.0)
    assert true == pytest.approx(exact, abs=0.01)
    assert stated == pytest.approx(max(formula, true), rel=1e-6)
    # soundness: at the stated epsilon the exact delta is within the stated delta
    assert analytic_delta(stated, sigma, 1.0) <= 1e-5 * (1 + 1e-6)
    if formula > 8.5:  # where the formula understates, the classic Gaussian states the exact loss
        assert stated > formula


def test_gaussian_stated_loss_is_sound_over_a_sweep_of_sigmas():
    """For both accountants, the exact delta at the stated epsilon never exceeds the stated delta."""
    for calibration in ("analytic", "classic"):
        for sigma in (0.05, 0.1, 0.2, 0.4, 0.55, 1.0, 3.0, 10.0):
            for d_in in (0.5, 1.0, 2.0):
                loss = Gaussian(sigma, 1e-5, calibration).privacy_loss(d_in)
                assert analytic_delta(loss.epsilon, sigma, d_in) <= 1e-5 * (1 + 1e-6), (calibration, sigma, d_in)


def test_classic_calibration_refuses_an_epsilon_its_theorem_does_not_cover():
    with pytest.raises(ValueError, match="epsilon=20"):
        Gaussian.from_epsilon_delta(20, 1e-5, 1.0, calibration="classic")
    with pytest.raises(ValueError, match="epsilon=1.0"):
        Gaussian.from_epsilon_delta(1.0, 1e-5, 1.0, calibration="classic")


def test_gaussian_noise_is_normal_with_sigma():
    g = Gaussian(0.3)
    z = g.noise(5000, 4, generator=torch.Generator().manual_seed(0)).flatten().numpy()
    assert stats.kstest(z, stats.norm(scale=0.3).cdf).pvalue > ALPHA
    zn = g.noise(20000, 8, generator=torch.Generator().manual_seed(1)).norm(dim=-1)
    assert zn.mean().item() == pytest.approx(g.expected_noise_norm(8), rel=0.01)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sigma": 0},
        {"sigma": -1},
        {"sigma": 1, "delta": 0},
        {"sigma": 1, "delta": 1.5},
        {"sigma": 1, "calibration": "rdp"},
    ],
)
def test_gaussian_validation(kwargs):
    with pytest.raises(ValueError):
        Gaussian(**kwargs)


def test_clip_l2_scales_only_long_vectors():
    y = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    out = clip_l2(y, 1.0)
    assert torch.allclose(out, torch.tensor([[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]]))


def test_clipped_mechanism_bounds_norm_and_reports_effective_noise():
    m = Clipped(L2Laplace(1.0), max_norm=1.5)
    x = torch.randn(1000, 8, generator=torch.Generator().manual_seed(0)) * 0.2
    y = m.sample(x, generator=torch.Generator().manual_seed(1))
    assert (y.norm(dim=-1) <= 1.5 + 1e-5).all()
    assert (y.norm(dim=-1) > 1.49).float().mean() > 0.5  # noise of norm ~8 pushes most outside: clipped
    e = effective_noise(x, y)
    assert torch.allclose(x + e, y)
    assert m.privacy_loss(2.0) == L2Laplace(1.0).privacy_loss(2.0)


def test_clipped_validation_names_the_value():
    with pytest.raises(ValueError, match="max_norm"):
        Clipped(L2Laplace(1.0), max_norm=-2)
    with pytest.raises(ValueError, match="inner"):
        Clipped("laplace", max_norm=1.0)


# ------------------------------------------------------------------------------ analytic calibration
from textfree.mechanisms import analytic_sigma, sigma_for_noise_norm  # noqa: E402


def test_analytic_sigma_golden_value():
    # Balle & Wang (2018): eps=1, delta=1e-5, Delta_2=1 -> sigma ~3.7306 (vs classic 4.8448).
    assert analytic_sigma(1.0, 1e-5, 1.0) == pytest.approx(3.7306, abs=2e-4)
    # sigma scales linearly with the sensitivity
    assert analytic_sigma(1.0, 1e-5, 2.0) == pytest.approx(2 * analytic_sigma(1.0, 1e-5, 1.0), rel=1e-8)
    # at the returned sigma the exact delta is (just) within budget
    s = analytic_sigma(1.0, 1e-5, 1.0)
    assert analytic_delta(1.0, s, 1.0) <= 1e-5
    assert analytic_delta(1.0, s * 0.999, 1.0) > 1e-5  # the smallest such sigma


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 10.0, 56.0, 150.0])
@pytest.mark.parametrize("sensitivity", [1.0, 2.0])
def test_analytic_sigma_round_trips_analytic_epsilon(epsilon, sensitivity):
    sigma = analytic_sigma(epsilon, 1e-5, sensitivity)
    assert analytic_epsilon(sigma, 1e-5, sensitivity) == pytest.approx(epsilon, rel=1e-6)
    g = Gaussian.from_epsilon_delta(epsilon, 1e-5, sensitivity, calibration="analytic")
    assert g.sigma == sigma and g.calibration == "analytic" and g.delta == 1e-5
    assert g.privacy_loss(sensitivity).epsilon == pytest.approx(epsilon, rel=1e-6)


def test_analytic_sigma_is_below_classic_and_monotone_in_epsilon():
    assert analytic_sigma(1.0, 1e-5, 1.0) < classic_sigma(1.0, 1e-5, 1.0)
    classic = Gaussian.from_epsilon_delta(0.9, 1e-5, 1.0, calibration="classic")
    assert classic.calibration == "classic" and classic.sigma == pytest.approx(classic_sigma(0.9, 1e-5, 1.0))
    sigmas = [analytic_sigma(e, 1e-5, 1.0) for e in (0.1, 0.5, 1.0, 5.0, 28.0, 75.0, 150.0)]
    assert all(a > b for a, b in zip(sigmas, sigmas[1:])), sigmas
    # a smaller delta needs more noise
    assert analytic_sigma(1.0, 1e-8, 1.0) > analytic_sigma(1.0, 1e-5, 1.0)


def test_from_epsilon_delta_rejects_unknown_calibration():
    with pytest.raises(ValueError, match="'rdp'"):
        Gaussian.from_epsilon_delta(1.0, 1e-5, 1.0, calibration="rdp")


@pytest.mark.parametrize("norm,d", [(1.0, 1), (0.5, 2), (13.7, 384), (384 / 28, 384), (3.0, 1024)])
def test_sigma_for_noise_norm_inverts_expected_noise_norm(norm, d):
    sigma = sigma_for_noise_norm(norm, d)
    assert Gaussian(sigma).expected_noise_norm(d) == pytest.approx(norm, rel=1e-12)
    if d == 1:  # E|z| = sigma * sqrt(2/pi)
        assert sigma == pytest.approx(norm / math.sqrt(2 / math.pi))
    if d >= 384:  # E||z|| ~ sigma * sqrt(d - 1/2)
        assert sigma == pytest.approx(norm / math.sqrt(d - 0.5), rel=1e-4)


def test_sigma_for_noise_norm_monte_carlo_d384():
    target = 384 / 28.0
    g = Gaussian(sigma_for_noise_norm(target, 384))
    z = g.noise(2000, 384, generator=torch.Generator().manual_seed(0))
    assert z.shape == (2000, 384)
    assert z.norm(dim=-1).mean().item() == pytest.approx(target, rel=0.01)


@pytest.mark.parametrize(
    "call,pattern",
    [
        (lambda: analytic_sigma(0.0, 1e-5, 1.0), r"epsilon.*got 0\.0"),
        (lambda: analytic_sigma(-1.0, 1e-5, 1.0), r"epsilon.*got -1\.0"),
        (lambda: analytic_sigma(1.0, 0.0, 1.0), r"delta.*got 0\.0"),
        (lambda: analytic_sigma(1.0, 1.0, 1.0), r"delta.*got 1\.0"),
        (lambda: analytic_sigma(1.0, 1.5, 1.0), r"delta.*got 1\.5"),
        (lambda: analytic_sigma(1.0, 1e-5, 0.0), r"sensitivity.*got 0\.0"),
        (lambda: sigma_for_noise_norm(0.0, 384), r"norm.*got 0\.0"),
        (lambda: sigma_for_noise_norm(1.0, 0), r"d must.*got 0"),
        (lambda: sigma_for_noise_norm(1.0, -3), r"d must.*got -3"),
        (lambda: sigma_for_noise_norm(1.0, 2.5), r"d must.*got 2\.5"),
        (lambda: Gaussian.from_epsilon_delta(0.0, 1e-5, 1.0, calibration="analytic"), r"epsilon.*got 0\.0"),
    ],
)
def test_calibration_bad_inputs_name_the_value(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()
