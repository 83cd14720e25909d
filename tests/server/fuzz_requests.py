"""Random ``tasks/*`` and ``tools/call`` requests for the property test, and the error
codes the contract allows each method to answer with, per protocol version.

A request names tasks symbolically (:class:`Ref`: "the caller's own running task", "a
completed task of the other principal", a random string...) so that hypothesis can draw
it before the tasks exist; the test resolves each reference to the ids it seeded.

Requests that MUST block are never drawn, since their wait is the contract, not a hang:
``tasks/result`` (2025-11-25) and ``subscriptions/listen`` on one of the caller's own
active tasks, and a plain (not task-augmented) call with valid arguments, which waits
for a run the fuzz engine (no worker) never makes.
"""

from dataclasses import dataclass
from typing import Any, Final

from hypothesis import strategies as st

from tests.server.client import LEGACY
from tests.server.modern_client import EXT, MODERN

STATES: Final = ("queued", "running", "input_required", "completed", "failed", "cancelled")
ACTIVE: Final = frozenset({"queued", "running", "input_required"})
OLDER: Final = "2025-06-18"
"""A version without Tasks: every ``tasks/*`` method is unknown there."""
VERSIONS: Final = (LEGACY, MODERN, OLDER)
INPUT_KEY: Final = "name-1"
"""The key of the question every seeded ``input_required`` task has pending."""

METHODS: Final = (
    "tools/call",
    "tasks/get",
    "tasks/result",
    "tasks/list",
    "tasks/cancel",
    "tasks/update",
    "subscriptions/listen",
)
TASK_ID_METHODS: Final = frozenset({"tasks/get", "tasks/result", "tasks/cancel", "tasks/update"})

# The codes each method may answer with (contract §2.15 for 2025-11-25, §3.6/§3.7/§3.9
# for 2026-07-28, §2.1 for versions without Tasks). -32603 is never a client mistake:
# its one legitimate use here is ``tasks/result`` on the caller's own cancelled or
# failed task (ADR 0008, ADR 0010), which the test allows separately, by task.
ALLOWED: Final[dict[str, dict[str, frozenset[int]]]] = {
    LEGACY: {
        # -32602 bad params / unknown tool; -32601 taskSupport required or forbidden.
        "tools/call": frozenset({-32602, -32601}),
        "tasks/get": frozenset({-32602}),  # unknown, foreign or malformed id
        "tasks/result": frozenset({-32602}),
        "tasks/cancel": frozenset({-32602}),  # ... or already terminal
        "tasks/list": frozenset({-32602}),  # bad cursor
        "tasks/update": frozenset({-32601}),  # a 2026-07-28 method
        "subscriptions/listen": frozenset({-32601}),
    },
    MODERN: {
        # -32602 bad params / unknown tool; -32021 a task-only tool, extension undeclared.
        "tools/call": frozenset({-32602, -32021}),
        "tasks/get": frozenset({-32602, -32021}),
        "tasks/update": frozenset({-32602, -32021}),
        "tasks/cancel": frozenset({-32602, -32021}),
        "tasks/result": frozenset({-32601}),  # removed in 2026-07-28
        "tasks/list": frozenset({-32601}),
        # -32021 extension undeclared; -32602 bad notifications.taskIds.
        "subscriptions/listen": frozenset({-32602, -32021}),
    },
    OLDER: {"tools/call": frozenset({-32602})},  # params.task is ignored; tasks/*: -32601
}
UNKNOWN_METHOD: Final = frozenset({-32601})


def allowed_codes(version: str, method: str) -> frozenset[int]:
    """The error codes *method* may answer with at *version* (unknown methods: -32601)."""
    return ALLOWED[version].get(method, UNKNOWN_METHOD)


@dataclass(frozen=True)
class Ref:
    """A task named by whose (``own``/``other``, relative to the caller) and its state."""

    whose: str
    state: str


@dataclass(frozen=True)
class Huge:
    """A string of *size* characters, built only when sent (a short repr when shrunk)."""

    size: int


@dataclass(frozen=True)
class Request:
    """One request: who sends it, at which version, and its (symbolic) params."""

    principal: str
    version: str
    declare: bool
    method: str
    params: Any
    meta: dict[str, Any]
    variant: int = 0


