"""Hiding the slot count: ``SlotPrivatization.pad_to`` (filler slots noised like the prompt's own), the payload and
CLI that carry it, PPFT's ``fixed_slots`` client, the server card that asks for it, and the count-reading attackers."""

import math

import pytest
import torch
from typer.testing import CliRunner

from textfree.attacks.attributes import build_specs, length_predictions, prior_predictions, score_attributes
from textfree.cli import app
from textfree.heads.classifier import AttributeAttackConfig, predict_attributes, train_attribute_attacker
from textfree.mechanisms import L2Laplace, SlotPrivatization
from textfree.mechanisms.slots import filler_slot, pad_slots
from textfree.payload import EncoderInfo, Payload, PayloadError

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

ENC = EncoderInfo("tiny/encoder", "a" * 64, 2, "contextual")


def test_filler_is_the_equal_coordinate_unit_vector():
    assert filler_slot(4).tolist() == [0.5, 0.5, 0.5, 0.5]
    assert float(filler_slot(384).norm()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="dim must be an integer >= 1, got 0"):
        filler_slot(0)


def test_pad_slots_hand_example():
    slots = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], [[0.0, -1.0], [0.0, 0.0], [0.0, 0.0]]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    out, m = pad_slots(slots, mask, 4)
    f = 2**-0.5
    assert m.tolist() == [[True] * 4, [True] * 4]
    assert torch.allclose(
        out, torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [f, f]], [[0.0, -1.0], [f, f], [f, f], [f, f]]])
    )
    with pytest.raises(ValueError, match="prompt 0 has 3 slots, more than pad_to=2"):
        pad_slots(slots, mask, 2)


def test_padded_release_has_pad_to_unit_slots_for_every_prompt_and_bounds_every_pair():
    sp = SlotPrivatization(L2Laplace(75.0), k=4, pad_to=5)
    h = torch.randn(2, 12, 16)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 3:] = 0  # 3 slots and 1 slot before padding
    v, sm = sp.apply(h, mask, generator=torch.Generator().manual_seed(0))
    assert v.shape == (2, 5, 16) and bool(sm.all())
    assert torch.allclose(v.norm(dim=-1), torch.ones(2, 5), atol=1e-6)
    assert sp.count_hidden and sp.pair_loss().epsilon == 5 * 150.0
    unpadded = SlotPrivatization(L2Laplace(75.0), k=4)
    assert not unpadded.count_hidden and math.isinf(unpadded.pair_loss().epsilon)
    # without noise the filler slots are exactly the public filler: nothing else is added
    clean, _ = SlotPrivatization(None, k=4, pad_to=5).apply(h, mask, generator=None)
    assert torch.allclose(clean[1, 1:], filler_slot(16).expand(4, 16)) and torch.allclose(
        clean[0, 3:], filler_slot(16).expand(2, 16)
    )
    with pytest.raises(ValueError, match="prompt 0 has 3 slots, more than pad_to=2"):
        SlotPrivatization(L2Laplace(75.0), k=4, pad_to=2).apply(h, mask, generator=torch.Generator().manual_seed(0))


def test_filler_slots_get_the_same_noise_as_real_ones():
    """At eps 5 on d = 8, a released filler slot and a released real slot equal to the filler have the same
    distribution: the cosine to the filler is compared by a two-sample KS test (alpha = 1e-6, fixed seed)."""
    from scipy.stats import ks_2samp

    d, n = 8, 4000
    sp = SlotPrivatization(L2Laplace(5.0), k=1, pad_to=2)
    hidden = filler_slot(d).expand(n, 1, d).clone()  # one real slot per prompt, equal to the filler vector
    v, _ = sp.apply(hidden, torch.ones(n, 1), generator=torch.Generator().manual_seed(0))
    f = filler_slot(d)
    real, filler = (v[:, 0] @ f).numpy(), (v[:, 1] @ f).numpy()
    assert ks_2samp(real, filler).pvalue > 1e-6
    assert 0.2 < float((v[:, 1] @ f).mean()) < 0.95  # noised, not released as it is


@pytest.mark.parametrize(
    "bad, message",
    [
        (0, "pad_to must be an integer >= 1 or None, got 0"),
        (True, "pad_to must be an integer >= 1 or None, got True"),
        (2.0, "pad_to must be an integer >= 1 or None, got 2.0"),
    ],
)
def test_pad_to_is_validated(bad, message):
    with pytest.raises(ValueError, match=message):
        SlotPrivatization(L2Laplace(1.0), pad_to=bad)
    with pytest.raises(ValueError, match="pad_to needs normalize=True"):
        SlotPrivatization(L2Laplace(1.0), normalize=False, pad_to=3)


