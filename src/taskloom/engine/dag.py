"""The public DAG API: a workflow is a named, versioned DAG of async nodes grouped in phases.

```python
class AuditInput(BaseModel):
    path: str

audit = Workflow("audit", version="1", input=AuditInput)

@audit.node(phase="list")
async def list_files(ctx: NodeContext[AuditInput]) -> list[str]:
    return sorted(os.listdir(ctx.input.path))

@audit.node(phase="report", deps=[list_files], retry=RetryPolicy(max_attempts=3))
async def report(ctx: NodeContext[AuditInput]) -> int:
    return len(ctx.output(list_files))
```

A definition is checked as it is built and again by :meth:`Workflow.validate`: unknown
dependencies, duplicate names, cycles and outputs that cannot be stored as JSON raise
:class:`WorkflowDefinitionError` naming the node.

A workflow may declare operator **settings** (``Workflow(..., settings=Model)``): the
process configures them once (:meth:`Workflow.configure`), nodes read them as
``ctx.settings``, and the input model's validators see them through
:func:`settings_of`, so a call that the settings forbid is refused before a task exists.

Blocking or CPU-bound code goes through ``ctx.run_blocking`` (a worker thread that calls
:func:`check_cancelled`) or ``ctx.run_in_process`` (killed on a cancel), never straight on
the event loop: see :mod:`taskloom.engine.blocking`.

A workflow may declare **questions asked before its task exists**
(``Workflow(..., asks=[Question("key", "message", Model)])``): a 2026-07-28 client answers
them in the ``tools/call`` rounds (MRTR) before the task is created; otherwise the task
asks them first, before any node runs. Nodes read the answers with ``ctx.answer(question)``.
"""

import copy
import graphlib
import inspect
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import (
    Any,
    Final,
    Generic,
    Literal,
    Protocol,
    TypeVar,
    TypeVarTuple,
    cast,
    get_args,
    get_origin,
    get_type_hints,
    overload,
)

from pydantic import (
    BaseModel,
    ConfigDict,
    JsonValue,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
)
from pydantic.errors import PydanticSchemaGenerationError, PydanticUserError

from taskloom.engine import blocking
from taskloom.engine.blocking import check_cancelled as check_cancelled  # noqa: PLC0414 (re-exported)
from taskloom.engine.errors import WorkflowDefinitionError
from taskloom.engine.fanout import ItemFailurePolicy, MapResult
from taskloom.engine.retry import RetryPolicy
from taskloom.engine.shape import RunShape

InputT = TypeVar("InputT", bound=BaseModel)
OutputT = TypeVar("OutputT")
T = TypeVar("T")
ItemT = TypeVar("ItemT")
Args = TypeVarTuple("Args")
AnswerT = TypeVar("AnswerT", bound=BaseModel)
SettingsT = TypeVar("SettingsT", bound=BaseModel)
ChildInputT = TypeVar("ChildInputT", bound=BaseModel)

_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")
TaskSupport = Literal["forbidden", "optional", "required"]
ExtraInputs = Literal["forbid", "ignore", "allow"]
"""What a call's unknown argument keys do: refused (the default), dropped, or kept."""
Exposure = Literal["local", "network"]
"""Who can call a process's workflows: ``local`` (stdio, the CLI, a worker: the user who
started it) or ``network`` (an HTTP server: anyone holding a token)."""
_SETTINGS_CONTEXT: Final = "taskloom_settings"
_EXPOSURE_CONTEXT: Final = "taskloom_exposure"
_MAX_QUESTION_KEY: Final = 64


def settings_of(info: ValidationInfo, model: type[SettingsT]) -> SettingsT:
    """In a validator of a workflow's input model: the operator's settings of the workflow.

    taskloom validates every call's arguments with them (at submit and again before the
    run starts); anywhere else, e.g. a bare ``model_validate``, this is *model*'s defaults.
    """
    context = info.context
    found = context.get(_SETTINGS_CONTEXT) if isinstance(context, dict) else None
    return found if isinstance(found, model) else model()


def exposure_of(info: ValidationInfo) -> Exposure:
    """In a validator of a workflow's settings model: who can call the workflow.

    Settings defaults may depend on it: what a local user may do by default is not what
    anyone on the network may do. Outside :meth:`Workflow.configure` it is ``local``.
    """
    context = info.context
    found = context.get(_EXPOSURE_CONTEXT) if isinstance(context, dict) else None
    return "network" if found == "network" else "local"


class DependencyFailedError(Exception):
    """A node read the output of a dependency that failed (allowed only with ``may_fail``)."""

    def __init__(self, node: str) -> None:
        super().__init__(f"dependency {node!r} failed and has no output")
        self.node = node


