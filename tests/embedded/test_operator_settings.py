"""``durable_tasks`` configures its workflows as ``taskloom serve --settings`` does: with
the operator's settings, for the process's exposure; refused settings stop the server's
lifespan at start, naming the workflow and the field."""

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from taskloom.bootstrap import durable_tasks
from taskloom.engine.dag import NodeContext, Workflow, exposure_of, settings_of
from taskloom.engine.errors import WorkflowDefinitionError
from tests.embedded.host import settings

pytestmark = pytest.mark.anyio


class Budget(BaseModel):
    """How much one call may spend: unset, 10 for a local process, 0 on a network."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    most: int = Field(default=None, validate_default=True)

    @field_validator("most", mode="before")
    @classmethod
    def _by_exposure(cls, most: object, info: ValidationInfo) -> object:
        if most is not None:
            return most
        return 10 if exposure_of(info) == "local" else 0


class Spend(BaseModel):
    amount: int

    @field_validator("amount")
    @classmethod
    def _within(cls, amount: int, info: ValidationInfo) -> int:
        most = settings_of(info, Budget).most
        if amount > most:
            raise ValueError(f"at most {most}")
        return amount


spend = Workflow("spend", version="1", input=Spend, settings=Budget)


@spend.node()
async def left(ctx: NodeContext[Spend]) -> int:
    assert isinstance(ctx.settings, Budget)
    return ctx.settings.most - ctx.input.amount


def server(database: Path, **changes: Any) -> MCPServer[None]:
    tasks = durable_tasks([spend], settings(database).model_copy(update=changes))
    return MCPServer("mine", extensions=[tasks], lifespan=tasks.lifespan)


async def call(mcp: MCPServer[None], amount: int) -> tuple[bool, str]:
    async with Client(mcp) as client:
        result = await client.call_tool("spend", {"amount": amount})
        return bool(result.is_error), result.content[0].text  # type: ignore[union-attr]


async def test_the_operators_settings_reach_validation_and_the_run(tmp_path: Path) -> None:
    configured = {"workflow_settings": {"spend": {"most": 5}}}
    assert await call(server(tmp_path / "t.db", **configured), 3) == (False, "2")
    refused, text = await call(server(tmp_path / "t.db", **configured), 6)
    assert refused
    assert "at most 5" in text


async def test_unset_settings_follow_the_processs_exposure(tmp_path: Path) -> None:
    assert await call(server(tmp_path / "t.db"), 7) == (False, "3")  # local: 10
    refused, text = await call(server(tmp_path / "n.db", exposure="network"), 1)
    assert refused
    assert "at most 0" in text


@pytest.mark.parametrize(
    ("workflow_settings", "message"),
    [
        ({"spend": {"most": "many"}}, "workflow 'spend': invalid settings: most:"),
        ({"spend": {"least": 1}}, "workflow 'spend': invalid settings: least: Extra inputs"),
        ({"other": {}}, "settings are given for 'other', which is not loaded"),
    ],
)
async def test_refused_settings_stop_the_lifespan_at_start(
    tmp_path: Path, workflow_settings: dict[str, Any], message: str
) -> None:
    mcp = server(tmp_path / "t.db", workflow_settings=workflow_settings)
    with pytest.raises(WorkflowDefinitionError, match=message):
        async with Client(mcp):
            pass
    assert not (tmp_path / "t.db").exists()  # refused before the database was opened