def test_padded_payload_round_trips_and_a_false_header_is_refused():
    sp = SlotPrivatization(L2Laplace(75.0), k=4, pad_to=3)
    h, mask = torch.randn(2, 8, 2), torch.ones(2, 8)
    mask[1, 2:] = 0
    v, m = sp.apply(h, mask, generator=torch.Generator().manual_seed(1))
    p = Payload(v, m, ENC, sp)
    q = Payload.from_bytes(p.to_bytes())
    assert q.privatization.pad_to == 3 and q.lengths == [3, 3] and q.header() == p.header()
    assert p.header()["privatization"]["pad_to"] == 3
    assert "pad_to" not in Payload(v, m, ENC, SlotPrivatization(L2Laplace(75.0), k=4)).header()["privatization"]
    with pytest.raises(PayloadError, match=r"padded to 4 slots, but the rows have \[3\] of 3"):
        Payload(v, m, ENC, SlotPrivatization(L2Laplace(75.0), k=4, pad_to=4))
    short = m.clone()
    short[1, 2] = False
    with pytest.raises(PayloadError, match="padded to 3 slots"):
        Payload(v * short.unsqueeze(-1), short, ENC, sp)


def test_cli_privatize_pad_to_and_inspect(tiny_encoder_dir, tmp_path):
    runner = CliRunner()
    out = tmp_path / "q.safetensors"
    r = runner.invoke(
        app,
        [
            "privatize",
            "one two three",
            "a longer second prompt with more words in it",
            "--epsilon",
            "75",
            "--k",
            "4",
            "--pad-to",
            "6",
            "--encoder",
            str(tiny_encoder_dir),
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    p = Payload.load(out)
    assert p.lengths == [6, 6] and p.privatization.pad_to == 6
    r = runner.invoke(app, ["inspect", str(out)])
    assert r.exit_code == 0 and "hidden: every prompt padded to 6 slots" in r.output and "eps = 900" in r.output
    too_long = runner.invoke(
        app,
        [
            "privatize",
            "a longer second prompt with more words in it",
            "--epsilon",
            "75",
            "--pad-to",
            "1",
            "--encoder",
            str(tiny_encoder_dir),
            "--out",
            str(tmp_path / "x.safetensors"),
        ],
    )
    assert (
        too_long.exit_code == 2
        and "more than pad_to=1" in too_long.output
        and not (tmp_path / "x.safetensors").exists()
    )
    bad = runner.invoke(app, ["privatize", "x", "--epsilon", "75", "--pad-to", "0", "--encoder", str(tiny_encoder_dir)])
    assert bad.exit_code == 2 and "--pad-to must be >= 1, got 0" in bad.output
    plain = tmp_path / "plain.safetensors"
    assert (
        runner.invoke(
            app, ["privatize", "one two", "--epsilon", "75", "--encoder", str(tiny_encoder_dir), "--out", str(plain)]
        ).exit_code
        == 0
    )
    assert "released: ceil(tokens / k) tells the length" in runner.invoke(app, ["inspect", str(plain)]).output


# ------------------------------------------------------------------------------------------------- PPFT + server
@pytest.fixture(scope="module")
def fixed_run(tmp_path_factory, tiny_encoder_dir):
    from textfree.ppft.model import TextFreeLM
    from textfree.ppft.testing import make_tiny_run

    run = make_tiny_run(tmp_path_factory.mktemp("fixed"), tiny_encoder_dir)
    lm = TextFreeLM.load(run)
    lm.server.config = lm.config.replace(fixed_slots=True, max_private_tokens=16)
    return lm.save(run)


def test_fixed_slots_client_pads_to_max_private_tokens_over_k(fixed_run):
    from textfree.ppft.model import TextFreeLM

    lm = TextFreeLM.load(fixed_run)
    assert lm.config.fixed_slots and lm.config.pad_to == 4  # ceil(16 / 4)
    payload = lm.privatizer(75.0).privatize(
        ["a", "a much longer private prompt that the client cuts at sixteen tokens"], seed=0
    )
    assert payload.lengths == [4, 4] and payload.privatization.pad_to == 4
    assert lm.privatizer(75.0, k=3).privatization.pad_to == 6  # ceil(16 / 3) for another k
    assert lm.ask(["a"], epsilon=75.0, seed=0, max_new_tokens=2)  # the server answers a padded payload
    with pytest.raises(ValueError, match="fixed_slots must be true or false, got 1"):
        lm.config.replace(fixed_slots=1)
    from textfree.ppft.train import Stage2Config

    with pytest.raises(ValueError, match="fixed_slots must be true, false or null, got 'yes'"):
        Stage2Config(init="x", out="y", fixed_slots="yes")


def test_server_card_asks_for_padding_and_refuses_unpadded_payloads(fixed_run, tiny_encoder_dir):
    from textfree.client import Client
    from textfree.encoders import ContextualEncoder
    from textfree.privatizer import Privatizer
    from textfree.server import ServerConfig, create_app
    from textfree.server.errors import ApiError
    from textfree.server.models import ModelRegistry
    from textfree.server.testing import serve_in_thread

    config = ServerConfig(models={"fixed": str(fixed_run)}, auth=False)
    registry = ModelRegistry.load(config)
    model = registry.models["fixed"]
    assert model.card["fixed_slots"] is True and model.card["max_slots"] == 4
    enc = ContextualEncoder.from_pretrained(tiny_encoder_dir)
    plain = Privatizer(enc, L2Laplace(75.0), 4).privatize(["short"], seed=0)
    with pytest.raises(ApiError, match="padded to 4 slots") as info:
        model.prepare(plain, None, config)
    assert info.value.status == 400
    model.prepare(Privatizer(enc, L2Laplace(75.0), 4, pad_to=4).privatize(["short"], seed=0), None, config)
    with serve_in_thread(create_app(config, registry=registry)) as url, Client(url, encoder=tiny_encoder_dir) as client:
        assert client.privatizer("fixed").privatization.pad_to == 4  # the remote client pads as the card says
        assert len(client.generate("short private text", model="fixed", seed=1, max_new_tokens=2).answers) == 1


# ------------------------------------------------------------------------------------------------- attackers
def _count_task(n_rows: int, seed: int):
    """Random unit slots whose *count* (2..7) decides the label: long (> 4 slots) or short; content carries nothing."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(2, 8, (n_rows,), generator=g)
    x = torch.nn.functional.normalize(torch.randn(n_rows, 7, 8, generator=g), dim=-1)
    mask = torch.arange(7).unsqueeze(0) < counts.unsqueeze(1)
    x = x * mask.unsqueeze(-1)
    return x, mask, [{"size": "long" if int(c) > 4 else "short"} for c in counts]


def test_count_reading_attacker_reads_the_count_and_padding_hides_it():
    """Noise-aware attackers on releases at eps 1 (d = 8: noise of norm ~8 on unit slots). Seeds fixed."""
    from textfree.heads.classifier import noisy_rows
    from textfree.mechanisms.transforms import l2_normalize

    mech = L2Laplace(1.0)

    def noise(rows, generator):
        return l2_normalize(mech.sample(rows.to(torch.float64), generator=generator)).to(torch.float32)

    x, mask, y = _count_task(600, 0)
    tx, tmask, ty = _count_task(300, 1)
    specs = build_specs(y, {"size": "categorical"})
    prior = score_attributes(specs, prior_predictions(specs, y, len(ty)), ty)["size_accuracy"]  # training majority

    def accuracy(count: bool, train, test) -> float:
        config = AttributeAttackConfig(pooling="mean", count=count, epochs=30, hidden=32)
        model = train_attribute_attacker(
            *train, y, specs, config, noise=noise, generator=torch.Generator().manual_seed(0)
        )
        released = noisy_rows(noise, *test, torch.Generator().manual_seed(2))
        return score_attributes(specs, predict_attributes(model, released, test[1]), ty)["size_accuracy"]

    assert accuracy(True, (x, mask), (tx, tmask)) == 1.0  # the count is released as it is
    padded, ptest = pad_slots(x, mask, 7), pad_slots(tx, tmask, 7)
    hidden = accuracy(True, padded, ptest)
    assert hidden < prior + 0.15, (hidden, prior)  # every row has 7 noisy slots: near the prior
    by_count = score_attributes(specs, length_predictions(specs, y, padded[1], ptest[1]), ty)["size_accuracy"]
    assert by_count == pytest.approx(prior)
    assert score_attributes(specs, length_predictions(specs, y, mask, tmask), ty)["size_accuracy"] == 1.0


def test_attacker_config_validates_count():
    with pytest.raises(ValueError, match="count must be true or false, got 'yes'"):
        AttributeAttackConfig(count="yes")
