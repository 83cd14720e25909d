"""A headless Chromium for the dashboard's browser tests: Debian's ``chromium`` driven by
Playwright (never ``playwright install``), or a skip that says what is missing.

Screenshots go to a temporary folder, or to ``docs/images/`` when ``TASKLOOM_SCREENSHOTS``
is set (``TASKLOOM_SCREENSHOTS=1 pytest tests/e2e/test_dashboard_browser.py``).
"""

import importlib.util
import os
from pathlib import Path
from typing import Final

import pytest

CHROMIUM: Final = Path(os.environ.get("TASKLOOM_CHROMIUM", "/usr/bin/chromium"))
DOCS_IMAGES: Final = Path(__file__).resolve().parents[2] / "docs" / "images"


def require_browser() -> None:
    """Skip the test, saying why, unless Playwright and Chromium are both here."""
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("Playwright is not installed (pip install -e '.[dev]')")
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (scripts/ensure-chromium.sh installs it)")


def screenshot_folder(tmp_path: Path) -> Path:
    """Where this run's screenshots go."""
    folder = DOCS_IMAGES if os.environ.get("TASKLOOM_SCREENSHOTS") else tmp_path / "shots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