@dataclass(frozen=True)
class Question(Generic[AnswerT]):
    """A question a workflow asks before its task exists: ``Workflow(..., asks=[...])``.

    *key* names it on the wire and in ``ctx.answer``; *answer* is the pydantic model of a
    valid answer (a flat form, as elicitation allows); *message* is shown to the person.
    """

    key: str
    message: str
    answer: type[AnswerT]

    @property
    def requested_schema(self) -> dict[str, JsonValue]:
        """The JSON schema an answer must fit."""
        schema: dict[str, JsonValue] = self.answer.model_json_schema()
        return schema

    def parse(self, content: Any) -> JsonValue:
        """The JSON form of a valid answer.

        Raises:
            ValueError: *content* does not fit the answer model (the message says where).
        """
        try:
            answer = self.answer.model_validate(content)
        except ValidationError as error:
            problem = error.errors()[0]
            where = ".".join(str(part) for part in problem["loc"]) or "answer"
            raise ValueError(f"answer to {self.key!r}: {where}: {problem['msg']}") from None
        dumped: JsonValue = answer.model_dump(mode="json")
        return dumped


class NodeRuntime(Protocol):
    """What the runner lends a node through its context (implemented by the runner)."""

    async def report(self, completed: float, total: float | None, message: str | None) -> None:
        """Record the node's own progress."""
        ...

    async def ask(self, message: str, schema: dict[str, JsonValue]) -> JsonValue:
        """The stored answer to this question, or end the attempt to wait for one."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once *seconds* from the first call have passed, or end the attempt to
        wait for that time."""
        ...

    async def child(self, workflow: "Workflow[Any]", arguments: dict[str, JsonValue]) -> JsonValue:
        """The result of the child task this call starts (once), or end the attempt to
        wait for its end."""
        ...


