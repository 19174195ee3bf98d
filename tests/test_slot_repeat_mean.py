"""The repeat_mean client (textfree.mechanisms.slots.repeat_mean_slots): each prompt's unit mean slot sent in place of
every one of its slots, before the noise; its guarantee, its header, and a repeat_mean model served over HTTP."""

import numpy as np
import pytest
import torch
from scipy import stats

from textfree.client import Client
from textfree.mechanisms import L2Laplace, SlotPrivatization, repeat_mean_slots
from textfree.mechanisms.transforms import l2_normalize
from textfree.payload import EncoderInfo, Payload
from textfree.ppft.model import TextFreeLM
from textfree.ppft.serving import GenerateModel
from textfree.ppft.testing import make_tiny_run
from textfree.server import ServerConfig, create_app
from textfree.server.errors import ApiError
from textfree.server.testing import serve_in_thread

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")
ALPHA = 1e-6


def _hidden(b=2, t=6, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, t, d, generator=g) + 3.0, torch.tensor([[1] * t, [1] * (t - 2) + [0, 0]], dtype=torch.bool)


def test_repeat_mean_slots_by_hand():
    s = 2**-0.5
    slots = torch.tensor(
        [
            [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]],  # two real slots and padding
            [[1.0, 0.0], [-1.0, 0.0], [0.0, 0.0]],  # real slots that cancel: zero, not NaN
            [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]],
        ]
    )  # no real slot
    mask = torch.tensor([[True, True, False], [True, True, False], [False, False, False]])
    out = repeat_mean_slots(slots, mask)
    torch.testing.assert_close(out[0], torch.tensor([[s, s], [s, s], [0.0, 0.0]]))
    assert torch.equal(out[1], torch.zeros(3, 2)) and torch.equal(out[2], torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"expected slots \[B, S, d\] and mask \[B, S\], got \(3, 2\) and \(3,\)"):
        repeat_mean_slots(slots[0], mask[0])


