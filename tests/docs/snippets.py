"""Finding the Python snippets and the links of the docs pages (used by test_snippets.py).

A ```` ```python ```` block is executed by the tests unless the line just before its fence
(blank lines aside) is an HTML comment:

- ``<!-- not-tested: why -->``: not run (say why; keep these rare);
- ``<!-- continues -->``: run in the namespace the page's previous block left, so a
  tutorial can build one example over several blocks.
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

DOCS: Final = Path(__file__).resolve().parents[2] / "docs"
_FENCE: Final = re.compile(r"^```(\w*)\s*$")
_MARKER: Final = re.compile(r"^<!--\s*(not-tested:\s*\S.*|continues)\s*-->$")
_LINK: Final = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_EXTERNAL: Final = re.compile(r"^[a-z][a-z0-9+.-]*:|^#")


@dataclass(frozen=True)
class Snippet:
    """One fenced Python block of a docs page."""

    page: Path
    line: int
    """The 1-based line of the block's first code line."""
    code: str
    marker: str | None
    """``continues``, ``not-tested: ...`` or ``None``."""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(DOCS.parent)}:{self.line}"


def pages() -> list[Path]:
    """Every Markdown page under docs/, ADRs included."""
    return sorted(DOCS.rglob("*.md"))


def snippets(page: Path, language: str = "python") -> list[Snippet]:
    """The ```` ```python ```` (or other *language*) blocks of *page*, in order."""
    found: list[Snippet] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if fence.group(1) == language:
            found.append(
                Snippet(page, index + 2, "\n".join(lines[index + 1 : end]), _marker(lines, index))
            )
        index = end + 1
    return found


def _marker(lines: list[str], fence: int) -> str | None:
    before = fence - 1
    while before >= 0 and not lines[before].strip():
        before -= 1
    if before < 0:
        return None
    match = _MARKER.match(lines[before].strip())
    return match.group(1) if match else None


def relative_links(page: Path) -> list[tuple[int, str]]:
    """``(line, target)`` for every Markdown link of *page* to a relative path, outside
    code blocks and inline code."""
    links: list[tuple[int, str]] = []
    in_code = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        targets = _LINK.findall(re.sub(r"`[^`]*`", "", line))
        links.extend((number, t) for t in targets if not _EXTERNAL.match(t))
    return links
