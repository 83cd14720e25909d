"""The workflows a process can run, by name and version: built-ins, modules and entry points.

A process may load several versions of one workflow (ADR 0039): new calls get the newest,
and a stored run is executed by the version it started with. Versions of one name are
ordered as numbers: dotted (or dashed) non-negative integers, compared part by part
(``1 < 1.2 < 1.10 < 2``, and a date ``2026-11-26`` as three numbers). A name with one version may use any
string; two versions that are not both numbers cannot be ordered and are refused.
"""

import hashlib
import importlib
import json
import re
import traceback
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any, Final

from taskloom.engine.dag import Exposure, MapNode, Workflow
from taskloom.engine.errors import UnknownWorkflowError, WorkflowDefinitionError

ENTRY_POINT_GROUP: Final = "taskloom.workflows"

_NUMBERED: Final = re.compile(r"[0-9]+(?:[.-][0-9]+)*")

WorkflowKey = tuple[str, str]
"""A workflow's (name, version)."""


def version_order(version: str) -> tuple[int, ...] | None:
    """The sort key of a numbered *version* (``"1.10"`` -> ``(1, 10)``); ``None`` when it
    is not a number."""
    if not _NUMBERED.fullmatch(version):
        return None
    return tuple(int(part) for part in re.split(r"[.-]", version))


class WorkflowRegistry(Mapping[str, Workflow[Any]]):
    """Validated workflows: by name (the newest version loaded), and every version."""

    def __init__(self, workflows: Mapping[str, Workflow[Any]] | None = None) -> None:
        self._versions: dict[str, dict[str, Workflow[Any]]] = {}
        """Name -> version -> workflow, each name's versions oldest first."""
        self._shapes: dict[WorkflowKey, str] = {}
        for workflow in (workflows or {}).values():
            self.register(workflow)

    def register(self, workflow: Workflow[Any]) -> None:
        """Validate and add *workflow* beside the other versions of its name.

        Raises:
            WorkflowDefinitionError: it is invalid, another workflow of this name and
                version is defined differently, or its version and another of its name's
                cannot be ordered (they are not both numbers).
        """
        workflow.validate()
        key = (workflow.name, workflow.version)
        versions = self._versions.setdefault(workflow.name, {})
        existing = versions.get(workflow.version)
        shape = definition_shape(workflow)
        if existing is not None:
            if existing is not workflow and self._shapes[key] != shape:
                raise WorkflowDefinitionError(
                    f"two modules define {workflow.name} version {workflow.version} "
                    "differently: give the changed one a new version"
                )
            return
        others = [version for version in versions if version_order(version) is None]
        if versions and (version_order(workflow.version) is None or others):
            unordered = others[0] if others else next(iter(versions))
            raise WorkflowDefinitionError(
                f"cannot order {workflow.name} versions {unordered!r} and "
                f"{workflow.version!r}: with several versions loaded, each must be a number "
                "(dotted integers such as 2 or 1.10)"
            )
        versions[workflow.version] = workflow
        self._versions[workflow.name] = dict(
            sorted(versions.items(), key=lambda item: version_order(item[0]) or ())
        )
        self._shapes[key] = shape

    def configure(
        self, name: str, values: Mapping[str, Any], *, exposure: Exposure = "local"
    ) -> Workflow[Any]:
        """Replace every loaded version of the workflow *name* by a copy configured with
        *values* (its settings), for callers of this *exposure* (see
        :func:`taskloom.engine.dag.exposure_of`); return the newest.

        Raises:
            UnknownWorkflowError: no workflow has this name.
            WorkflowDefinitionError: it takes no settings, or *values* do not fit them.
        """
        self[name]  # raises UnknownWorkflowError
        versions = self._versions[name]
        for version, workflow in versions.items():
            versions[version] = workflow.configure(values, exposure=exposure)
        return self[name]

    def version(self, name: str, version: str | None) -> Workflow[Any]:
        """The loaded *version* of *name* (the newest when *version* is ``None``: a run
        that recorded none).

        Raises:
            UnknownWorkflowError: this name, or this version of it, is not loaded.
        """
        if version is None:
            return self[name]
        found = self._versions.get(name, {}).get(version)
        if found is None:
            loaded = ", ".join(self._versions.get(name, {})) or "none"
            raise UnknownWorkflowError(
                f"{name} version {version} is not loaded (loaded versions: {loaded})"
            )
        return found

    def versions(self, name: str) -> tuple[Workflow[Any], ...]:
        """Every loaded version of *name*, oldest first (empty if none)."""
        return tuple(self._versions.get(name, {}).values())

    def loaded(self) -> dict[WorkflowKey, Workflow[Any]]:
        """Every loaded (name, version) and its workflow."""
        return {
            (name, version): workflow
            for name, versions in self._versions.items()
            for version, workflow in versions.items()
        }

    def load_module(self, module_name: str) -> list[str]:
        """Import *module_name* and register every workflow defined at its top level.

        Raises:
            WorkflowDefinitionError: the module cannot be imported, defines no
                workflow, or defines an invalid one.
        """
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise WorkflowDefinitionError(
                f"cannot import workflow module {module_name!r}: {error}"
            ) from error
        except Exception as error:  # the module's own code failed: say where, in one line
            raise WorkflowDefinitionError(
                f"cannot load workflow module {module_name!r}: {where_it_failed(error)}"
            ) from error
        found = [value for value in vars(module).values() if isinstance(value, Workflow)]
        if not found:
            raise WorkflowDefinitionError(f"module {module_name!r} defines no workflow")
        for workflow in found:
            self.register(workflow)
        return [workflow.name for workflow in found]

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> list[str]:
        """Register the workflows (or modules of workflows) that packages advertise.

        Raises:
            WorkflowDefinitionError: an entry point cannot be loaded, or what it names
                is invalid; the message names the entry point.
        """
        names: list[str] = []
        for entry_point in entry_points(group=group):
            try:
                loaded = entry_point.load()
            except Exception as error:  # any import-time failure of a plugin
                raise WorkflowDefinitionError(
                    f"entry point {entry_point.name!r} ({entry_point.value}) in group "
                    f"{group!r} cannot be loaded: {type(error).__name__}: {error}"
                ) from error
            if isinstance(loaded, Workflow):
                self.register(loaded)
                names.append(loaded.name)
            else:
                names += self.load_module(entry_point.value.split(":")[0])
        return names

    def __getitem__(self, name: str) -> Workflow[Any]:
        """The newest loaded version of *name*."""
        versions = self._versions.get(name)
        if not versions:
            raise UnknownWorkflowError(f"no workflow is named {name!r}")
        return next(reversed(versions.values()))

    def __iter__(self) -> Iterator[str]:
        return iter(self._versions)

    def __len__(self) -> int:
        return len(self._versions)


