import math

import pytest
import torch

from textfree.mechanisms import (
    Clipped,
    Gaussian,
    L2Laplace,
    PrivacyLoss,
    SlotPrivatization,
    build_mechanism,
    k_pool,
    mechanism_from_dict,
    mechanism_to_dict,
    n_slots,
)
from textfree.mechanisms.accounting import (
    alignment_from_lengths,
    budget_alignment,
    embedding_diameter,
    ppft_prompt_epsilon,
    snd_epsilon,
    t2t_epsilon,
)


def test_k_pool_hand_computed_with_right_padding_and_short_last_block():
    h = torch.arange(1, 8, dtype=torch.float32).view(1, 7, 1).repeat(2, 1, 1)  # tokens 1..7
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1]])
    pooled, sm = k_pool(h, mask, 2)
    # row 0: valid tokens 1..5 -> blocks (1,2) (3,4) (5) -> 1.5, 3.5, 5 ; row 1: 1.5 3.5 5.5 7
    assert pooled.shape == (2, 4, 1)
    assert pooled[0, :, 0].tolist() == [1.5, 3.5, 5.0, 0.0]
    assert pooled[1, :, 0].tolist() == [1.5, 3.5, 5.5, 7.0]
    assert sm.tolist() == [[True, True, True, False], [True, True, True, True]]


def test_k_pool_left_padding_gives_the_same_slots():
    h = torch.tensor([[[0.0], [0.0], [2.0], [4.0], [6.0]]])
    left = torch.tensor([[0, 0, 1, 1, 1]])
    pooled, sm = k_pool(h, left, 2)
    assert pooled[0, :, 0].tolist() == [3.0, 6.0] and sm.tolist() == [[True, True]]


def test_k_pool_k1_is_identity_on_valid_tokens_and_padding_is_ignored():
    h = torch.randn(3, 6, 4)
    mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3, [1] + [0] * 5])
    h_garbage = h.clone()
    h_garbage[mask == 0] = 1e6  # padding content must never leak into slots
    pooled, sm = k_pool(h_garbage, mask, 1)
    assert torch.equal(sm, mask.bool())
    assert torch.allclose(pooled[sm], h[mask.bool()])
    assert (pooled[~sm] == 0).all()


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_k_pool_rejects_bad_k(bad):
    with pytest.raises(ValueError, match="k"):
        k_pool(torch.zeros(1, 2, 3), torch.ones(1, 2), bad)


def test_n_slots_is_ceiling():
    assert [n_slots(n, 4) for n in (1, 4, 5, 8, 9)] == [1, 1, 2, 2, 3]


def test_slot_privatization_releases_unit_vectors_and_states_2eps_per_slot():
    sp = SlotPrivatization(L2Laplace(75.0), k=4)
    h = torch.randn(2, 10, 16)
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 5:] = 0
    v, sm = sp.apply(h, mask, generator=torch.Generator().manual_seed(0))
    assert v.dtype == torch.float32 and sm.tolist() == [[True] * 3, [True, True, False]]
    assert torch.allclose(v[sm].norm(dim=-1), torch.ones(5), atol=1e-6)
    assert (v[~sm] == 0).all()
    assert sp.slot_loss() == PrivacyLoss(150.0, 0.0, "metric")
    assert sp.prompt_loss(3).epsilon == 450.0
    assert sp.prompt_loss(3, differing=1).epsilon == 150.0
    with pytest.raises(ValueError):
        sp.prompt_loss(3, differing=4)


def test_slot_privatization_without_noise_is_unbounded_and_needs_no_generator():
    sp = SlotPrivatization(None, k=2)
    v, sm = sp.apply(torch.randn(1, 4, 3), torch.ones(1, 4), generator=None)
    assert math.isinf(sp.slot_loss().epsilon)
    with pytest.raises(ValueError, match="generator"):
        SlotPrivatization(L2Laplace(1.0)).apply(torch.randn(1, 4, 3), torch.ones(1, 4), generator=None)


def test_high_epsilon_keeps_direction_low_epsilon_destroys_it():
    h = torch.randn(1, 64, 384)
    mask = torch.ones(1, 64)
    clean, _ = SlotPrivatization(None, k=4).apply(h, mask, generator=None)
    cos = lambda eps: (
        (SlotPrivatization(L2Laplace(eps), k=4).apply(h, mask, generator=torch.Generator().manual_seed(0))[0] * clean)
        .sum(-1)
        .mean()
        .item()
    )
    # E||z|| = d/eps: 384/1e5 ~ 0.004 -> cos ~ 1 ; 384/1 = 384 -> cos ~ 0
    assert cos(1e5) > 0.99
    assert abs(cos(1.0)) < 0.05
    assert cos(1e5) > cos(75.0) > cos(28.0) > cos(1.0)


