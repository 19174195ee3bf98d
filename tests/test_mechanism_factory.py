"""One mechanism factory: ``textfree privatize --mechanism gaussian --epsilon E``, a PPFT model's client at E and the
client library for a card naming the Gaussian at E add noise of one distribution (the same sigma and delta), and the
L2-Laplace at E costs what the Gaussian is calibrated to (2 x E per unit slot)."""

import pytest
from typer.testing import CliRunner

from textfree.cli import app
from textfree.client import Client
from textfree.mechanisms import Gaussian, L2Laplace, make_noise
from textfree.payload import Payload

EPSILONS = [2.0, 28.0]


def _cli_noise(tmp_path, encoder_dir, *args):
    out = tmp_path / "p.safetensors"
    result = CliRunner().invoke(
        app, ["privatize", "one two three four five", "--encoder", str(encoder_dir), "--out", str(out), *args]
    )
    assert result.exit_code == 0, result.output
    return Payload.load(out).privatization


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_the_cli_the_ppft_client_and_the_client_library_draw_one_distribution(
    epsilon, tiny_encoder_dir, tiny_lm, tmp_path
):
    cli = _cli_noise(tmp_path, tiny_encoder_dir, "--mechanism", "gaussian", "--epsilon", str(epsilon))
    ppft = tiny_lm.privatizer(epsilon, mechanism="gaussian", match="budget").privatization.noise
    card = {
        "task": "generate",
        "encoder_kind": "contextual",
        "encoder_dim": tiny_lm.encoder.dim,
        "k": 4,
        "mechanism": "gaussian",
        "noise_match": "budget",
        "max_slots": 64,
    }
    client = Client("http://127.0.0.1:9", encoder=str(tiny_encoder_dir))
    client._cards["m"] = card
    library = client.privatizer("m", epsilon=epsilon).privatization.noise
    factory = make_noise("gaussian", epsilon)
    assert isinstance(cli.noise, Gaussian)
    assert (cli.noise.sigma, cli.noise.delta) == (ppft.sigma, ppft.delta) == (library.sigma, library.delta)
    assert cli.noise.sigma == factory.sigma
    # the Gaussian's per-slot guarantee is L2-Laplace's at the same epsilon: 2 x epsilon on unit slots
    assert cli.slot_loss().epsilon == pytest.approx(2 * epsilon, rel=1e-6)
    laplace = _cli_noise(tmp_path, tiny_encoder_dir, "--epsilon", str(epsilon))
    assert isinstance(laplace.noise, L2Laplace) and laplace.slot_loss().epsilon == pytest.approx(2 * epsilon)


def test_sigma_overrides_the_factory_and_none_is_no_noise(tiny_encoder_dir, tmp_path):
    assert _cli_noise(tmp_path, tiny_encoder_dir, "--mechanism", "gaussian", "--sigma", "0.5").noise.sigma == 0.5
    assert make_noise("none", 28.0) is None and make_noise("gaussian", None) is None
