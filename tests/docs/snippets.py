"""Finding the Python snippets and the links of the docs pages (used by test_snippets.py).

A ```` ```python ```` block is executed by the tests unless the line just before its fence
(blank lines aside) is an HTML comment:

- ``<!-- not-tested: why -->``: not run (say why; keep these rare);
- ``<!-- continues -->``: run in the namespace the page's previous block left, so a
  tutorial can build one example over several blocks.
"""

import ast
import inspect
import re
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio

DOCS: Final = Path(__file__).resolve().parents[2] / "docs"
_FENCE: Final = re.compile(r"^```(\w*)\s*$")
_MARKER: Final = re.compile(r"^<!--\s*(not-tested:\s*\S.*|not-run:\s*\S.*|continues)\s*-->$")
_LINK: Final = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_EXTERNAL: Final = re.compile(r"^[a-z][a-z0-9+.-]*:")


@dataclass(frozen=True)
class Snippet:
    """One fenced Python block of a docs page."""

    page: Path
    line: int
    """The 1-based line of the block's first code line."""
    code: str
    marker: str | None
    """``continues``, ``not-tested: ...``, ``not-run: ...`` (command blocks) or ``None``."""

    @property
    def where(self) -> str:
        root = DOCS.parent
        page = self.page.relative_to(root) if self.page.is_relative_to(root) else self.page
        return f"{page}:{self.line}"

    @property
    def skipped(self) -> bool:
        return self.marker is not None and self.marker.startswith(("not-tested", "not-run"))


class SnippetError(Exception):
    """A snippet that failed: the message names its page and line, then the traceback."""


def run_snippets(page: Path) -> int:
    """Run *page*'s Python blocks in order (in the current directory); how many ran.

    Raises:
        SnippetError: a block failed, or continues nothing.
    """
    namespace: dict[str, Any] | None = None
    ran = 0
    for snippet in snippets(page):
        if snippet.skipped:
            continue
        if snippet.marker != "continues":
            namespace = {"__name__": "__docs__"}
        elif namespace is None:
            raise SnippetError(f"{snippet.where}: marked continues, but nothing ran before it")
        try:
            _run(snippet, namespace)
        except Exception as error:
            shown = "".join(traceback.format_exception(error)[-6:])
            raise SnippetError(f"{snippet.where}: the snippet fails:\n{shown}") from error
        ran += 1
    return ran


def _run(snippet: Snippet, namespace: dict[str, Any]) -> None:
    tree = ast.parse(snippet.code, filename=str(snippet.page))
    ast.increment_lineno(tree, snippet.line - 1)  # tracebacks show the page's line numbers
    code = compile(tree, str(snippet.page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:  # top-level await

        async def main() -> None:
            await eval(code, namespace)  # the docs' own code

        anyio.run(main, backend="asyncio")
    else:
        exec(code, namespace)  # noqa: S102  # the docs' own code


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
    return match.group(1).strip() if match else None


def anchors(page: Path) -> set[str]:
    """The ``#fragment`` of every heading of *page*, as GitHub makes them."""
    found: set[str] = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            numbered, count = slug, 1
            while numbered in found:
                numbered, count = f"{slug}-{count}", count + 1
            found.add(numbered)
    return found


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
