"""The documentation site builds with `mkdocs build --strict` (the `docs` extra), API reference included.

Strict mode turns every warning into a failure: a page missing from disk, a broken link between pages
(README.md's `docs/...` links included, since the README is the home page), an anchor that does not
exist, or an API page whose module cannot be imported or parsed. Skipped where mkdocs is not installed
(`pip install -e '.[docs]'`).
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("mkdocs", reason="the docs site needs the docs extra: pip install -e '.[docs]'")
pytest.importorskip("mkdocstrings", reason="the API reference needs the docs extra: pip install -e '.[docs]'")

# The API reference pages and, for each, objects its rendered page must document (from the modules' source).
API = {
    "api/api": ["heterosim.api.run", "heterosim.api.prepare", "heterosim.api.simulate"],
    "api/pipeline": ["heterosim.pipeline", "heterosim.pipeline.run"],
    "api/scenario": ["heterosim.config.scenario.Scenario"],
    "api/netbackend": ["netbackend.base", "netbackend.registry"],
    "api/hscommon": ["hscommon.errors.UserError", "hscommon.strict.StrictModel"],
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"mkdocs build --strict failed:\n{(res.stdout + res.stderr)[-4000:]}"
    return out


def test_every_docs_page_is_in_the_site(site):
    """Each markdown page under docs/ (and README.md as the home page) becomes an HTML page."""
    pages = [p.relative_to(ROOT / "docs").with_suffix("") for p in (ROOT / "docs").rglob("*.md")
             if "_hooks" not in p.parts]
    assert pages
    for page in pages:
        assert (site / page / "index.html").is_file(), f"docs/{page}.md was not built"
    home = (site / "index.html").read_text(encoding="utf-8")
    first = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()
    assert first in home, "the home page is not README.md"
    # the README's links into docs/ point at the site's pages, not at docs/... paths that do not exist there
    assert not re.search(r'href="docs/', home), "README.md links left pointing at docs/ on the home page"


def test_api_reference_is_generated_from_docstrings(site):
    for page, objects in API.items():
        html = (site / page / "index.html").read_text(encoding="utf-8")
        for obj in objects:
            assert f'id="{obj}"' in html, f"{page}: no rendered entry for {obj}"
    # a docstring's own words reach the page (not just the signature)
    tree = ast.parse((ROOT / "heterosim" / "pipeline.py").read_text(encoding="utf-8"))
    run = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run")
    first_line = (ast.get_docstring(run) or "").strip().splitlines()[0].replace("`", "")
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", (site / "api/pipeline/index.html").read_text(encoding="utf-8")))
    assert first_line and first_line[:60] in text, first_line