class NodeContext(Generic[InputT]):
    """What a running node knows and can do."""

    def __init__(
        self,
        *,
        task_id: str,
        node: "Node[Any]",
        attempt: int,
        input: InputT,
        outputs: Mapping[str, JsonValue],
        failed: frozenset[str],
        runtime: NodeRuntime,
        settings: BaseModel | None = None,
        answers: Mapping[str, JsonValue] | None = None,
    ) -> None:
        self.task_id = task_id
        self.node = node.name
        self.phase = node.phase
        self.attempt = attempt
        """This attempt's number, from 1."""
        self.input = input
        self.settings = settings
        """The workflow's operator settings (an instance of its ``settings`` model), if any."""
        self._definition = node
        self._outputs = outputs
        self._failed = failed
        self._runtime = runtime
        self._answers: Mapping[str, JsonValue] = answers if answers is not None else {}

    def output(self, node: "Node[OutputT]") -> OutputT:
        """The stored output of *node*, one of this node's dependencies, as its type.

        Raises:
            DependencyFailedError: *node* was allowed to fail and did.
            KeyError: *node* is not a dependency of this node.
        """
        if node.name not in self._definition.dep_names:
            raise KeyError(f"{node.name!r} is not a dependency of {self.node!r}")
        if node.name in self._failed:
            raise DependencyFailedError(node.name)
        return node.output_adapter.validator.validate_python(  # type: ignore[no-any-return]
            self._outputs[node.name]
        )  # the adapter's validator, as its validate_python calls it (ADR 0058)

    def answer(self, question: Question[AnswerT]) -> AnswerT:
        """The answer to one of the workflow's questions (``Workflow(..., asks=[...])``).

        Every such question is answered before the first node runs.

        Raises:
            KeyError: *question* is not one of this workflow's.
        """
        if question.key not in self._answers:
            raise KeyError(f"{question.key!r} is not a question of this workflow")
        return question.answer.model_validate(self._answers[question.key])

    @property
    def failed_dependencies(self) -> frozenset[str]:
        """Dependencies that were allowed to fail and did."""
        return self._failed

    async def report(
        self, completed: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Report this node's progress, e.g. ``report(12, 40, "files")``."""
        await self._runtime.report(completed, total, message)

    @overload
    async def ask(self, message: str, schema: type[AnswerT]) -> AnswerT: ...

    @overload
    async def ask(self, message: str, schema: dict[str, JsonValue]) -> JsonValue: ...

    async def ask(self, message: str, schema: type[AnswerT] | dict[str, JsonValue]) -> Any:
        """Ask the requestor a question and wait for an answer that matches *schema*.

        The wait is durable and holds nothing (ADR 0021): the attempt ends, the task shows
        ``input_required``, and the run is handed back (no lease, no worker slot) until
        the answer is stored. Then the node **runs again from its start**, and this call
        returns the stored answer at once: the code before it runs again, so keep it
        idempotent (at least once, like any node body). Questions are keyed by their
        order in the node (``<node>#<n>``), so the node must ask them in the same order.
        Any number of worker crashes during the wait cost nothing.
        """
        if isinstance(schema, dict):
            return await self._runtime.ask(message, schema)
        answer = await self._runtime.ask(message, schema.model_json_schema())
        return schema.model_validate(answer)

    async def sleep(self, seconds: float) -> None:
        """Wait *seconds*, durably and holding nothing (ADR 0021).

        The first call stores when the sleep ends and hands the run back; the run is
        claimed again at that time (to within the workers' ``poll_s``) and the node
        **runs again from its start**, this call returning at once. The code before it
        runs again, so keep it idempotent. Sleeps are keyed by their order in the node
        (``<node>#sleep<n>``). A zero or negative sleep returns at once.
        """
        await self._runtime.sleep(seconds)

    @overload
    async def child(
        self,
        workflow: "Workflow[ChildInputT]",
        arguments: ChildInputT | Mapping[str, Any],
        *,
        output: type[AnswerT],
    ) -> AnswerT: ...

    @overload
    async def child(
        self, workflow: "Workflow[ChildInputT]", arguments: ChildInputT | Mapping[str, Any]
    ) -> Any: ...

    async def child(
        self,
        workflow: "Workflow[ChildInputT]",
        arguments: ChildInputT | Mapping[str, Any],
        *,
        output: type[BaseModel] | None = None,
    ) -> Any:
        """Run *workflow* as a child task and return its result (ADR 0026).

        The child is a task of its own (same owner and retention, ``parent_id`` this
        task), visible in ``tasks/list`` and the CLI, run by any worker that has
        *workflow* registered. It is started once per call: calls are keyed by their
        order in the node (``<node>#child<n>``), so the node must make them in the same
        order, with the same arguments. While it runs, this node waits durably and holds
        nothing (the run parks, as for ``ctx.ask``); once it ends the node **runs again
        from its start** and this call returns at once. A cancel of this task cancels
        the child. The result is validated with *output*, else with the workflow's
        ``output`` model if it has one (an instance is returned), else it is the JSON.

        Raises:
            ChildFailedError: the child failed or was cancelled (a node failure, which
                the node's retry policy sees: a retry starts a new child).
            InvalidRequestError: *arguments* do not fit *workflow*'s input.
        """
        if isinstance(arguments, BaseModel):
            dumped: dict[str, JsonValue] = arguments.model_dump(mode="json")
        else:
            dumped = dict(arguments)
        result = await self._runtime.child(workflow, dumped)
        model = output or workflow.output_model
        return result if model is None else model.model_validate(result)

    async def run_blocking(self, function: Callable[[*Args], T], *args: *Args) -> T:
        """``function(*args)`` in a worker thread, for blocking or CPU-bound code.

        The node waits for the thread, so *function* must call :func:`check_cancelled`
        every few milliseconds of work: it raises once this node is cancelled or timed
        out, and the node ends with no thread left running (see
        :mod:`taskloom.engine.blocking`).
        """
        return await blocking.run_blocking(function, *args)

    async def run_in_process(self, function: Callable[[*Args], T], *args: *Args) -> T:
        """``function(*args)`` in a worker process, killed at once on a cancel: for code
        that cannot call :func:`check_cancelled`. Function, arguments and result must be
        picklable."""
        return await blocking.run_in_process(function, *args)


class MapContext(NodeContext[InputT], Generic[InputT, ItemT]):
    """The context of one item of a map node (``Workflow.map``): a :class:`NodeContext`
    with the item and its position in the list."""

    def __init__(self, *, item: ItemT, index: int, **context: Any) -> None:
        super().__init__(**context)
        self.item = item
        """This item, typed as an element of the list the map runs over."""
        self.index = index
        """Its position in that list, from 0 (its node run is ``<map>[<index>]``)."""


NodeFunction = Callable[[NodeContext[Any]], Awaitable[Any]]


@dataclass(frozen=True, eq=False)
class Node(Generic[OutputT]):
    """One step of a workflow: an async function, its dependencies and its policies."""

    name: str
    function: NodeFunction
    deps: tuple[str, ...]
    phase: str
    retry: RetryPolicy
    timeout_s: float | None
    may_fail: bool
    output_adapter: TypeAdapter[OutputT] = field(repr=False)

    @cached_property
    def dep_names(self) -> frozenset[str]:
        """:attr:`deps` as a set (a sink of 1,000 nodes looks each of their outputs up)."""
        return frozenset(self.deps)

    def dump_output(self, value: Any) -> JsonValue:
        """The JSON form of an output this node returned.

        Raises:
            ValueError: the value does not match the node's return annotation.
        """
        return _dumped(self.output_adapter, value, self.name)


def _dumped(adapter: TypeAdapter[Any], value: Any, node: str) -> JsonValue:
    """*value* checked against *adapter* and dumped as JSON, for node *node*."""
    try:
        # the adapter's own validator and serializer, which its validate_python and
        # dump_python call with these defaults: two Python calls fewer a node (ADR 0058)
        valid = adapter.validator.validate_python(value)
        dumped: JsonValue = adapter.serializer.to_python(valid, mode="json")
    except ValidationError as error:
        raise ValueError(f"node {node!r} returned a value unlike its annotation") from error
    return dumped


@dataclass(frozen=True, eq=False)
class MapNode(Node[OutputT]):
    """A node that runs its function once per item of *over*'s output (ADR 0024).

    ``output_adapter`` is the map's (a list, or a :class:`MapResult`); ``item_adapter``
    is one item's output, the function's return annotation.
    """

    over: str
    concurrency: int | None
    """At most this many of its items run at once (and never more than the run allows)."""
    on_item_failure: ItemFailurePolicy
    item_adapter: TypeAdapter[Any] = field(repr=False)

    def dump_item_output(self, value: Any) -> JsonValue:
        """The JSON form of an output one item returned.

        Raises:
            ValueError: the value does not match the function's return annotation.
        """
        return _dumped(self.item_adapter, value, self.name)


class Workflow(Generic[InputT]):
    """A named, versioned DAG of nodes that taskloom runs as one durable task."""

    def __init__(
        self,
        name: str,
        *,
        version: str,
        input: type[InputT],
        output: type[BaseModel] | None = None,
        title: str | None = None,
        description: str = "",
        phases: Sequence[str] | None = None,
        result: str | None = None,
        task_support: TaskSupport = "optional",
        max_concurrency: int | None = None,
        settings: type[BaseModel] | None = None,
        asks: Sequence[Question[Any]] = (),
        extra_inputs: ExtraInputs | None = None,
        join_repeats: bool = True,
    ) -> None:
        """*description* is the tool's: when empty, the input model's own docstring, else
        a generated line (never a docstring the model inherits). *extra_inputs* says what
        a call's unknown argument keys do; by default whatever the input model's
        ``model_config["extra"]`` says if it sets it, else ``"forbid"`` (ADR 0022).
        *join_repeats*: a plain call that repeats an unfinished one (same caller, same
        arguments) follows that call's task rather than starting another (ADR 0040);
        ``False`` for jobs meant to run twice."""
        if not _NAME.match(name):
            raise WorkflowDefinitionError(f"workflow name {name!r} is not a valid tool name")
        if not version:
            raise WorkflowDefinitionError(f"workflow {name!r} needs a version")
        if not (isinstance(input, type) and issubclass(input, BaseModel)):
            raise WorkflowDefinitionError(f"workflow {name!r}: input must be a pydantic model")
        if extra_inputs not in (None, "forbid", "ignore", "allow"):
            raise WorkflowDefinitionError(
                f"workflow {name!r}: extra_inputs is 'forbid', 'ignore' or 'allow', "
                f"not {extra_inputs!r}"
            )
        if max_concurrency is not None and max_concurrency < 1:
            raise WorkflowDefinitionError(f"workflow {name!r}: max_concurrency must be >= 1")
        if settings is not None and not (
            isinstance(settings, type) and issubclass(settings, BaseModel)
        ):
            raise WorkflowDefinitionError(f"workflow {name!r}: settings must be a pydantic model")
        self.name = name
        self.version = version
        self.input_model = input
        self.output_model = output
        self.title = title
        self.description = description or _own_doc(input) or f"Run the {name} workflow."
        self.extra_inputs: ExtraInputs = extra_inputs or input.model_config.get("extra") or "forbid"
        self._call_model = _with_extra(input, self.extra_inputs)
        self.task_support: TaskSupport = task_support
        self.max_concurrency = max_concurrency
        self.join_repeats = join_repeats
        self.settings_model = settings
        self.asks: tuple[Question[Any], ...] = _checked_questions(name, asks)
        """Questions asked before the task exists, in order (their keys are unique)."""
        self._settings = self._validated_settings({}) if settings is not None else None
        """Its defaults until :meth:`configure`: they must describe a safe, unconfigured
        workflow (e.g. one that refuses every call), so every field needs a default."""
        self._declared_phases = tuple(phases) if phases is not None else None
        self._result = result
        self._nodes: dict[str, Node[Any]] = {}
        self._adapters: dict[tuple[Any, Any], TypeAdapter[Any]] = {}
        """Its nodes' output adapters by output type (and its arguments in order): nodes
        of one type share one."""
        self._order: tuple[str, ...] | None = None
        self._phases: tuple[str, ...] | None = None
        self._dependents: Mapping[str, tuple[str, ...]] | None = None
        self._shape: RunShape | None = None

    def node(
        self,
        *,
        name: str | None = None,
        deps: Sequence["Node[Any] | str"] = (),
        phase: str = "main",
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        may_fail: bool = False,
    ) -> Callable[[Callable[[NodeContext[InputT]], Awaitable[OutputT]]], Node[OutputT]]:
        """Decorate an async function ``(ctx) -> output`` to make it a node."""

        def register(
            function: Callable[[NodeContext[InputT]], Awaitable[OutputT]],
        ) -> Node[OutputT]:
            node_name = name or function.__name__
            where = f"workflow {self.name!r}, node {node_name!r}"
            dep_names = self._checked(node_name, function, deps, phase, timeout)
            node: Node[OutputT] = Node(
                name=node_name,
                function=function,
                deps=dep_names,
                phase=phase,
                retry=retry or RetryPolicy(),
                timeout_s=timeout,
                may_fail=may_fail,
                output_adapter=self._adapter(_return_type(function, where), where),
            )
            self._add(node)
            return node

        return register

    @overload
    def map(
        self,
        *,
        over: Node[list[ItemT]],
        name: str | None = None,
        deps: Sequence["Node[Any] | str"] = (),
        phase: str = "main",
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        concurrency: int | None = None,
        on_item_failure: Literal["fail"] = "fail",
    ) -> Callable[
        [Callable[[MapContext[InputT, ItemT]], Awaitable[OutputT]]], Node[list[OutputT]]
    ]: ...

    @overload
    def map(
        self,
        *,
        over: Node[list[ItemT]],
        name: str | None = None,
        deps: Sequence["Node[Any] | str"] = (),
        phase: str = "main",
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        concurrency: int | None = None,
        on_item_failure: Literal["continue"],
    ) -> Callable[
        [Callable[[MapContext[InputT, ItemT]], Awaitable[OutputT]]], Node[MapResult[OutputT]]
    ]: ...

    @overload
    def map(
        self,
        *,
        over: Node[list[ItemT]],
        name: str | None = None,
        deps: Sequence["Node[Any] | str"] = (),
        phase: str = "main",
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        concurrency: int | None = None,
        on_item_failure: ItemFailurePolicy,
    ) -> Callable[[Callable[[MapContext[InputT, ItemT]], Awaitable[OutputT]]], Node[Any]]: ...

    def map(
        self,
        *,
        over: Node[list[ItemT]],
        name: str | None = None,
        deps: Sequence["Node[Any] | str"] = (),
        phase: str = "main",
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        concurrency: int | None = None,
        on_item_failure: ItemFailurePolicy = "fail",
    ) -> Callable[[Callable[[MapContext[InputT, ItemT]], Awaitable[OutputT]]], Node[Any]]:
        """Decorate an async function ``(ctx) -> output`` to run it once per item of the
        list *over* returns at run time (``ctx.item``, ``ctx.index``), as a dynamic
        fan-out (ADR 0024).

        Each item is a checkpointed node run (``<name>[<index>]``) with *retry* and
        *timeout* of its own; at most *concurrency* items run at once. Downstream,
        ``ctx.output(node)`` is the items' outputs in item order; with
        ``on_item_failure="continue"`` a failed item does not fail the run and the
        output is a :class:`MapResult` that reports it.
        """

        def register(
            function: Callable[[MapContext[InputT, ItemT]], Awaitable[OutputT]],
        ) -> Node[Any]:
            node_name = name or function.__name__
            where = f"workflow {self.name!r}, node {node_name!r}"
            if not isinstance(over, Node):
                raise WorkflowDefinitionError(f"{where}: over must be a node of the workflow")
            if concurrency is not None and concurrency < 1:
                raise WorkflowDefinitionError(f"{where}: concurrency must be >= 1")
            if on_item_failure not in ("fail", "continue"):
                raise WorkflowDefinitionError(
                    f"{where}: on_item_failure must be 'fail' or 'continue'"
                )
            dep_names = self._checked(node_name, function, [over, *deps], phase, timeout)
            item_type = _return_type(function, where)
            aggregate: Any = list[item_type] if on_item_failure == "fail" else MapResult[item_type]  # type: ignore[valid-type]
            node: MapNode[Any] = MapNode(
                name=node_name,
                function=cast(NodeFunction, function),
                deps=dep_names,
                phase=phase,
                retry=retry or RetryPolicy(),
                timeout_s=timeout,
                may_fail=False,
                output_adapter=self._adapter(aggregate, where),
                over=over.name,
                concurrency=concurrency,
                on_item_failure=on_item_failure,
                item_adapter=self._adapter(item_type, where),
            )
            self._add(node)
            return node

        return register

    def _adapter(self, output_type: Any, where: str) -> TypeAdapter[Any]:
        """The adapter of *output_type* for node *where*: the one an earlier node of the
        same type, written in the same order, got (``command_matrix``'s 16 slots share
        one: building and checking an adapter costs a third of a millisecond), else a new
        one (an unhashable type gets its own).

        Raises:
            WorkflowDefinitionError: the type cannot be stored as JSON.
        """
        try:
            key = (output_type, _in_order(output_type))
            adapter = self._adapters.get(key)
        except TypeError:  # an annotation that cannot be a key
            return _adapter(output_type, where)
        if adapter is None:
            adapter = self._adapters[key] = _adapter(output_type, where)
        return adapter

    def _checked(
        self,
        node_name: str,
        function: Callable[..., Any],
        deps: Sequence["Node[Any] | str"],
        phase: str,
        timeout: float | None,
    ) -> tuple[str, ...]:
        """The dependency names of a node about to be added, once its definition is sound."""
        where = f"workflow {self.name!r}, node {node_name!r}"
        if not _NAME.match(node_name):
            raise WorkflowDefinitionError(f"{where}: not a valid node name")
        if node_name in self._nodes:
            raise WorkflowDefinitionError(f"{where}: a node with this name already exists")
        if not inspect.iscoroutinefunction(function):
            raise WorkflowDefinitionError(f"{where}: must be an async function")
        if timeout is not None and timeout <= 0:
            raise WorkflowDefinitionError(f"{where}: timeout must be positive")
        if self._declared_phases is not None and phase not in self._declared_phases:
            raise WorkflowDefinitionError(f"{where}: unknown phase {phase!r}")
        dep_names = tuple(dep if isinstance(dep, str) else dep.name for dep in deps)
        if len(set(dep_names)) != len(dep_names):
            raise WorkflowDefinitionError(f"{where}: a dependency is listed twice")
        return dep_names

    def _add(self, node: Node[Any]) -> None:
        self._nodes[node.name] = node
        self._order = self._phases = self._dependents = self._shape = None

    @property
    def nodes(self) -> Mapping[str, Node[Any]]:
        """Every node by name, in definition order."""
        return self._nodes

    def graph(self) -> dict[str, tuple[str, ...]]:
        """Each node's dependencies, the shape ``graphlib.TopologicalSorter`` takes."""
        return {name: node.deps for name, node in self._nodes.items()}

    def order(self) -> tuple[str, ...]:
        """The nodes in a dependency order (from ``graphlib``).

        Raises:
            graphlib.CycleError: the nodes form a cycle (``validate`` reports it clearly).
        """
        if self._order is None:
            self._order = dependency_order(self.graph())
        return self._order

    @property
    def phases(self) -> tuple[str, ...]:
        """Phase names in running order: as declared, or by first appearance in order()."""
        if self._declared_phases is not None:
            return self._declared_phases
        if self._phases is None:  # each run's progress reads them: found once
            seen: dict[str, None] = {}
            for name in self.order():
                seen.setdefault(self._nodes[name].phase, None)
            self._phases = tuple(seen)
        return self._phases

    def shape(self) -> RunShape:
        """What a run of this workflow looks like, to store with its task: built once (a
        frozen model, so every run shares it) until a node is added."""
        if self._shape is None:
            nodes = self._nodes
            self._shape = RunShape.model_validate(  # one call validates every node's
                {
                    "phases": self.phases,
                    "nodes": [
                        {
                            "name": name,
                            "phase": nodes[name].phase,
                            "deps": nodes[name].deps,
                            "is_map": isinstance(nodes[name], MapNode),
                        }
                        for name in self.order()
                    ],
                }
            )
        return self._shape

    @property
    def result_node(self) -> str | None:
        """The node whose output is the workflow's result (``None``: all sinks, by name)."""
        if self._result is not None:
            return self._result
        sinks = self.sinks()
        return sinks[0] if len(sinks) == 1 else None

    def sinks(self) -> tuple[str, ...]:
        """Nodes no other node depends on, in definition order."""
        needed = {dep for node in self._nodes.values() for dep in node.deps}
        return tuple(name for name in self._nodes if name not in needed)

    def dependents(self) -> Mapping[str, tuple[str, ...]]:
        """For each node, the nodes that depend on it (in definition order)."""
        if self._dependents is None:
            found: dict[str, list[str]] = {name: [] for name in self._nodes}
            for node in self._nodes.values():
                for dep in node.deps:
                    found[dep].append(node.name)
            self._dependents = MappingProxyType(
                {name: tuple(names) for name, names in found.items()}
            )
        return self._dependents

    def validate(self) -> None:
        """Check the whole definition.

        Raises:
            WorkflowDefinitionError: no nodes, an unknown dependency, a cycle, or an
                unknown result node; the message names the node.
        """
        if not self._nodes:
            raise WorkflowDefinitionError(f"workflow {self.name!r} has no nodes")
        for node in self._nodes.values():
            for dep in node.deps:
                if dep not in self._nodes:
                    raise WorkflowDefinitionError(
                        f"workflow {self.name!r}, node {node.name!r}: unknown dependency {dep!r}"
                    )
        try:
            self.order()
        except graphlib.CycleError as error:
            cycle = " -> ".join(str(name) for name in error.args[1])
            raise WorkflowDefinitionError(f"workflow {self.name!r} has a cycle: {cycle}") from None
        if self._result is not None and self._result not in self._nodes:
            raise WorkflowDefinitionError(
                f"workflow {self.name!r}: result node {self._result!r} does not exist"
            )

    @property
    def settings(self) -> BaseModel | None:
        """The operator's settings (:meth:`configure`), else the settings model's defaults."""
        return self._settings

    def configure(
        self, values: Mapping[str, Any], *, exposure: Exposure = "local"
    ) -> "Workflow[InputT]":
        """A copy of this workflow that runs with *values* as its settings.

        The copy shares the nodes; this definition is left as it was. *exposure* says who
        can call it; the settings model's validators read it with :func:`exposure_of`.

        Raises:
            WorkflowDefinitionError: the workflow takes no settings, or *values* do not
                match its settings model (the message names the field).
        """
        configured = copy.copy(self)
        configured._nodes = dict(self._nodes)
        configured._settings = self._validated_settings(values, exposure)
        return configured

    def parse_input(self, arguments: Mapping[str, Any]) -> InputT:
        """A call's *arguments* as the input model, validated with this workflow's settings.

        Raises:
            pydantic.ValidationError: the arguments do not fit the model or the settings.
        """
        return self.input_model.model_validate(
            dict(arguments), context={_SETTINGS_CONTEXT: self.settings}
        )

    def parse_arguments(self, arguments: Mapping[str, Any]) -> InputT:
        """A caller's *arguments*, as :meth:`parse_input` but with unknown keys treated as
        :attr:`extra_inputs` says (by default refused: ``extra_forbidden``).

        Raises:
            pydantic.ValidationError: the arguments do not fit the model or the settings.
        """
        return self._call_model.model_validate(
            dict(arguments), context={_SETTINGS_CONTEXT: self.settings}
        )

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of a call's arguments (``additionalProperties: false`` unless
        the workflow lets unknown keys in)."""
        return self._call_model.model_json_schema()

    def parse_answers(self, answers: Mapping[str, Any]) -> dict[str, JsonValue]:
        """Answers to this workflow's questions (:attr:`asks`), by key, as stored JSON.

        Raises:
            ValueError: a key is not one of its questions, or an answer does not fit.
        """
        questions = {question.key: question for question in self.asks}
        parsed: dict[str, JsonValue] = {}
        for key, content in answers.items():
            question = questions.get(key)
            if question is None:
                raise ValueError(f"{key!r} is not a question of workflow {self.name!r}")
            parsed[key] = question.parse(content)
        return parsed

    def _validated_settings(
        self, values: Mapping[str, Any], exposure: Exposure = "local"
    ) -> BaseModel:
        if self.settings_model is None:
            raise WorkflowDefinitionError(f"workflow {self.name!r} takes no settings")
        try:
            return self.settings_model.model_validate(
                dict(values), context={_EXPOSURE_CONTEXT: exposure}
            )
        except ValidationError as error:
            problem = error.errors()[0]
            where = ".".join(str(part) for part in problem["loc"]) or "settings"
            raise WorkflowDefinitionError(
                f"workflow {self.name!r}: invalid settings: {where}: {problem['msg']}"
            ) from None

    def build_result(self, outputs: Mapping[str, JsonValue]) -> JsonValue:
        """The workflow's result from its stored node outputs.

        Raises:
            ValueError: the result does not match the workflow's output model.
        """
        result_node = self.result_node
        result: JsonValue
        if result_node is not None:
            result = outputs.get(result_node)
        else:
            result = {name: outputs.get(name) for name in self.sinks()}
        if self.output_model is not None:
            result = self.output_model.model_validate(result).model_dump(mode="json")
        return result


def _own_doc(model: type[BaseModel]) -> str:
    """*model*'s own docstring, cleaned; empty if it has none (inherited ones do not count:
    pydantic's ``BaseModel`` has a long one)."""
    doc = model.__dict__.get("__doc__")
    return inspect.cleandoc(doc) if isinstance(doc, str) else ""


