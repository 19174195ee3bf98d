"""The served-system registry: a registered system's models are listed and served without editing the server's
core, an unknown system is a clear error, and nothing under textfree/server imports a system's internals."""

import ast
from pathlib import Path

import pytest
import torch

from textfree.payload import FORMAT_VERSION
from textfree.server import ServerConfig, create_app
from textfree.server.models import ModelRegistry, Prepared, check_common, trimmed
from textfree.server.registry import (
    ServedSystem,
    UnknownSystemError,
    available_systems,
    get_system,
    register_system,
    unregister_system,
)

SERVER_DIR = Path(__file__).resolve().parents[1] / "src" / "textfree" / "server"
SYSTEM_PACKAGES = ("textfree.ppft", "textfree.rapt", "textfree.snd")


class EchoModel:
    """A minimal generate handler: answers each row with its number of slots."""

    task = "generate"

    def __init__(self, model_id: str, source: str):
        self.id = model_id
        self.card = {
            "id": model_id,
            "object": "model",
            "task": "generate",
            "route": "/v1/generate",
            "payload_format_version": FORMAT_VERSION,
            "payload_kind": "token",
            "encoder_id": "echo",
            "encoder_sha256": None,
            "encoder_dim": 4,
            "encoder_kind": "embedding_table",
            "k": 1,
            "normalize": False,
            "renormalize": False,
            "mechanism": "l2_laplace",
            "max_slots": 8,
            "source": Path(source).name,
            "adapters": [],
        }

    def prepare(self, payload, public, config) -> Prepared:
        check_common(payload, self.card, config)
        vectors, mask = trimmed(payload)
        return Prepared(vectors, mask, None)

    def run(self, key, items):
        return [([f"{int(n)} slots" for n in it.mask.sum(dim=1)], it.rows) for it in items]


@pytest.fixture
def echo_system():
    system = register_system(
        ServedSystem(name="echo", task="generate", payload_kind="token", load=lambda mid, src, cfg: EchoModel(mid, src))
    )
    yield system
    unregister_system("echo")


def test_a_registered_system_is_listed_and_served(echo_system, tmp_path):
    from fastapi.testclient import TestClient

    from textfree.mechanisms.slots import SlotPrivatization
    from textfree.payload import EncoderInfo, Payload

    assert "echo" in available_systems() and get_system("echo") is echo_system
    config = ServerConfig(models={"e": str(tmp_path)}, systems={"e": "echo"}, auth=False)
    registry = ModelRegistry.load(config)
    assert registry.systems["e"] is echo_system and registry.cards()[0]["source"] == tmp_path.name
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    payload = Payload(
        vectors=torch.randn(2, 3, 4) * mask.unsqueeze(-1),
        mask=mask,
        kind="token",
        encoder=EncoderInfo(id="echo", kind="embedding_table", dim=4, sha256=None),
        privatization=SlotPrivatization(None, k=1, normalize=False, renormalize=False),
    )
    with TestClient(create_app(config, registry=registry)) as c:
        cards = c.get("/v1/models").json()["data"]
        assert [card["id"] for card in cards] == ["e"]
        r = c.post(
            "/v1/generate?model=e", content=payload.to_bytes(), headers={"content-type": "application/octet-stream"}
        )
        assert r.status_code == 200, r.text
        assert r.json()["answers"] == ["3 slots", "1 slots"]


def test_an_unknown_system_is_a_clear_error(tmp_path):
    with pytest.raises(UnknownSystemError, match=r"no served system 'nope' is registered \(registered: .*ppft"):
        get_system("nope")
    config = ServerConfig(models={"m": str(tmp_path)}, systems={"m": "nope"}, auth=False)
    with pytest.raises(ValueError, match=r"model 'm'.*no served system 'nope'"):
        ModelRegistry.load(config)


def test_a_system_name_is_taken_once(echo_system):
    other = ServedSystem(name="echo", task="generate", payload_kind="token", load=lambda *a: None)
    with pytest.raises(ValueError, match="'echo' is registered already"):
        register_system(other)
    with pytest.raises(ValueError, match="task must be one of"):
        ServedSystem(name="bad", task="translate", payload_kind="token", load=lambda *a: None)


def _imported_modules(path: Path) -> list[str]:
    """Every module an ``import`` names in ``path`` (relative imports resolved against textfree.server)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ["textfree", "server"][: max(0, 2 - (node.level - 1))] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found += [module] + [f"{module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("textfree."):
            found.append(node.value)  # a module path string (importlib.import_module) counts too
    return found


def test_the_server_imports_no_system_internals():
    files = sorted(SERVER_DIR.glob("*.py"))
    assert files
    bad = [
        f"{path.name}: {name}"
        for path in files
        for name in _imported_modules(path)
        if any(name == pkg or name.startswith(pkg + ".") for pkg in SYSTEM_PACKAGES)
    ]
    assert not bad, bad


def test_installed_systems_are_found_through_their_entry_points_without_importing_them():
    """A fresh interpreter that imports only the server finds PPFT: pyproject.toml declares it in the
    ``textfree.systems`` entry-point group (the server's code never names it)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from textfree.server.registry import get_system\n"
        "assert 'textfree.ppft.service' not in sys.modules\n"
        "print(get_system('ppft').name, 'textfree.ppft.service' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ppft", "True"]
