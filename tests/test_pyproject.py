"""pyproject.toml declares what the package imports: every third-party module imported anywhere under src/textfree
is a dependency or in an extra, the fast-moving ones are capped, the vLLM extra exists, and package data names only
files that exist."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (``rich>=13,<16`` -> ``rich``)."""
    return _normalise(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1))


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> dict[str, str]:
    """Normalised name -> requirement, over the dependencies and every extra."""
    out = {_name(r): r for r in PROJECT["dependencies"]}
    for extra in PROJECT["optional-dependencies"].values():
        out.update({_name(r): r for r in extra})
    return out


def _imported_modules() -> dict[str, str]:
    """Top-level third-party module -> one place that imports it (file:line), from every module under src/textfree."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "src" / "textfree").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("textfree", "__future__"):
                    found.setdefault(top, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_imported_package_is_declared():
    declared = _declared()
    dists = packages_distributions()
    missing = []
    for module, where in sorted(_imported_modules().items()):
        candidates = {_normalise(d) for d in dists.get(module, [])} or {_normalise(module)}
        if not candidates & set(declared):
            missing.append(f"{module} ({where}; distribution {sorted(candidates)})")
    assert not missing, "imported but not declared in pyproject.toml: " + ", ".join(missing)


def test_the_server_imports_are_in_the_server_extra():
    server = {_name(r) for r in PROJECT["optional-dependencies"]["server"]}
    assert {"fastapi", "starlette", "pydantic", "anyio", "uvicorn", "h11", "httpx", "prometheus-client"} <= server


def test_fast_moving_dependencies_are_capped():
    declared = _declared()
    for name in ("rich", "transformers", "torch", "fastapi", "prometheus-client"):
        assert "<" in declared[name], f"{declared[name]!r} has no upper bound"


def test_extras_name_vllm_and_the_dev_tools():
    extras = PROJECT["optional-dependencies"]
    assert "vllm" in {_name(r) for r in extras["vllm"]}
    dev = {_name(r) for r in extras["dev"]}
    assert {"hypothesis", "openapi-spec-validator", "pytest"} <= dev


def test_package_data_names_only_files_that_exist():
    data = PYPROJECT.get("tool", {}).get("setuptools", {}).get("package-data", {})
    for package, patterns in data.items():
        base = ROOT / "src" / package.replace(".", "/")
        for pattern in patterns:
            assert list(base.glob(pattern)), f"package data {package}: {pattern!r} matches no file"