def test_accounting_golden_values():
    assert ppft_prompt_epsilon(75.0, 10).epsilon == 1500.0
    assert ppft_prompt_epsilon(75.0, 10, differing=2).epsilon == 300.0
    assert t2t_epsilon(100.0, 12, 2.5).epsilon == 3000.0
    assert snd_epsilon(0.5, 4.0, n_tokens=3).epsilon == 6.0
    row = budget_alignment(150.0, 100, 2.5)
    # hand: eps_dchi = 150 / 250 = 0.6 ; tau = 200 / 150 ; eps_PPFT = eps_PR = 75
    assert row.eps_dchi == pytest.approx(0.6)
    assert row.tau == pytest.approx(4 / 3)
    assert row.eps_ppft == 75.0 and row.eps_pr == 75.0
    table = alignment_from_lengths(150.0, [10, 20, 30], 3.0)
    assert table["n_max"] == 30 and table["n_mean"] == 20.0
    assert table["at_n_max"]["eps_dchi"] == pytest.approx(150 / 90)
    assert table["at_n_mean"]["tau"] == pytest.approx(40 / 150)


def test_embedding_diameter_hand_example_and_chunking():
    t = torch.tensor([[0.0, 0.0], [3.0, 4.0], [1.0, 1.0], [-3.0, -4.0]])
    assert embedding_diameter(t) == pytest.approx(10.0)
    assert embedding_diameter(t, chunk=1) == pytest.approx(10.0)
    r = torch.randn(300, 5)
    assert embedding_diameter(r, chunk=7) == pytest.approx(torch.cdist(r, r).max().item(), rel=1e-5)


def test_privacy_loss_composition_and_validation():
    a = PrivacyLoss(1.0, 1e-6, "approx") + PrivacyLoss(2.0, 1e-6, "approx")
    assert a.epsilon == 3.0 and a.delta == pytest.approx(2e-6)
    assert PrivacyLoss(1.5).scaled(4).epsilon == 6.0
    with pytest.raises(ValueError, match="epsilon"):
        PrivacyLoss(-1.0)
    with pytest.raises(ValueError, match="delta"):
        PrivacyLoss(1.0, 2.0)


def test_registry_round_trips_nested_mechanisms():
    for mech in [L2Laplace(28.0), Gaussian(0.5, 1e-6, "analytic"), Clipped(L2Laplace(3.0), 1.7)]:
        assert mechanism_from_dict(mechanism_to_dict(mech)) == mech
    assert build_mechanism("l2_laplace", epsilon=3.0) == L2Laplace(3.0)
    with pytest.raises(ValueError, match="unknown mechanism"):
        build_mechanism("laplacian", epsilon=1.0)
    with pytest.raises(ValueError, match="no parameter"):
        build_mechanism("l2_laplace", eps=1.0)
    sp = SlotPrivatization(Clipped(L2Laplace(3.0), 1.7), k=8, normalize=False, renormalize=False, sensitivity=3.4)
    assert SlotPrivatization.from_dict(sp.to_dict()) == sp


def test_a_declared_sensitivity_is_enforced_never_just_believed():
    """Unit slots lie up to 2 apart, so declaring less is refused; without normalisation every pooled vector is clipped
    to norm sensitivity / 2, so any two inputs lie within the declared diameter (the stated loss holds)."""
    with pytest.raises(ValueError, match="sensitivity=0.5"):
        SlotPrivatization(L2Laplace(7.0), k=1, sensitivity=0.5)
    assert SlotPrivatization(L2Laplace(7.0), k=1, sensitivity=3.0).slot_loss().epsilon == pytest.approx(
        21.0
    )  # over: allowed
    sp = SlotPrivatization(None, k=1, normalize=False, renormalize=False, sensitivity=2.0)
    hidden = torch.tensor([[[100.0, 0.0], [0.3, 0.4]]])
    released, _ = sp.apply(hidden, torch.ones(1, 2, dtype=torch.long), generator=None)
    torch.testing.assert_close(released, torch.tensor([[[1.0, 0.0], [0.3, 0.4]]]))  # clipped to norm 1; short ones kept
    assert torch.cdist(released[0], -released[0]).max() <= 2.0 + 1e-6