def _with_extra(model: type[InputT], extra: ExtraInputs) -> type[InputT]:
    """*model* if it already treats unknown keys as *extra* says, else a subclass of the
    same name that does (so the schema and the validation agree)."""
    if model.model_config.get("extra", "ignore") == extra:
        return model
    namespace = {
        "model_config": ConfigDict(extra=extra),
        "__module__": model.__module__,
        "__qualname__": model.__qualname__,
        "__doc__": model.__dict__.get("__doc__"),
    }
    return type(model.__name__, (model,), namespace)


def _checked_questions(workflow: str, asks: Sequence[Question[Any]]) -> tuple[Question[Any], ...]:
    keys: set[str] = set()
    for question in asks:
        where = f"workflow {workflow!r}, question {question.key!r}"
        if not (_NAME.match(question.key) and len(question.key) <= _MAX_QUESTION_KEY):
            raise WorkflowDefinitionError(f"{where}: not a valid question key")
        if question.key in keys:
            raise WorkflowDefinitionError(f"{where}: asked twice")
        if not (isinstance(question.answer, type) and issubclass(question.answer, BaseModel)):
            raise WorkflowDefinitionError(f"{where}: the answer must be a pydantic model")
        keys.add(question.key)
    return tuple(asks)


def _return_type(function: Callable[..., Any], where: str) -> Any:
    try:
        hints = get_type_hints(function)
    except (NameError, TypeError) as error:
        raise WorkflowDefinitionError(f"{where}: cannot read its annotations: {error}") from None
    if "return" not in hints:
        raise WorkflowDefinitionError(
            f"{where}: annotate the return type (outputs are stored as JSON)"
        )
    return hints["return"]


