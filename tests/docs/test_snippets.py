"""The docs' Python snippets run as written, and their links between pages resolve.

Each page's blocks run in order, each in a fresh namespace (or the previous block's, after
``<!-- continues -->``), in a temporary working directory; a block may use top-level
``await``. ``<!-- not-tested: why -->`` skips one block. See tests/docs/snippets.py.
"""

import json
import os
import sys
import tomllib
from pathlib import Path

import pytest

from taskloom.bootstrap import load_workflows
from taskloom.config import TaskloomSettings
from taskloom.engine.errors import WorkflowDefinitionError
from tests.docs.snippets import (
    DOCS,
    SnippetError,
    anchors,
    pages,
    relative_links,
    run_snippets,
    snippets,
)

PAGES_WITH_CODE = [page for page in pages() if snippets(page)]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda page: page.name)
def test_every_python_snippet_runs(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # `taskloom` (the console script) as a user has it: next to this interpreter
    bin_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    try:
        run_snippets(page)
    except SnippetError as error:
        pytest.fail(str(error), pytrace=False)


def test_snippets_are_found_and_exceptions_are_rare() -> None:
    every = [snippet for page in pages() for snippet in snippets(page)]
    skipped = [snippet for snippet in every if snippet.skipped]
    assert len(every) >= 10
    assert len(skipped) <= 3, [s.where for s in skipped]


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(DOCS)))
def test_links_between_pages_resolve(page: Path) -> None:
    broken = []
    for line, target in relative_links(page):
        path, _, fragment = target.partition("#")
        linked = (page.parent / path) if path else page
        if not linked.exists():
            broken.append(f"{page.relative_to(DOCS.parent)}:{line}: {target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{page.relative_to(DOCS.parent)}:{line}: {target}: no such heading")
    assert not broken, "broken links:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(DOCS)))
def test_every_json_block_parses(page: Path) -> None:
    for snippet in snippets(page, "json"):
        try:
            json.loads(snippet.code)
        except json.JSONDecodeError as error:
            pytest.fail(f"{snippet.where}: not JSON: {error}", pytrace=False)


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(DOCS)))
def test_every_toml_block_parses_and_settings_files_are_accepted(page: Path) -> None:
    """Every ```toml block parses; one that mentions ``--settings`` is an operator settings
    file that an HTTP server's workflows take (its directories need not exist)."""
    for snippet in snippets(page, "toml"):
        try:
            values = tomllib.loads(snippet.code)
            if "--settings" not in snippet.code:
                continue
            load_workflows(
                TaskloomSettings(
                    load_entry_points=False, exposure="network", workflow_settings=values
                )
            )
        except (tomllib.TOMLDecodeError, WorkflowDefinitionError) as error:
            pytest.fail(f"{snippet.where}: not operator settings: {error}", pytrace=False)
