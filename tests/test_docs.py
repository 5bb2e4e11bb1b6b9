"""The documentation: the site builds in strict mode (a broken link, a missing anchor, a page left out of the
navigation or a reference page the code no longer matches fails it), and the README's links into it hold.

The build is the one `make docs` runs (the Makefile's recipe), into a temporary folder; the venv this test runs in
is taken as installed (`-o` the bootstrap's stamp: the test never reinstalls it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.helpers import REPO

README_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_the_docs_build_in_strict_mode(tmp_path):
    venv = Path(sys.prefix)
    site = tmp_path / "site"
    result = subprocess.run(
        ["make", "-s", "-o", f"{venv}/.installed", "docs", f"VENV={venv}", f"DOCS_DIR={site}"],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"},
    )
    output = result.stderr + result.stdout
    assert result.returncode == 0, f"`make docs` failed (exit {result.returncode}):\n{output}"
    assert "WARNING" not in output, f"`make docs` warned:\n{output}"
    for page in ("index.html", "reference/cli.html", "reference/configuration.html", "reference/jobs-yaml.html"):
        assert (site / page).is_file(), f"{page} was not built:\n{output}"
    cli = (site / "reference" / "cli.html").read_text()
    assert 'id="lakehouse-checkpoint-full-refresh"' in cli  # a generated page holds what the code declares
    assert "LAKEHOUSE_ROOT" in (site / "reference" / "configuration.html").read_text()


def test_every_readme_link_into_the_docs_names_a_page_that_exists():
    readme = (REPO / "README.md").read_text()
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    pages = set(nav_pages(nav))
    links = [link for link in README_LINK.findall(readme) if link.startswith("docs/")]
    assert links, "the README links to no docs page"
    for link in links:
        path, _, anchor = link.partition("#")
        target = REPO / path
        assert target.is_file(), f"README.md links to {link}, which does not exist"
        assert path.removeprefix("docs/") in pages, f"README.md links to {link}, which is not in mkdocs.yml's nav"
        if anchor:
            text = target.read_text()
            assert f"{{#{anchor}}}" in text or f'id="{anchor}"' in text, \
                f"README.md links to {link}: {path} declares no anchor {anchor!r}"


def nav_pages(nav: object) -> list[str]:
    """Every page of mkdocs.yml's nav (a list of {title: page or [sections]})."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return []
