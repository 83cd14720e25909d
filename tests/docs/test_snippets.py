"""The docs' Python snippets run as written, and their links between pages resolve.

Each page's blocks run in order, each in a fresh namespace (or the previous block's, after
``<!-- continues -->``), in a temporary working directory; a block may use top-level
``await``. ``<!-- not-tested: why -->`` skips one block. See tests/docs/snippets.py.
"""

import ast
import inspect
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.docs.snippets import DOCS, Snippet, pages, relative_links, snippets

PAGES_WITH_CODE = [page for page in pages() if snippets(page)]


def _run(snippet: Snippet, namespace: dict[str, Any]) -> None:
    tree = ast.parse(snippet.code, filename=str(snippet.page))
    ast.increment_lineno(tree, snippet.line - 1)
    code = compile(tree, str(snippet.page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:

        async def main() -> None:
            await eval(code, namespace)  # the docs' own code

        anyio.run(main, backend="asyncio")
    else:
        exec(code, namespace)  # noqa: S102  # the docs' own code


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda page: page.name)
def test_every_python_snippet_runs(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # `taskloom` (the console script) as a user has it: next to this interpreter
    bin_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    namespace: dict[str, Any] | None = None
    for snippet in snippets(page):
        if snippet.marker is not None and snippet.marker.startswith("not-tested"):
            continue
        if snippet.marker == "continues":
            assert namespace is not None, f"{snippet.where}: nothing before it to continue"
        else:
            namespace = {"__name__": "__docs__"}
        try:
            _run(snippet, namespace)
        except BaseException as error:  # report any failure with its place
            if isinstance(error, KeyboardInterrupt):
                raise
            shown = "".join(traceback.format_exception(error)[-6:])
            pytest.fail(f"{snippet.where}: the snippet fails:\n{shown}", pytrace=False)


def test_snippets_are_found_and_exceptions_are_rare() -> None:
    every = [snippet for page in pages() for snippet in snippets(page)]
    skipped = [s for s in every if s.marker and s.marker.startswith("not-tested")]
    assert len(every) >= 10
    assert len(skipped) <= 3, [s.where for s in skipped]


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(DOCS)))
def test_links_between_pages_resolve(page: Path) -> None:
    broken = [
        f"{page.relative_to(DOCS.parent)}:{line}: {target}"
        for line, target in relative_links(page)
        if not (page.parent / target.split("#", 1)[0]).exists()
    ]
    assert not broken, "links to missing files:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(DOCS)))
def test_every_json_block_parses(page: Path) -> None:
    for snippet in snippets(page, "json"):
        try:
            json.loads(snippet.code)
        except json.JSONDecodeError as error:
            pytest.fail(f"{snippet.where}: not JSON: {error}", pytrace=False)
