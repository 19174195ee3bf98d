"""The docs site (mkdocs.yml): the strict build passes (every page in the nav, no broken link or anchor), the
configuration turns each kind of broken link into a failure, and the README's links into docs/ resolve as GitHub
resolves them (files, and heading anchors spelled as GitHub spells them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

mkdocs_missing = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import mkdocs, material"], capture_output=True).returncode != 0,
    reason='mkdocs and its theme are not installed (pip install -e ".[docs]"; CI installs them with ".[dev]")',
)


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},
    )


@mkdocs_missing
def test_strict_build_passes(tmp_path):
    start = time.monotonic()
    res = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert res.returncode == 0, res.stderr[-3000:]
    assert time.monotonic() - start < 30
    assert (tmp_path / "site" / "index.html").is_file() and (tmp_path / "site" / "results" / "index.html").is_file()


@mkdocs_missing
def test_strict_build_fails_on_orphans_missing_pages_anchors_and_absolute_links(tmp_path):
    # the project's configuration (INHERIT), on a small docs folder of its own
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(
        "# Home\n\n## A heading: with `code`\n\n[ok](#a-heading-with-code) [page](nope.md) "
        "[anchor](other.md#no-such-heading) [absolute](/index.md)\n"
    )
    (docs / "other.md").write_text("# Other\n")
    (docs / "orphan.md").write_text("# Orphan\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {docs}\nnav:\n  - index.md\n  - other.md\n", encoding="utf-8"
    )
    res = _build(config, tmp_path / "site")
    assert res.returncode != 0
    for fragment in ("orphan.md", "'nope.md'", "'#no-such-heading'", "absolute link '/index.md'"):
        assert fragment in res.stderr, fragment
    assert "#a-heading-with-code" not in res.stderr  # GitHub's spelling of a heading's anchor is the site's


def _github_anchors(page: Path) -> set[str]:
    """Heading anchors as GitHub spells them: lower case, punctuation dropped, each space a hyphen (fences skipped)."""
    anchors, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            anchors.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return anchors


def test_readme_links_into_docs_resolve():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[^)\s]+)\)", readme)
    assert links, "the README links into docs/"
    for link in links:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.is_file(), link
        if anchor:
            assert anchor in _github_anchors(target), link


def test_every_docs_page_is_in_the_nav():
    # the strict build says so too; this one runs where mkdocs is not installed
    nav = set(re.findall(r":\s*([\w./-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages - nav == set(), "pages missing from the nav of mkdocs.yml"
    assert nav - pages == set(), "nav entries without a page"
