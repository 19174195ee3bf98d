"""Privacy accountants (textfree.mechanisms.accountants): the registry, basic composition, and the tight composition
of Gaussian releases against values computed independently.

Golden values. ``EXACT``: epsilon of k Gaussian releases (noise sigma, inputs d_in apart) at delta, computed with
mpmath at 50 digits from the exact trade-off of the composition, which is one Gaussian with mu = sqrt(k) d_in / sigma:
delta(eps) = Phi(-eps / mu + mu / 2) - e^eps Phi(-eps / mu - mu / 2) (Balle & Wang 2018, Dong, Roth & Su 2019),
solved by 200 bisection steps. ``RDP``: the same releases through Renyi DP, k alpha / (2 z^2) per order (Mironov 2017)
converted by eps = min over the orders alpha > 1.01 of rdp + log(1 - 1/alpha) - log(delta alpha) / (alpha - 1)
(Canonne, Kamath & Steinke 2020, Prop. 12), over dp-accounting's documented default orders, computed with plain
floats in a separate script.
"""

import math
import subprocess
import sys

import pytest

from textfree.mechanisms import L2Laplace, PrivacyLoss, SlotPrivatization
from textfree.mechanisms.accountants import (
    Accountant,
    BasicAccountant,
    Release,
    available_accountants,
    compose,
    create_accountant,
    get_accountant_class,
    register_accountant,
    release_of,
    slot_releases,
)
from textfree.mechanisms.clipping import Clipped
from textfree.mechanisms.gaussian import Gaussian

# (sigma, d_in, k, delta) -> epsilon
EXACT = {
    (1.0, 1.0, 1, 1e-5): 4.37717809568122,
    (1.0, 1.0, 10, 1e-5): 17.8565868301076,
    (4.0, 2.0, 100, 1e-3): 27.1760171343775,
    (2.0, 2.0, 3, 3e-5): 7.93605619057369,
    (0.5, 2.0, 2, 2e-5): 38.4859276426796,
}
# (k, noise multiplier z = sigma / d_in, delta) -> epsilon
RDP = {
    (10, 1.0, 1e-5): 19.05359753163139,
    (100, 2.0, 1e-3): 29.472878273456192,
    (3, 1.0, 3e-5): 8.578147846501487,
}


def gaussian_releases(sigma: float, d_in: float, k: int) -> list[Release]:
    return [release_of(Gaussian(sigma, 1e-5), d_in, k)]


def test_one_registry_of_accountants_by_name():
    assert available_accountants() == ["basic", "gdp", "pld", "rdp"]
    assert isinstance(create_accountant(), BasicAccountant) and create_accountant().name == "basic"
    assert get_accountant_class("gdp").name == "gdp"
    with pytest.raises(ValueError, match="unknown accountant 'moments'; known: basic, gdp, pld, rdp"):
        create_accountant("moments")
    with pytest.raises(ValueError, match="already registered"):
        register_accountant("basic")(type("Other", (Accountant,), {}))
    for name in available_accountants():
        assert get_accountant_class(name).description  # what inspect and the ledger print


def test_basic_composition_sums_exactly():
    releases = [
        Release(PrivacyLoss(1.5), 3),  # metric releases
        Release(PrivacyLoss(0.25, 2**-20, "approx"), 2),
        Release(PrivacyLoss(0.125), 0),  # no release at all
    ]
    acc = create_accountant("basic")
    acc.extend(releases)
    assert len(acc) == 5
    assert acc.spent() == PrivacyLoss(5.0, 2**-19, "approx")
    assert acc.spent() == sum((r.loss for r in releases for _ in range(r.count)), PrivacyLoss(0.0))
    assert compose([Release(PrivacyLoss(0.75), 4)]) == PrivacyLoss(3.0, 0.0, "metric")
    # it holds at any larger delta, and states nothing at a smaller one
    assert acc.spent(1e-3) == PrivacyLoss(5.0, 1e-3, "approx")
    assert acc.spent(2**-20).epsilon == math.inf
    # the Gaussian releases' own (epsilon, delta) add too: k times the single release's analytic epsilon
    one = Gaussian(1.0, 1e-5).privacy_loss(1.0)
    assert compose(gaussian_releases(1.0, 1.0, 10), "basic") == one.scaled(10)


@pytest.mark.parametrize("case", sorted(EXACT))
def test_gdp_composes_gaussian_releases_exactly(case):
    sigma, d_in, k, delta = case
    got = compose(gaussian_releases(sigma, d_in, k), "gdp", delta=delta)
    assert got.epsilon == pytest.approx(EXACT[case], rel=1e-8) and got.delta == delta and got.notion == "approx"


@pytest.mark.parametrize("case", sorted(EXACT))
def test_pld_of_dp_accounting_agrees_with_the_exact_composition(case):
    pytest.importorskip("dp_accounting")
    sigma, d_in, k, delta = case
    got = compose(gaussian_releases(sigma, d_in, k), "pld", delta=delta)
    assert got.epsilon == pytest.approx(EXACT[case], rel=1e-6)


@pytest.mark.parametrize("case", sorted(RDP))
def test_rdp_of_dp_accounting_against_the_independent_conversion(case):
    pytest.importorskip("dp_accounting")
    k, z, delta = case
    got = compose(gaussian_releases(z * 2.0, 2.0, k), "rdp", delta=delta)
    assert got.epsilon == pytest.approx(RDP[case], rel=1e-12)
    assert got.epsilon > compose(gaussian_releases(z * 2.0, 2.0, k), "gdp", delta=delta).epsilon  # RDP is looser


