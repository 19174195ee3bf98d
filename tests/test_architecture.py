"""The package picture holds: no import cycle between top-level packages of ``src/textfree``, the attack suite and the
server import no system's internals (PPFT, RAPT, SnD), and the client's maths import no model or server code.

Imports are read with ``ast`` from every module, including imports inside functions (a lazy import is still a
dependency); relative imports are resolved. A top-level module (``textfree/cli.py``) counts as a package of its own.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
SYSTEMS = {"ppft", "rapt", "snd"}
#: What may never import a system (they are reached through registries instead).
SYSTEM_FREE = {"attacks", "server", "training", "lm", "heads", "results", "metrics", "data"}
#: The client's maths and wire: no model training, no language model, no server, no system.
CLIENT_MATHS = {"mechanisms", "payload", "privatizer", "ledger", "encoders"}
NOT_FOR_CLIENT = {"training", "lm", "heads", "server", "experiments", "attacks"} | SYSTEMS


def _module(path: Path) -> str:
    root = next(p for p in path.parents if p.name == "textfree").parent
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, int]]:
    """(absolute module, line) of every textfree import in ``path``."""
    module = _module(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found.append((target, node.lineno))
            # `from textfree import ppft` imports the package ppft (a name that is a module or package)
            found += [
                (f"{target}.{alias.name}", node.lineno)
                for alias in node.names
                if target == "textfree" and _is_module(path, alias.name)
            ]
    return [(name, line) for name, line in found if name == "textfree" or name.startswith("textfree.")]


def _is_module(path: Path, name: str) -> bool:
    """Whether ``textfree.<name>`` is a module or package, seen from a file under some ``.../textfree/``."""
    root = next(p for p in path.parents if p.name == "textfree")
    return (root / name).is_dir() or (root / f"{name}.py").is_file()


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "textfree"


def package_edges(src: Path = SRC) -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> where ("file:line"), between different top-level packages."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted((src / "textfree").rglob("*.py")):
        here = _top(_module(path))
        for target, line in _imports(path):
            there = _top(target)
            if there != here:
                edges[(here, there)].append(f"{path.relative_to(src)}:{line}")
    return edges


def cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _describe(component: list[str], edges) -> str:
    inside = [(a, b) for (a, b) in edges if a in component and b in component]
    return "; ".join(f"{a} -> {b} ({', '.join(edges[(a, b)][:3])})" for a, b in sorted(inside))


def test_the_cycle_finder_finds_a_cycle_and_only_one():
    edges = {("a", "b"): ["x"], ("b", "c"): ["x"], ("c", "a"): ["x"], ("c", "d"): ["x"], ("e", "d"): ["x"]}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({("a", "b"): ["x"], ("b", "c"): ["x"]}) == []


def test_the_reader_sees_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "textfree"
    (pkg / "server").mkdir(parents=True)
    (pkg / "ppft").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "server" / "__init__.py").write_text("def f():\n    from ..ppft import model\n")
    (pkg / "ppft" / "__init__.py").write_text("from textfree.server import x\n")
    edges = package_edges(tmp_path)
    assert set(edges) == {("server", "ppft"), ("ppft", "server")}
    assert cycles(edges) == [["ppft", "server"]]


def test_no_import_cycle_between_top_level_packages():
    edges = package_edges()
    found = cycles(edges)
    assert not found, "import cycles between packages: " + " | ".join(_describe(c, edges) for c in found)


@pytest.mark.parametrize("package", sorted(SYSTEM_FREE))
def test_shared_layers_attacks_and_server_import_no_system(package):
    edges = package_edges()
    bad = {b: edges[(a, b)] for (a, b) in edges if a == package and b in SYSTEMS}
    assert not bad, f"{package} imports a system's internals: {bad}"


@pytest.mark.parametrize("package", sorted(CLIENT_MATHS))
def test_the_client_maths_import_no_model_or_server_code(package):
    edges = package_edges()
    bad = {b: edges[(a, b)] for (a, b) in edges if a == package and b in NOT_FOR_CLIENT}
    assert not bad, f"{package} (the client's maths and wire) imports {bad}"


#: Modules that write a directory of files under a temporary name and rename it into place (their own atomicity),
#: or that write no saved artefact (a subprocess's log in a test helper).
OWN_ATOMICITY = {"textfree/atomic.py", "textfree/training/checkpoint.py", "textfree/server/testing.py"}


def _plain_writes(path: Path) -> list[str]:
    """Calls that write a file without the atomic helpers: ``.write_text``/``.write_bytes``, safetensors'
    ``save_file``, matplotlib's ``.savefig`` and ``open`` for writing (appending a log line is allowed)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in ("write_text", "write_bytes", "save_file", "savefig"):
            found.append(f"{name} at line {node.lineno}")
        elif name == "open" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
            if any(m in str(node.args[1].value) for m in "wx+"):
                found.append(f"open(..., {node.args[1].value!r}) at line {node.lineno}")
    return found


def test_every_save_goes_through_the_atomic_helpers():
    bad = {}
    for path in sorted((SRC / "textfree").rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel not in OWN_ATOMICITY and (writes := _plain_writes(path)):
            bad[rel] = writes
    assert not bad, f"plain (non-atomic) writes; use textfree.atomic: {bad}"


def test_the_write_reader_sees_plain_writes(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f(p, fig):\n    p.write_text('x')\n    fig.savefig(p)\n    open(p, 'a').write('log')\n")
    assert _plain_writes(path) == ["write_text at line 2", "savefig at line 3"]
