"""Workflows as MCP tools: name, title, description, schemas and task support."""

from collections.abc import Mapping, Sequence
from typing import Any

import mcp_types as types

from taskloom.engine.dag import Workflow


def tool_for(workflow: Workflow[Any]) -> types.Tool:
    """The tool that starts *workflow*: input schema from its input model, output
    schema when it has an output model, ``execution.taskSupport`` from the workflow."""
    output = workflow.output_model
    return types.Tool(
        name=workflow.name,
        title=workflow.title,
        description=workflow.description or None,
        input_schema=workflow.input_model.model_json_schema(),
        output_schema=output.model_json_schema(mode="serialization") if output else None,
        execution=types.ToolExecution(task_support=workflow.task_support),
    )


def list_tools(
    workflows: Mapping[str, Workflow[Any]], extra: Sequence[types.Tool] = ()
) -> types.ListToolsResult:
    """Every workflow's tool in registration order, then *extra* (one page: tool lists
    are short)."""
    tools = [tool_for(workflow) for workflow in workflows.values()]
    return types.ListToolsResult(tools=[*tools, *extra])