def test_every_released_slot_is_the_prompts_unit_mean_and_the_guarantee_is_ppfts():
    hidden, mask = _hidden()
    center = l2_normalize(hidden.mean((0, 1)))
    for c in (None, center):
        plain, pm = SlotPrivatization(None, k=2, center=c).apply(hidden, mask, generator=None)
        spec = SlotPrivatization(None, k=2, center=c, repeat_mean=True)
        rep, rm = spec.apply(hidden, mask, generator=None)
        assert torch.equal(pm, rm)
        for row in range(2):
            n = int(rm[row].sum())
            want = l2_normalize(plain[row, :n].sum(dim=0))
            torch.testing.assert_close(rep[row, :n], want.expand(n, -1), atol=1e-6, rtol=0)
            assert torch.equal(rep[row, n:], torch.zeros_like(rep[row, n:]))
    noisy = SlotPrivatization(L2Laplace(20.0), k=2, center=center, repeat_mean=True)
    base = SlotPrivatization(L2Laplace(20.0), k=2, center=center)
    assert noisy.slot_loss() == base.slot_loss() and noisy.prompt_loss(3) == base.prompt_loss(
        3
    )  # unit slots: 2 eps each
    v, m = noisy.apply(hidden, mask, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(v[m].norm(dim=-1), torch.ones(int(m.sum())), atol=1e-5, rtol=0)
    assert not torch.allclose(v[0, 0], v[0, 1])  # each copy gets its own noise


def test_each_copy_gets_its_own_l2_laplace_draw():
    """Without renormalising, slot i of a repeat_mean payload minus the repeated mean is that slot's noise: its
    radius follows Gamma(d, 1/eps) (KS test, alpha 1e-6) and two copies' noises are uncorrelated (Pearson, alpha
    1e-6)."""
    d, eps, t = 8, 5.0, 2000
    hidden = torch.randn(1, t, d, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(1, t, dtype=torch.bool)
    clean, _ = SlotPrivatization(None, k=1, repeat_mean=True).apply(hidden, mask, generator=None)
    noisy, _ = SlotPrivatization(L2Laplace(eps), k=1, renormalize=False, repeat_mean=True).apply(
        hidden, mask, generator=torch.Generator().manual_seed(2)
    )
    noise = (noisy[0] - clean[0]).double()
    radius = noise.norm(dim=-1).numpy()
    assert stats.kstest(radius, stats.gamma(a=d, scale=1 / eps).cdf).pvalue > ALPHA
    assert abs(radius.mean() - d / eps) < 5 * np.sqrt(d) / eps / np.sqrt(t)
    first, second = noise[0::2, 0].numpy(), noise[1::2, 0].numpy()  # coordinate 0 of neighbouring copies
    assert stats.pearsonr(first, second).pvalue > ALPHA


def test_the_header_names_repeat_mean_only_when_set_and_round_trips():
    hidden, mask = _hidden()
    spec = SlotPrivatization(L2Laplace(20.0), k=2, repeat_mean=True)
    assert spec.to_dict()["repeat_mean"] is True
    assert "repeat_mean" not in SlotPrivatization(L2Laplace(20.0), k=2).to_dict()  # PPFT's headers are as before
    v, m = spec.apply(hidden, mask, generator=torch.Generator().manual_seed(0))
    back = Payload.from_bytes(Payload(v, m, EncoderInfo("tiny", None, 8, "contextual"), spec).to_bytes())
    assert back.privatization.repeat_mean is True
    with pytest.raises(ValueError, match="privatization.repeat_mean must be true or false, got 'yes'"):
        SlotPrivatization.from_dict(spec.to_dict() | {"repeat_mean": "yes"})
    with pytest.raises(ValueError, match="repeat_mean must be true or false, got 1"):
        SlotPrivatization(None, repeat_mean=1)
    with pytest.raises(ValueError, match="repeat_mean needs normalize=True"):
        SlotPrivatization(None, normalize=False, repeat_mean=True)


@pytest.fixture(scope="module")
def repeat_run(tmp_path_factory, tiny_encoder_dir):
    tmp = tmp_path_factory.mktemp("repeat")
    plain = make_tiny_run(tmp / "plain", tiny_encoder_dir)
    lm = TextFreeLM.load(plain)
    lm.server.config = lm.config.replace(repeat_mean=True)
    lm.save(tmp / "repeat")
    return tmp / "repeat", plain


def test_a_repeat_mean_model_is_served_with_its_client_and_checks_payloads(repeat_run, tiny_encoder_dir):
    run, plain = repeat_run
    lm = TextFreeLM.load(run)
    assert lm.config.repeat_mean is True
    model = GenerateModel.load("r", str(run))
    assert model.card["repeat_mean"] is True and GenerateModel.load("p", str(plain)).card["repeat_mean"] is False
    config = ServerConfig(models={"r": str(run)}, auth=False)
    text = "a private prompt that is long enough for several slots"
    repeated = lm.privatizer(30.0).privatize([text], seed=0)
    assert repeated.privatization.repeat_mean and repeated.lengths[0] > 1
    model.prepare(repeated, None, config)  # accepted
    ppft = TextFreeLM.load(plain).privatizer(30.0).privatize([text], seed=0)
    with pytest.raises(
        ApiError,
        match=r"takes payloads whose slots are each prompt's repeated mean slot \(repeat_mean: true\), got "
        r"repeat_mean=false",
    ) as err:
        model.prepare(ppft, None, config)
    assert err.value.status == 400
    with pytest.raises(ApiError, match=r"the prompt's own slots \(repeat_mean: false\), got repeat_mean=true"):
        GenerateModel.load("p", str(plain)).prepare(repeated, None, config)
    # over HTTP: the client reads repeat_mean from the card, so its answers are the local model's
    app = create_app(config)
    with serve_in_thread(app) as url, Client(url, encoder=tiny_encoder_dir) as client:
        result = client.generate([text], model="r", epsilon=30.0, seed=3, max_new_tokens=2)
    local = lm.privatizer(30.0).privatize([text], seed=3)
    assert result.answers == app.state.registry.models["r"].server.answer(local, max_new_tokens=2)


def test_one_differing_input_slot_moves_every_repeated_slot_and_is_charged_so():
    """Under repeat_mean two prompts that differ in one input slot differ in every released slot (the mean moves), so
    prompt_loss(n, differing=1) is the whole prompt's n x 2 eps (56 x 4 = 224 at eps 28), not one slot's 56."""
    sp = SlotPrivatization(L2Laplace(28.0), k=1, repeat_mean=True)
    a = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]])
    b = a.clone()
    b[0, 0] = torch.tensor([0.0, 1.0])  # one input slot differs
    mask = torch.ones(1, 4, dtype=torch.long)
    clean = SlotPrivatization(None, k=1, repeat_mean=True)
    ra, _ = clean.apply(a, mask, generator=None)
    rb, _ = clean.apply(b, mask, generator=None)
    assert int((ra - rb).norm(dim=-1).gt(1e-6).sum()) == 4  # every released slot moved
    assert sp.prompt_loss(4, differing=1).epsilon == pytest.approx(224.0) == sp.prompt_loss(4).epsilon
    assert sp.prompt_loss(4, differing=0).epsilon == 0.0
    plain = SlotPrivatization(L2Laplace(28.0), k=1)
    assert plain.prompt_loss(4, differing=1).epsilon == pytest.approx(56.0)  # without repeat_mean: the one slot
