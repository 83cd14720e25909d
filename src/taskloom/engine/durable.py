"""A durable plain function: one ``async def`` as a one-node workflow (ADR 0025).

Most durable jobs are one step. :func:`durable` spares them a DAG: the function's
parameters become the workflow's input model (unknown keys refused, ADR 0022), its
docstring the tool's description, its return annotation the output; a parameter
annotated ``NodeContext`` (optional) receives the running node's context, for progress,
questions and cancellation checks.
"""

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Union, get_args, get_origin, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, create_model

from taskloom.engine.dag import NodeContext, TaskSupport, Workflow
from taskloom.engine.errors import WorkflowDefinitionError
from taskloom.engine.retry import RetryPolicy

AsyncFunction = Callable[..., Awaitable[Any]]


@overload
def durable(function: AsyncFunction, /) -> Workflow[BaseModel]: ...


@overload
def durable(
    *,
    name: str | None = None,
    version: str = "1",
    title: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    task_support: TaskSupport = "optional",
) -> Callable[[AsyncFunction], Workflow[BaseModel]]: ...


def durable(
    function: AsyncFunction | None = None,
    /,
    *,
    name: str | None = None,
    version: str = "1",
    title: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    task_support: TaskSupport = "optional",
) -> Workflow[BaseModel] | Callable[[AsyncFunction], Workflow[BaseModel]]:
    """Make an ``async def`` a workflow of one node, named after it (or *name*): as
    ``@durable`` or ``@durable(...)``.

    Its parameters (all but the ``NodeContext`` one) are the tool's arguments, with their
    annotations and defaults; *retry* and *timeout* (seconds, per attempt) are the node's.
    Bump *version* when a change would make a stored run resume wrongly.
    """

    def build(function: AsyncFunction) -> Workflow[BaseModel]:
        where = f"durable function {function.__qualname__!r}"
        if not inspect.iscoroutinefunction(function):
            raise WorkflowDefinitionError(f"{where}: must be an async function")
        try:
            hints = get_type_hints(function)
        except (NameError, TypeError) as error:
            raise WorkflowDefinitionError(
                f"{where}: cannot read its annotations: {error}"
            ) from None
        context_name, fields = _parameters(function, hints, where)
        workflow_name = name or function.__name__
        model = create_model(
            _model_name(workflow_name), __config__=ConfigDict(extra="forbid"), **fields
        )
        returns = hints.get("return")
        if returns is None:
            raise WorkflowDefinitionError(f"{where}: annotate the return type")
        output = returns if isinstance(returns, type) and issubclass(returns, BaseModel) else None
        workflow: Workflow[BaseModel] = Workflow(
            workflow_name,
            version=version,
            input=model,
            output=output,
            title=title,
            description=inspect.cleandoc(function.__doc__ or ""),
            task_support=task_support,
        )

        async def run(ctx: NodeContext[BaseModel]) -> Any:
            arguments = {field: getattr(ctx.input, field) for field in fields}
            if context_name is not None:
                arguments[context_name] = ctx
            return await function(**arguments)

        run.__annotations__ = {"ctx": NodeContext[BaseModel], "return": returns}
        workflow.node(name=workflow_name, retry=retry, timeout=timeout)(run)
        return workflow

    return build if function is None else build(function)


def _parameters(
    function: AsyncFunction, hints: dict[str, Any], where: str
) -> tuple[str | None, dict[str, Any]]:
    """The name of *function*'s ``NodeContext`` parameter (if any) and the input fields
    (``name: (annotation, default)``) of the others."""
    context_name: str | None = None
    fields: dict[str, Any] = {}
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise WorkflowDefinitionError(f"{where}: *args and **kwargs cannot be tool arguments")
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise WorkflowDefinitionError(f"{where}: {parameter.name!r} is positional-only")
        if parameter.name not in hints:
            raise WorkflowDefinitionError(f"{where}: annotate the parameter {parameter.name!r}")
        annotation = hints[parameter.name]
        if _is_context(annotation):
            context_name = parameter.name
            continue
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (annotation, default)
    return context_name, fields


def _is_context(annotation: Any) -> bool:
    """``NodeContext``, ``NodeContext[X]``, or either ``| None``."""
    if annotation is NodeContext or get_origin(annotation) is NodeContext:
        return True
    if get_origin(annotation) is Union or type(annotation).__name__ == "UnionType":
        return any(_is_context(arg) for arg in get_args(annotation) if arg is not type(None))
    return False


def _model_name(workflow_name: str) -> str:
    """``slow_report`` -> ``SlowReportInput`` (the input schema's title)."""
    return "".join(part.capitalize() for part in workflow_name.split("_")) + "Input"
