"""MkDocs hooks (``hooks:`` in mkdocs.yml): repository files that docs pages link to.

Pages in ``docs/`` link to files elsewhere in the repository (``../benchmarks/results/...``) so
that the links work when ``docs/`` is read on its own, in a clone or on a forge. The site has
only ``docs/`` in it, so ``mkdocs build --strict`` would call such links broken. These hooks copy
each linked file into the site under ``repo/`` and point the links at the copies; a link to a
file that does not exist is left alone, so ``--strict`` still reports it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.pages import Page

# a Markdown link or image target that climbs out of the page's directory
_LINK = re.compile(r"(\]\()(\.\./[^)\s#]+)")
_PREFIX = "repo"


def _repo_path(config: MkDocsConfig, page_uri: str, target: str) -> str | None:
    """The repository-relative path of ``target`` if it leaves docs/ and names a file."""
    repo = Path(config.config_file_path).resolve().parent
    docs = Path(config.docs_dir).resolve()
    page_dir = posixpath.dirname(page_uri)
    path = (docs / page_dir / target).resolve()
    if path.is_relative_to(docs) or not path.is_relative_to(repo) or not path.is_file():
        return None
    return path.relative_to(repo).as_posix()


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for page_file in list(files.documentation_pages()):
        if page_file.abs_src_path is None:
            continue
        text = Path(page_file.abs_src_path).read_text(encoding="utf-8")
        for match in _LINK.finditer(text):
            rel = _repo_path(config, page_file.src_uri, match.group(2))
            uri = f"{_PREFIX}/{rel}"
            if rel is not None and files.get_file_from_path(uri) is None:
                repo = Path(config.config_file_path).resolve().parent
                # not in the nav on purpose: the page that links to it is
                files.append(File.generated(config, uri, abs_src_path=str(repo / rel),
                                            inclusion=InclusionLevel.NOT_IN_NAV))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    page_dir = posixpath.dirname(page.file.src_uri) or "."

    def relink(match: re.Match[str]) -> str:
        rel = _repo_path(config, page.file.src_uri, match.group(2))
        if rel is None:
            return match.group(0)
        return match.group(1) + posixpath.relpath(f"{_PREFIX}/{rel}", page_dir)

    return _LINK.sub(relink, markdown)
