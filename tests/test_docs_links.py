"""Every relative link of the README and of docs/ leads somewhere: the file exists and, when the
link names a section (``page.md#section``), the page has a heading of that name, as GitHub makes
anchors of headings. A clone must stand alone: a page moved or a heading renamed without its
links is found here, not by a reader."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces made ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@functools.cache
def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (code blocks left out), the second of two equal
    headings ``-1`` as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        name = anchor(heading)
        found.add(f"{name}-{seen[name]}" if name in seen else name)
        seen[name] = seen.get(name, 0) + 1
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for link in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", link):  # https:, mailto:, ...
            continue
        path, _, section = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif section and target.suffix == ".md" and section not in anchors(target):
            broken.append(f"{link}: no heading with that anchor in {target.name}")
    return broken


def test_anchors_are_githubs():
    assert anchor("How it works: one storage interface, a working copy per process") == \
        "how-it-works-one-storage-interface-a-working-copy-per-process"
    assert anchor("One big cluster across many tasks (issue #53)") == "one-big-cluster-across-many-tasks-issue-53"
    assert anchor("`--quick`, run of 2026-11-22 12:03-12:25 UTC") == "--quick-run-of-2026-11-22-1203-1225-utc"


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](#nothing) [file](missing.md)\n"
                    "```\n# not a heading\n[in code](nowhere.md)\n```\n")
    assert broken_links(page.resolve()) == [
        "#nothing: no heading with that anchor in page.md", "missing.md: no such file"]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_somewhere(page):
    assert broken_links(page.resolve()) == []
