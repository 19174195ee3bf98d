"""Slot centring (textfree.mechanisms.centering): the mu-GDP mean's noise and privacy map, the centring step of
SlotPrivatization (unit slots, header round trip), and a centring model served over HTTP (card, client, checks)."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from textfree.client import Client, ModelMismatchError, _card_center
from textfree.mechanisms import L2Laplace, PrivateMean, SlotPrivatization, center_sha256, prompt_mean_slots
from textfree.mechanisms.transforms import l2_normalize
from textfree.payload import Payload
from textfree.ppft.model import TextFreeLM
from textfree.ppft.serving import GenerateModel
from textfree.ppft.testing import make_tiny_run
from textfree.server import ServerConfig, create_app
from textfree.server.errors import ApiError
from textfree.server.testing import serve_in_thread

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")
ALPHA = 1e-6


def _gdp_delta(eps: float, mu: float) -> float:
    """Dong, Roth & Su (2019), Corollary 2.13: the delta of mu-GDP at eps, written out here by hand."""
    return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)


def test_private_mean_noise_is_gaussian_with_sigma_two_over_n_mu():
    n, d, mu = 50, 400, 0.5
    rows = l2_normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    mech = PrivateMean(mu)
    assert mech.sigma(n) == pytest.approx(2.0 / (n * mu))
    noise = torch.cat([mech.sample(rows, generator=torch.Generator().manual_seed(s)) - rows.mean(0) for s in range(25)])
    assert stats.kstest(noise.numpy(), stats.norm(scale=2.0 / (n * mu)).cdf).pvalue > ALPHA


@pytest.mark.parametrize("mu, delta, golden", [(1.0, 1e-6, 4.8866), (0.5, 1e-5, 1.9931), (2.0, 1e-6, 10.9972)])
def test_private_mean_privacy_loss_golden_values_and_the_gdp_curve(mu, delta, golden):
    """Golden epsilons: the root of the hand-written GDP delta curve (scipy brentq), not the code under test."""
    loss = PrivateMean(mu, delta=delta).privacy_loss(1)
    assert loss.notion == "approx" and loss.delta == delta
    assert loss.epsilon == pytest.approx(golden, abs=1e-4)
    assert _gdp_delta(loss.epsilon, mu) == pytest.approx(delta, rel=1e-4)
    assert PrivateMean(mu, delta=delta).privacy_loss(2).epsilon == pytest.approx(
        PrivateMean(2 * mu, delta=delta).privacy_loss(1).epsilon
    )
    assert PrivateMean(mu).privacy_loss(0).epsilon == 0.0


def test_private_mean_refuses_bad_settings_and_rows_with_their_values():
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="mu"):
            PrivateMean(bad)
    with pytest.raises(ValueError, match="delta must lie strictly between 0 and 1, got 0.0"):
        PrivateMean(1.0, delta=0.0)
    with pytest.raises(ValueError, match="norm <= 1.*got 2"):
        PrivateMean(1.0).sample(torch.tensor([[2.0, 0.0]]), generator=torch.Generator())
    with pytest.raises(ValueError, match=r"rows \[n, d\]"):
        PrivateMean(1.0).sample(torch.zeros(3), generator=torch.Generator())
    with pytest.raises(ValueError, match="n must be an integer >= 1, got 0"):
        PrivateMean(1.0).sigma(0)
    with pytest.raises(ValueError, match="prompt 1 has no slots"):
        prompt_mean_slots([torch.ones(2, 3), torch.ones(0, 3)])


def test_prompt_mean_slots_is_each_prompts_mean_unit_slot():
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    b = torch.tensor([[0.6, 0.8]])
    torch.testing.assert_close(prompt_mean_slots([a, b]), torch.tensor([[0.5, 0.5], [0.6, 0.8]], dtype=torch.float64))


def _hidden(b=2, t=6, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, t, d, generator=g) + 3.0, torch.tensor([[1] * t, [1] * (t - 2) + [0, 0]], dtype=torch.bool)


def test_centring_subtracts_the_centre_and_keeps_unit_slots_and_the_guarantee():
    hidden, mask = _hidden()
    center = l2_normalize(hidden.mean((0, 1)))
    plain = SlotPrivatization(None, k=2)
    centred = SlotPrivatization(None, k=2, center=center)
    v0, m0 = plain.apply(hidden, mask, generator=None)
    v1, m1 = centred.apply(hidden, mask, generator=None)
    assert torch.equal(m0, m1)
    torch.testing.assert_close(v1[m1], l2_normalize(v0[m0] - center), atol=1e-6, rtol=0)
    assert torch.equal(v1[~m1], torch.zeros_like(v1[~m1]))
    # the common direction is gone: centred slots are farther apart than plain ones
    assert (v1[m1] @ v1[m1].T).mean() < (v0[m0] @ v0[m0].T).mean()
    noisy = SlotPrivatization(L2Laplace(20.0), k=2, center=center)
    vn, mn = noisy.apply(hidden, mask, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(vn[mn].norm(dim=-1), torch.ones(int(mn.sum())), atol=1e-5, rtol=0)
    assert noisy.slot_loss() == SlotPrivatization(L2Laplace(20.0), k=2).slot_loss()


def test_a_centred_header_round_trips_by_sha_and_cannot_privatize():
    hidden, mask = _hidden()
    center = torch.linspace(-1, 1, 8)
    spec = SlotPrivatization(L2Laplace(20.0), k=2, center=center)
    assert spec.center_sha256 == center_sha256(center) and len(spec.center_sha256) == 64
    header = spec.to_dict()
    assert header["center_sha256"] == spec.center_sha256 and "center" not in header
    back = SlotPrivatization.from_dict(header)
    assert back.center is None and back.center_sha256 == spec.center_sha256
    with pytest.raises(ValueError, match="names its centre by sha256 only"):
        back.apply(hidden, mask, generator=torch.Generator())
    assert "center_sha256" not in SlotPrivatization(None).to_dict()  # uncentred headers are as before
    v, m = spec.apply(hidden, mask, generator=torch.Generator().manual_seed(0))
    payload = Payload(v, m, _info(), spec)
    assert Payload.from_bytes(payload.to_bytes()).privatization.center_sha256 == spec.center_sha256


def test_centre_settings_are_checked_with_the_bad_value():
    with pytest.raises(ValueError, match="1-D float tensor"):
        SlotPrivatization(None, center=torch.ones(2, 2, 2))
    with pytest.raises(ValueError, match="rows are not orthonormal"):  # a 2-D map: centre + subspace rows
        SlotPrivatization(None, center=torch.ones(2, 2))
    with pytest.raises(ValueError, match="1 <= m < d rows, got m=3 for d=3"):  # as many basis rows as the width
        SlotPrivatization(None, center=torch.ones(4, 3))
    with pytest.raises(ValueError, match="1 <= m < d rows, got m=0 for d=3"):  # a centre row and no basis
        SlotPrivatization(None, center=torch.ones(1, 3))
    with pytest.raises(ValueError, match="non-finite"):
        SlotPrivatization(None, center=torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="needs normalize=True"):
        SlotPrivatization(None, normalize=False, center=torch.ones(3))
    with pytest.raises(ValueError, match="is not the given centre's"):
        SlotPrivatization(None, center=torch.ones(3), center_sha256="0" * 64)
    with pytest.raises(ValueError, match="64-character hex string, got 'abc'"):
        SlotPrivatization(None, center_sha256="abc")
    hidden, mask = _hidden()
    with pytest.raises(ValueError, match="centre has width 3, the slots have width 8"):
        SlotPrivatization(None, center=torch.ones(3)).apply(hidden, mask, generator=None)


def _info():
    from textfree.payload import EncoderInfo

    return EncoderInfo("tiny", None, 8, "contextual")


@pytest.fixture(scope="module", params=["centre", "centre + subspace"])
def centred_run(request, tmp_path_factory, tiny_encoder_dir):
    tmp = tmp_path_factory.mktemp("centred")
    plain = make_tiny_run(tmp / "plain", tiny_encoder_dir)
    lm = TextFreeLM.load(plain)
    lm.center = l2_normalize(torch.linspace(-1.0, 2.0, lm.encoder.dim))
    if request.param == "centre + subspace":  # the 2-D map travels the same paths as a centre
        basis = torch.linalg.qr(torch.randn(lm.encoder.dim, 3, generator=torch.Generator().manual_seed(0)))[0].T
        lm.center = torch.cat([lm.center.unsqueeze(0), basis])
    lm.server.config = lm.config.replace(center_mu=1.0, center_sha256=center_sha256(lm.center))
    lm.save(tmp / "centred")
    return tmp / "centred", plain


def test_a_centring_model_is_served_with_its_centre_and_checks_payloads(centred_run, tiny_encoder_dir):
    run, plain = centred_run
    lm = TextFreeLM.load(run)
    assert lm.center is not None and center_sha256(lm.center) == lm.config.center_sha256
    model = GenerateModel.load("c", str(run))
    card = model.card
    assert card["center_sha256"] == lm.config.center_sha256 and card["center_mu"] == 1.0
    assert torch.equal(torch.tensor(card["center"]), lm.center)  # the card carries the whole map, by value
    config = ServerConfig(models={"c": str(run)}, auth=False)
    centred = lm.privatizer(30.0).privatize(["a private prompt"], seed=0)
    model.prepare(centred, None, config)  # accepted
    uncentred = TextFreeLM.load(plain).privatizer(30.0).privatize(["a private prompt"], seed=0)
    with pytest.raises(ApiError, match="takes payloads centred on the slot centre") as err:
        model.prepare(uncentred, None, config)
    assert err.value.status == 400
    with pytest.raises(ApiError, match="takes uncentred slots"):
        GenerateModel.load("p", str(plain)).prepare(centred, None, config)
    with pytest.raises(ValueError, match="needs its slot centre and only it"):
        GenerateModel("x", lm.server)
    # over HTTP: the client centres with the card's centre, so its answers are the local model's
    app = create_app(ServerConfig(models={"c": str(run)}, auth=False))
    with serve_in_thread(app) as url, Client(url, encoder=tiny_encoder_dir) as client:
        result = client.generate(["a private prompt"], model="c", epsilon=30.0, seed=3, max_new_tokens=2)
    local = lm.privatizer(30.0).privatize(["a private prompt"], seed=3)
    assert result.answers == app.state.registry.models["c"].server.answer(local, max_new_tokens=2)


def test_the_client_refuses_a_card_whose_centre_does_not_hash_to_its_sha():
    card = {"center_sha256": center_sha256(torch.ones(4)), "center": [1.0, 1.0, 1.0, 2.0]}
    with pytest.raises(ModelMismatchError, match="do not hash to its center_sha256"):
        _card_center(card, "m", 4)
    with pytest.raises(ModelMismatchError, match="carries no usable one"):
        _card_center(card | {"center": None}, "m", 4)
    with pytest.raises(ModelMismatchError, match="carries no usable one"):
        _card_center(card | {"center": [1.0, 1.0]}, "m", 4)
    assert _card_center({"center_sha256": None}, "m", 4) is None
    np.testing.assert_array_equal(
        _card_center(card | {"center": [1.0] * 4}, "m", 4).numpy(), np.ones(4, dtype=np.float32)
    )


def test_inspect_names_the_slot_centre_of_a_centred_payload(tmp_path):
    from typer.testing import CliRunner

    from textfree.cli import app

    hidden, mask = _hidden()
    spec = SlotPrivatization(L2Laplace(20.0), k=2, center=torch.linspace(-1, 1, 8))
    v, m = spec.apply(hidden, mask, generator=torch.Generator().manual_seed(0))
    Payload(v, m, _info(), spec).save(tmp_path / "p.safetensors")
    r = CliRunner().invoke(app, ["inspect", str(tmp_path / "p.safetensors")], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "slot centre" in r.output and spec.center_sha256[:12] in r.output
    Payload(
        *SlotPrivatization(L2Laplace(20.0), k=2).apply(hidden, mask, generator=torch.Generator()),
        _info(),
        SlotPrivatization(L2Laplace(20.0), k=2),
    ).save(tmp_path / "q.safetensors")
    assert (
        "slot centre"
        not in CliRunner().invoke(app, ["inspect", str(tmp_path / "q.safetensors")], terminal_width=200).output
    )