def test_rdp_reproduces_the_librarys_documented_example():
    """dp-accounting's own test: noise multiplier 4.530877117 is (1, 1e-6)-DP by RDP (there over a fine grid of
    orders; the default orders give 1 to 6 places)."""
    pytest.importorskip("dp_accounting")
    from textfree.mechanisms.accountants import RDPAccountant

    assert RDPAccountant()._gaussian_epsilon([(4.530877117, 1)], 1e-6) == pytest.approx(1.0, abs=1e-6)


def test_tight_accountants_state_epsilon_at_the_plain_sums_delta_and_never_above_it():
    names = ["gdp"] + (["pld", "rdp"] if _has_dp_accounting() else [])
    for sigma, k in ((1.0, 1), (0.5, 1), (2.0, 17), (4.0, 100)):
        releases = gaussian_releases(sigma, 2.0, k)
        plain = compose(releases, "basic")
        for name in names:
            got = compose(releases, name)
            assert got.delta == pytest.approx(plain.delta, rel=1e-15)
            assert got.epsilon <= plain.epsilon, (name, sigma, k)
        if k > 1:  # composing many Gaussian releases tightly is far below their plain sum
            assert compose(releases, "gdp").epsilon < 0.7 * plain.epsilon


def test_other_releases_add_to_the_gaussian_part():
    metric = Release(L2Laplace(10.0).privacy_loss(2.0), 3)  # 3 x 20
    gauss = gaussian_releases(4.0, 2.0, 100)  # delta 1e-5 each: 1e-3 in all
    got = compose([metric, *gauss], "gdp")
    assert got.delta == pytest.approx(1e-3)
    assert got.epsilon == pytest.approx(60.0 + EXACT[(4.0, 2.0, 100, 1e-3)], rel=1e-8)
    # an approximate-DP release that is not Gaussian spends part of the target delta
    other = Release(PrivacyLoss(1.0, 4e-4, "approx"))
    got = compose([other, *gauss], "gdp", delta=1.4e-3)
    assert got.epsilon == pytest.approx(1.0 + EXACT[(4.0, 2.0, 100, 1e-3)], rel=1e-8)
    assert compose([other, *gauss], "gdp", delta=4e-4).epsilon == math.inf  # nothing left for the Gaussian part
    assert compose([metric], "gdp") == compose([metric], "basic")  # no Gaussian release: the plain sum


def test_releases_of_mechanisms_and_of_payload_slots():
    g = Gaussian(0.8, 1e-6)
    assert release_of(g, 2.0, 5) == Release(g.privacy_loss(2.0), 5, 0.4)
    assert release_of(Clipped(g, 3.0), 2.0).noise_multiplier == 0.4  # clipping is post-processing
    assert release_of(L2Laplace(5.0), 2.0).noise_multiplier is None
    assert release_of(g, 0.0).noise_multiplier is None  # identical inputs: nothing to compose
    sp = SlotPrivatization(g, k=4)
    lengths = [3, 5, 1]
    (rel,) = slot_releases(sp, lengths)
    assert rel.count == 9 and rel.noise_multiplier == 0.4
    plain = compose([rel], "basic")
    row_sum = sum((sp.prompt_loss(n) for n in lengths), PrivacyLoss(0.0))
    assert plain.epsilon == pytest.approx(row_sum.epsilon, rel=1e-12) and plain.delta == pytest.approx(row_sum.delta)
    (clean,) = slot_releases(SlotPrivatization(None, k=4), [2])
    assert compose([clean], "gdp").epsilon == math.inf  # no noise: no guarantee under any accountant


def test_release_validation_and_round_trip():
    r = Release(PrivacyLoss(2.5, 1e-6, "approx"), 4, 0.5)
    assert Release.from_dict(r.to_dict()) == r
    assert Release.from_dict(Release(PrivacyLoss(1.0)).to_dict()) == Release(PrivacyLoss(1.0))
    for bad in (
        dict(loss=1.0),
        dict(loss=PrivacyLoss(1.0), count=-1),
        dict(loss=PrivacyLoss(1.0), count=True),
        dict(loss=PrivacyLoss(1.0), noise_multiplier=0.0),
        dict(loss=PrivacyLoss(1.0), noise_multiplier=math.inf),
    ):
        with pytest.raises(ValueError):
            Release(**bad)
    for bad in ({"loss": {"epsilon": "1", "delta": 0, "notion": "metric"}}, {"count": 1}, [], {"loss": {}}):
        with pytest.raises(ValueError):
            Release.from_dict(bad)
    with pytest.raises(ValueError, match="expected a Release"):
        create_accountant().add(PrivacyLoss(1.0))
    with pytest.raises(ValueError, match="delta must be a number in"):
        compose(gaussian_releases(1.0, 1.0, 2), "gdp", delta=1.5)


def test_a_missing_dp_accounting_is_said_and_nothing_imports_it_early(monkeypatch):
    code = "import sys, textfree.mechanisms, textfree.ledger; assert 'dp_accounting' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    monkeypatch.setitem(sys.modules, "dp_accounting", None)  # as if not installed
    for name in ("pld", "rdp"):
        with pytest.raises(ValueError, match=r"pip install 'textfree\[accounting\]'"):
            create_accountant(name)
    assert compose(gaussian_releases(1.0, 1.0, 10), "gdp", delta=1e-5).epsilon == pytest.approx(17.8565868301076)


def _has_dp_accounting() -> bool:
    try:
        import dp_accounting  # noqa: F401
    except ImportError:
        return False
    return True