def _in_order(output_type: Any) -> Any:
    """*output_type*'s arguments in the order written, each with its own type: typing
    compares ``int | float`` equal to ``float | int`` and ``Literal[1, 2]`` to
    ``Literal[2, 1]`` (as sets), whose adapters differ (the order of the schema's
    ``anyOf`` or ``enum``, which member a union's validation prefers: ``"1"`` is 1 for
    the one, 1.0 for the other), as pydantic's own cache of generic models keys them.

    Raises:
        TypeError: a part of it cannot be a key.
    """
    arguments = get_args(output_type)
    if not arguments:
        return (type(output_type), output_type)
    return (get_origin(output_type), tuple(_in_order(argument) for argument in arguments))


def _adapter(output_type: Any, where: str) -> TypeAdapter[Any]:
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(output_type)
        adapter.json_schema(mode="serialization")
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError) as error:
        raise WorkflowDefinitionError(
            f"{where}: its output type {output_type!r} cannot be stored as JSON"
        ) from error
    return adapter


def dependency_order(graph: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The nodes of *graph* (each node's dependencies) in the order of
    ``graphlib.TopologicalSorter(graph).static_order()``, without its calls per node: a
    1,000-node workflow's order cost 2 ms, paid by its first run (ADR 0058).

    Layer by layer: the nodes nothing holds back, in the order they were first named
    (as a key, or as a dependency before their own key), then those the previous layer
    released, in the order it released them.

    Raises:
        graphlib.CycleError: the nodes form a cycle (``graphlib``'s own error).
    """
    waiting: dict[str, int] = {}
    released_by: dict[str, list[str]] = {}
    for name, deps in graph.items():
        if name not in waiting:
            waiting[name] = 0
            released_by[name] = []
        waiting[name] += len(deps)
        for dep in deps:
            if dep not in waiting:
                waiting[dep] = 0
                released_by[dep] = []
            released_by[dep].append(name)
    layer = [name for name, count in waiting.items() if count == 0]
    order: list[str] = []
    while layer:
        order.extend(layer)
        released: list[str] = []
        for name in layer:
            for dependent in released_by[name]:
                waiting[dependent] -= 1
                if not waiting[dependent]:
                    released.append(dependent)
        layer = released
    if len(order) < len(waiting):
        graphlib.TopologicalSorter(graph).prepare()  # raises the CycleError naming it
        raise AssertionError("a node left unordered outside a cycle")  # pragma: no cover
    return tuple(order)
