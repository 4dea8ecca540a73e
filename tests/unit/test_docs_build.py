"""The documentation site builds with ``mkdocs build --strict`` (what ``make docs`` runs): every
page is in the nav, links between pages resolve and the API reference renders from the
docstrings. And the check can fail: a broken link between pages, or a new page nobody put in
the nav, stops the build."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# a check of the source tree, the same on every Python and encoder: `make test` runs it once
pytestmark = [pytest.mark.static, pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None,
    reason="mkdocs / mkdocstrings are not installed (pip install -e '.[test]')",
)]


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(root / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False,
    )


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("docs") / "site"
    result = build(REPO, site)
    assert result.returncode == 0, result.stdout + result.stderr
    return site


def test_the_site_builds_strictly(built_site: Path) -> None:
    site = built_site
    for page in sorted((REPO / "docs").glob("*.md")):
        name = "index.html" if page.stem == "index" else f"{page.stem}/index.html"
        assert (site / name).is_file(), page.name
    errors = (site / "api/errors/index.html").read_text(encoding="utf-8")
    assert 'id="aiokprod.errors.KafkaTimeoutError"' in errors
    # the docstrings are Markdown: reStructuredText's "::" before a literal block is shown as
    # is (the error tree is an indented code block without it)
    for page in sorted(site.glob("api/*/index.html")):
        assert "<p>::</p>" not in page.read_text(encoding="utf-8"), page
    assert "NotLeaderOrFollowerError" in errors
    assert 'id="aiokprod.hooks.Serializer"' in (site / "api/hooks/index.html").read_text(
        encoding="utf-8")
    # a repository file a page links to (docs/performance.md -> ../benchmarks/results/...) is
    # copied in, so the link works on the site as it does in the repository
    assert (site / "repo/benchmarks/results/kip1269_window/index.html").is_file()


def test_mermaid_diagrams_are_drawn_by_the_script_the_site_ships(built_site: Path) -> None:
    # Without superfences' custom fence a ```mermaid block is shown as code; without the
    # script in the site, Material fetches Mermaid from a CDN, and offline the diagram is
    # its source text again
    script = built_site / "assets/javascripts/mermaid.min.js"
    assert script.stat().st_size > 1_000_000
    pages = [page for page in sorted((REPO / "docs").glob("*.md"))
             if "```mermaid" in page.read_text(encoding="utf-8")]
    assert {p.name for p in pages} >= {"transactions.md", "idempotence.md"}
    for page in pages:
        html = (built_site / page.stem / "index.html").read_text(encoding="utf-8")
        assert html.count('<pre class="mermaid">') == \
            page.read_text(encoding="utf-8").count("```mermaid"), page.name
        assert "assets/javascripts/mermaid.min.js" in html, page.name
        assert "language-mermaid" not in html, page.name
        # a ';' ends a Mermaid statement: in a label it splits the diagram into stray states
        for block in page.read_text(encoding="utf-8").split("```mermaid")[1:]:
            assert ";" not in block.split("```", 1)[0], page.name


def test_a_broken_link_or_a_page_left_out_of_the_nav_fails_the_build(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
    shutil.copytree(REPO / "docs", root / "docs")
    (root / "tools").mkdir()
    shutil.copy(REPO / "tools/mkdocs_hooks.py", root / "tools/mkdocs_hooks.py")
    shutil.copytree(REPO / "benchmarks/results", root / "benchmarks/results")
    (root / "aiokprod").symlink_to(REPO / "aiokprod")
    page = root / "docs/memory.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nSee [gone](no-such-page.md).\n",
                    encoding="utf-8")
    (root / "docs/orphan.md").write_text("# A page nobody added to the nav\n", encoding="utf-8")
    result = build(root, tmp_path / "site")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "no-such-page.md" in output
    assert "orphan.md" in output
