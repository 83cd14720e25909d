"""The snippet runner itself: markers, namespaces, top-level await, failures' places."""

from pathlib import Path

import pytest

from tests.docs.snippets import SnippetError, anchors, run_snippets, snippets

PAGE = """# A page

## Some heading

```python
import anyio
value = 1
```

<!-- continues -->
```python
await anyio.sleep(0)
value += 1
assert value == 2
```

<!-- not-tested: shows an error on purpose -->
```python
raise RuntimeError("never runs")
```

```python
assert "value" not in globals()  # a fresh namespace
```
"""


def test_markers_namespaces_and_await(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    found = snippets(page)
    assert [snippet.marker for snippet in found] == [
        None,
        "continues",
        "not-tested: shows an error on purpose",
        None,
    ]
    assert [snippet.line for snippet in found] == [6, 12, 19, 23]
    assert run_snippets(page) == 3
    assert anchors(page) == {"a-page", "some-heading"}


def test_a_failure_names_the_page_and_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("Text.\n\n```python\nx = 1\nassert x == 2\n```\n")
    with pytest.raises(SnippetError, match=r"page.md:4: the snippet fails") as raised:
        run_snippets(page)
    assert 'page.md", line 5' in str(raised.value)  # the traceback shows the page's line