# -- building blocks ----------------------------------------------------------------------


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, drawn *weight* times as often as a weight-1 one (shrinking
    towards the first)."""
    slots = [index for index, (weight, _) in enumerate(choices) for _ in range(weight)]
    return st.sampled_from(slots).flatmap(lambda index: choices[index][1])


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=12),
)
garbage: st.SearchStrategy[Any] = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
"""Nested JSON garbage (no NaN: it is not JSON)."""

odd_strings = st.one_of(
    st.just(""),
    st.just(Huge(70_000)),
    st.just("\x00\u202e\ufeff"),
    st.just("../../etc/passwd"),
    st.just("' OR 1=1 --"),
    st.text(min_size=1, max_size=40),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=10),
)
"""Strings no server issued: empty, huge, control and bidi characters, injections."""


def task_refs(*, blocking: bool) -> st.SearchStrategy[Any]:
    """A task id: a seeded task's (symbolic), a random string, or no string at all.

    For a *blocking* method the caller's own active tasks are left out (see module doc).
    """
    own_states = [s for s in STATES if not (blocking and s in ACTIVE)]
    return weighted(
        (3, st.builds(Ref, st.just("own"), st.sampled_from(own_states))),
        (2, st.builds(Ref, st.just("other"), st.sampled_from(STATES))),
        (1, odd_strings),
        (1, garbage),
    )


def _with_id(task_id: Any, extra: dict[str, Any]) -> dict[str, Any]:
    return {"taskId": task_id, **extra}


def _missing_one(params: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """*params* without one of its fields."""
    return st.sampled_from([{k: v for k, v in params.items() if k != gone} for gone in params])


def _maybe_drop(params: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[Any]:
    """The params, the params missing a field, or no usable params at all."""
    return weighted(
        (4, params),
        (1, params.flatmap(_missing_one)),
        (1, st.sampled_from([None, {}])),
        (1, st.dictionaries(st.text(max_size=8), garbage, max_size=3)),
    )


answers = weighted(
    (2, st.just({"action": "accept", "content": {"name": "Ada"}})),
    (
        1,
        st.fixed_dictionaries(
            {"action": st.sampled_from(["accept", "decline", "cancel", "nope"]), "content": garbage}
        ),
    ),
    (1, garbage),
)
"""Answers to the pending question: valid, wrongly shaped, or garbage."""


def update_params(*, blocking: bool) -> st.SearchStrategy[Any]:
    responses = st.one_of(
        st.dictionaries(st.sampled_from([INPUT_KEY, "name-2", "", "k" * 300]), answers, max_size=2),
        garbage,
    )
    return _maybe_drop(
        st.builds(
            lambda t, r: {"taskId": t, "inputResponses": r}, task_refs(blocking=blocking), responses
        )
    )


cursors = st.one_of(
    st.none(), odd_strings, garbage, st.just("eyJ4IjogMX0="), st.just("bm90IGEgY3Vyc29y")
)
ttls = st.one_of(
    st.integers(min_value=-5, max_value=2**64),
    st.just(1e300),
    st.booleans(),
    st.none(),
    st.text(max_size=4),
    st.floats(allow_nan=False),
)

valid_arguments: dict[str, st.SearchStrategy[Any]] = {
    "gated": st.builds(lambda g: {"gate": g}, st.text(min_size=1, max_size=8)),
    "must_task": st.builds(lambda g: {"gate": g}, st.text(min_size=1, max_size=8)),
    "ask": st.just({}),
}
"""Arguments a tool accepts (only ever sent with a task, see the module docstring)."""

_not_arguments = st.one_of(st.lists(garbage, max_size=2), st.text(max_size=8))
invalid_arguments: dict[str, st.SearchStrategy[Any]] = {
    "gated": st.one_of(
        st.sampled_from([{"gate": ""}, {"gate": 5}, {"gate": None}, {"start": -1}, {}]),
        _not_arguments,
    ),
    "ask": st.one_of(
        st.sampled_from([{"question": ["not", "a", "string"]}, {"question": 5}]), _not_arguments
    ),
}
"""Arguments each tool refuses, by the shape of its input (``must_task``: ``gated``'s)."""


@st.composite
def call_params(draw: st.DrawFn, version: str, declare: bool) -> Any:
    """``tools/call`` params; valid arguments only where the call becomes a task."""
    name = draw(st.sampled_from(["gated", "must_task", "ask", "nope", "", "task_status"]))
    task: Any = draw(
        st.one_of(
            st.just(None),
            st.just({}),
            st.builds(lambda ttl: {"ttl": ttl}, ttls),
            garbage,
        )
    )
    becomes_task = (
        declare
        if version == MODERN
        else version == LEGACY and isinstance(task, dict) and _plain_ttl(task)
    )
    if name in valid_arguments and becomes_task and draw(st.booleans()):
        arguments = draw(valid_arguments[name])
    else:
        arguments = draw(invalid_arguments["ask" if name == "ask" else "gated"])
    params: dict[str, Any] = {"name": draw(weighted((3, st.just(name)), (1, garbage)))}
    if name != "ask" and draw(st.integers(0, 5)) == 0:
        return params  # no arguments at all
    params["arguments"] = arguments
    if task is not None:
        params["task"] = task
    return params


def _plain_ttl(task: dict[str, Any]) -> bool:
    """Whether a legacy ``params.task`` is a valid TaskMetadata (else: an error, no run)."""
    ttl = task.get("ttl")
    return ttl is None or (isinstance(ttl, int) and not isinstance(ttl, bool))


def method_params(method: str, version: str, declare: bool) -> st.SearchStrategy[Any]:
    blocking = method == "subscriptions/listen" or (method == "tasks/result" and version == LEGACY)
    if method == "tools/call":
        return call_params(version, declare)
    if method == "tasks/update":
        return update_params(blocking=blocking)
    if method in TASK_ID_METHODS:
        return _maybe_drop(st.builds(_with_id, task_refs(blocking=blocking), st.just({})))
    if method == "tasks/list":
        return st.one_of(st.builds(lambda c: {} if c is None else {"cursor": c}, cursors), garbage)
    if method == "subscriptions/listen":
        ids = st.lists(task_refs(blocking=True), max_size=3)
        return _maybe_drop(
            st.builds(lambda i: {"notifications": {"taskIds": i}}, st.one_of(ids, garbage))
        )
    return st.one_of(st.none(), st.dictionaries(st.text(max_size=8), garbage, max_size=3))


extra_meta = st.one_of(
    st.just({}),
    st.just({}),
    st.dictionaries(st.text(max_size=10), garbage, max_size=2),
    st.builds(
        lambda ref: {"io.modelcontextprotocol/related-task": {"taskId": ref}},
        task_refs(blocking=True),
    ),
    st.builds(lambda token: {"progressToken": token}, garbage),
)
"""Extra ``_meta`` keys: junk, a related-task naming any task, odd progress tokens."""


method_names = st.one_of(
    st.sampled_from(["tasks/", "tasks/delete", "tasks/get/", "TASKS/GET", "tools/call "]),
    st.text(max_size=20),
)
"""Methods no generation serves."""


@st.composite
def requests(draw: st.DrawFn) -> Request:
    """One random request from ann or bob, at any of the versions."""
    version = draw(st.sampled_from(VERSIONS))
    declare = version == MODERN and draw(st.integers(0, 3)) > 0
    method = draw(weighted((7, st.sampled_from(METHODS)), (1, method_names)))
    return Request(
        principal=draw(st.sampled_from(["ann", "bob"])),
        version=version,
        declare=declare,
        method=method,
        params=draw(method_params(method, version, declare)),
        meta=draw(extra_meta),
        variant=draw(st.integers(0, 2)),
    )


UNDECLARED: Final[tuple[dict[str, Any], ...]] = (
    {},
    {"extensions": {}},
    {"extensions": {"io.example/other": {}}},
)


def envelope(declare: bool, variant: int) -> dict[str, Any]:
    """A 2026-07-28 ``_meta`` envelope that declares the tasks extension or (in one of
    several ways) does not."""
    capabilities = {"extensions": {EXT: {}}} if declare else UNDECLARED[variant % 3]
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }
