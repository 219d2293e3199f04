"""MkDocs hook: the repository's README.md is the site's home page.

The README is the manual a newcomer reads first; the site shows the same text instead of a copy
that could drift. Its links into ``docs/`` (``docs/benchmarks.md``) are rewritten to the site's
pages (``benchmarks.md``), so ``mkdocs build --strict`` checks them like any other link.
"""
from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
DOCS_LINK = re.compile(r"\]\(docs/")


def on_files(files, config):
    """Add README.md as index.md (the home page), read from the repository root."""
    files.append(File.generated(config, "index.md", content=(ROOT / "README.md").read_text(encoding="utf-8")))
    return files


def on_page_markdown(markdown, page, config, files):
    """On the home page, point the README's ``docs/X.md`` links at the site's ``X.md``."""
    if page.file.src_uri == "index.md":
        return DOCS_LINK.sub("](", markdown)
    return markdown
