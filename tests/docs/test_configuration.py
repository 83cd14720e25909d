"""docs/configuration.md is what the settings models and the setting table generate, and
its flags exist."""

import contextlib
import io
import re
from pathlib import Path

import pytest
from scripts.docs_config import FLAGS, REGENERATE, render

from taskloom.cli import main

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_committed_page_is_generated_from_the_models() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        f"docs/configuration.md is out of date with the settings models; run: {REGENERATE}"
    )


def _help(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main([*argv, "--help"])
    return out.getvalue()


def test_every_flag_and_variable_it_names_is_in_the_command_help() -> None:
    helps = "".join(_help(*command) for command in (["serve"], ["worker"], ["run"]))
    named = {
        word for text in FLAGS.values() for word in re.findall(r"--[a-z-]+|TASKLOOM_\w+", text)
    }
    assert named
    missing = sorted(word for word in named if word not in helps)
    assert not missing, f"docs_config.FLAGS names options the CLI does not have: {missing}"
