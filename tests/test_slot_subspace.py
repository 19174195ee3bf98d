"""The class subspace (textfree.mechanisms.subspace) and the centre + subspace client map."""

import pytest
import torch

from textfree.mechanisms import L2Laplace, SlotPrivatization, center_sha256, center_slots, check_center
from textfree.mechanisms.subspace import check_basis, class_subspace, project_slots
from textfree.payload import Payload


def test_class_subspace_is_the_span_of_the_class_means_minus_their_average_by_hand():
    # three classes in R^4: means (2,0,0,0), (0,2,0,0), (1,1,0,0) -> minus their average (1,1,0,0): (1,-1,0,0),
    # (-1,1,0,0), (0,0,0,0): a rank-1 span along (1,-1,0,0)/sqrt(2)
    x = torch.tensor(
        [[2.0, 0, 0, 0], [2.0, 0, 1, 0], [2.0, 0, -1, 0], [0, 2.0, 0, 5], [0, 2.0, 0, -5], [1.0, 1.0, 0, 0]]
    )
    basis = class_subspace(x, ["a", "a", "a", "b", "b", "c"])
    assert basis.shape == (1, 4)
    torch.testing.assert_close(basis.abs(), torch.tensor([[2**-0.5, 2**-0.5, 0, 0]]), atol=1e-6, rtol=0)
    # each class counts once in the average, whatever its size: the direction is the same with class "a" repeated
    again = class_subspace(torch.cat([x, x[:3]]), ["a", "a", "a", "b", "b", "c"] + ["a"] * 3)
    torch.testing.assert_close(again.abs(), basis.abs(), atol=1e-6, rtol=0)


def test_class_subspace_orders_directions_by_strength_and_caps_the_rank():
    gen = torch.Generator().manual_seed(0)
    centres = torch.zeros(3, 6)
    centres[0, 0], centres[1, 0], centres[2, 1] = 3.0, -3.0, 0.5  # the classes differ most along e0, then along e1
    x = torch.cat([c + 0.01 * torch.randn(50, 6, generator=gen) for c in centres])
    labels = [0] * 50 + [1] * 50 + [2] * 50
    basis = class_subspace(x, labels)
    assert basis.shape == (2, 6)  # 3 classes: at most 2 directions
    check_basis(basis, 6)
    assert abs(float(basis[0, 0])) > 0.99 and abs(float(basis[1, 1])) > 0.99
    assert class_subspace(x, labels, rank=1).shape == (1, 6)


def test_class_subspace_refuses_bad_input_with_the_bad_value():
    x = torch.randn(4, 3)
    with pytest.raises(ValueError, match="at least 2 classes, got 1"):
        class_subspace(x, ["a"] * 4)
    with pytest.raises(ValueError, match="one label per vector: 4 vectors, 3 labels"):
        class_subspace(x, ["a", "b", "a"])
    with pytest.raises(ValueError, match=r"rank must be an integer in \[1, 1\] \(classes - 1\), got 2"):
        class_subspace(x, ["a", "b", "a", "b"], rank=2)
    with pytest.raises(ValueError, match="class means coincide"):
        class_subspace(torch.ones(4, 3), ["a", "b", "a", "b"])
    with pytest.raises(ValueError, match="non-finite"):
        class_subspace(torch.tensor([[float("nan"), 0.0, 0.0]] * 2), ["a", "b"])
    with pytest.raises(ValueError, match="not orthonormal"):
        check_basis(torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="1 <= m < d rows, got m=3 for d=3"):
        check_basis(torch.eye(3))


def test_the_map_projects_centred_slots_and_keeps_them_unit_so_the_guarantee_is_unchanged():
    gen = torch.Generator().manual_seed(1)
    d = 8
    center = torch.full((d,), 0.2)
    basis = torch.linalg.qr(torch.randn(d, 3, generator=gen))[0].T.contiguous()
    smap = torch.cat([center.unsqueeze(0), basis])
    slots = torch.nn.functional.normalize(torch.randn(5, d, generator=gen), dim=-1)
    out = center_slots(slots, smap)
    x = torch.nn.functional.normalize(slots - center, dim=-1)
    want = torch.nn.functional.normalize(x @ basis.T @ basis, dim=-1)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(out.norm(dim=-1), torch.ones(5))
    torch.testing.assert_close(project_slots(out, basis), out, atol=1e-6, rtol=0)  # already in the subspace
    assert float(((out @ basis.T @ basis) - out).abs().max()) < 1e-6
    spec = SlotPrivatization(L2Laplace(28.0), center=smap)
    plain = SlotPrivatization(L2Laplace(28.0))
    assert spec.slot_loss() == plain.slot_loss() and spec.center_sha256 == center_sha256(smap) != center_sha256(center)
    torch.testing.assert_close(check_center(smap, d), smap)
    # the payload header names the map by its sha256
    hidden, mask = torch.randn(2, 8, d, generator=gen), torch.ones(2, 8, dtype=torch.bool)
    v, m = spec.apply(hidden, mask, generator=torch.Generator().manual_seed(0))
    from textfree.payload import EncoderInfo

    payload = Payload(v, m, EncoderInfo("enc", None, d, "contextual"), spec)
    assert Payload.from_bytes(payload.to_bytes()).privatization.center_sha256 == spec.center_sha256
