"""Release workflows, found by taskloom through the ``taskloom.workflows`` entry point."""

from typing import Literal

from pydantic import BaseModel, Field

from taskloom import NodeContext, Workflow


class BumpInput(BaseModel):
    """Compute the next version of a release."""

    version: str = Field(pattern=r"^\d+\.\d+\.\d+$", description="the current MAJOR.MINOR.PATCH")
    part: Literal["major", "minor", "patch"] = "patch"


bump_version = Workflow("bump_version", version="1", input=BumpInput)


@bump_version.node()
async def bump(ctx: NodeContext[BumpInput]) -> str:
    major, minor, patch = (int(part) for part in ctx.input.version.split("."))
    if ctx.input.part == "major":
        return f"{major + 1}.0.0"
    if ctx.input.part == "minor":
        return f"{major}.{minor + 1}.0"
    return f"{major}.{minor}.{patch + 1}"
