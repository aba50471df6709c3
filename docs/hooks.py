"""MkDocs hooks of the site (``mkdocs.yml`` names this file): the README as a page of the site.

The README, the repository's front page, links into docs/ (``docs/text.md#...``) and the pages link back to it
(``../README.md``). The site serves it as the page ``readme.md`` with its links made relative to docs/, and a
page's ``../README.md`` points there, so the same Markdown works in the repository and on the site, and
``mkdocs build --strict`` checks the README's links too.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.pages import Page

README = Path(__file__).resolve().parent.parent / "README.md"
PAGE = "readme.md"  # not README.md: MkDocs would make that the index page, as index.md

# a Markdown link to a path: [text](path), the path neither a URL nor an anchor of the same page
_LINK = re.compile(r"\[([^\]]+)\]\((?![a-z]+:|#)([^)\s]+)\)")
# a page's link to the README above docs/: one ../ more than the page's depth in docs/
_TO_README = re.compile(r"\]\(\.\./((?:\.\./)*)README\.md")


def _relink(match: re.Match[str]) -> str:
    text, target = match.groups()
    if target.startswith("docs/"):
        return f"[{text}]({target.removeprefix('docs/')})"
    # a file of the repository outside docs/ (a config, a script): not on the site, so named instead of linked
    return f"{text} (`{target}`)"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    text = _LINK.sub(_relink, README.read_text(encoding="utf-8"))
    files.append(File.generated(config, PAGE, content=text, inclusion=InclusionLevel.NOT_IN_NAV))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    return _TO_README.sub(rf"](\1{PAGE}", markdown)