def loaded_versions(workflows: Mapping[str, Workflow[Any]]) -> dict[WorkflowKey, Workflow[Any]]:
    """Every (name, version) *workflows* holds: all a registry's versions, or the one
    workflow per name of a plain mapping."""
    if isinstance(workflows, WorkflowRegistry):
        return workflows.loaded()
    return {(workflow.name, workflow.version): workflow for workflow in workflows.values()}


def workflow_for(
    workflows: Mapping[str, Workflow[Any]], name: str, version: str | None
) -> Workflow[Any] | None:
    """The workflow that runs a run of *name* that recorded *version*: that version if
    loaded (the newest when it recorded none); ``None`` when this process lacks it."""
    if version is None:
        return workflows.get(name)
    return loaded_versions(workflows).get((name, version))


def definition_shape(workflow: Workflow[Any]) -> str:
    """A fingerprint of what makes a workflow version behave as it does: its input
    schema, its graph, and each node's code and output type. Two definitions of one
    (name, version) with different shapes are two versions that claim one name."""
    nodes = []
    outputs: dict[int, str] = {}  # by adapter: nodes of one output type share theirs
    for name, node in sorted(workflow.nodes.items()):
        code = getattr(node.function, "__code__", None)
        output = outputs.get(id(node.output_adapter))
        if output is None:
            try:
                output = json.dumps(node.output_adapter.json_schema(), sort_keys=True)
            except Exception:  # noqa: BLE001  # a type without a JSON schema: its repr
                output = repr(node.output_adapter)
            outputs[id(node.output_adapter)] = output
        nodes.append(
            [
                name,
                list(node.deps),
                node.phase,
                isinstance(node, MapNode),
                hashlib.sha256(code.co_code).hexdigest() if code else repr(node.function),
                repr(_plain_constants(code.co_consts)) if code else "",
                output,
            ]
        )
    body = json.dumps(
        [workflow.input_schema(), nodes, workflow.result_node], sort_keys=True, default=repr
    )
    return hashlib.sha256(body.encode()).hexdigest()


def _plain_constants(constants: tuple[Any, ...]) -> list[Any]:
    """A code object's constants, nested code objects by their own code."""
    return [
        hashlib.sha256(value.co_code).hexdigest() if hasattr(value, "co_code") else value
        for value in constants
    ]


def where_it_failed(error: Exception) -> str:
    """``Type at FILE:LINE: message`` for an error raised while importing a module: a
    ``SyntaxError`` names its own place, any other error the last frame of its traceback
    outside the import machinery."""
    kind = type(error).__name__
    if isinstance(error, SyntaxError):
        return f"{kind} at {error.filename}:{error.lineno}: {error.msg}"
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith("<frozen ")
    ]
    message = str(error).splitlines()[0] if str(error) else ""
    place = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{kind}{place}: {message}" if message else f"{kind}{place}"
