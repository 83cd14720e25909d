"""The workflows a process can run, by name: built-ins, modules and entry points."""

import importlib
import traceback
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any, Final

from taskloom.engine.dag import Exposure, Workflow
from taskloom.engine.errors import UnknownWorkflowError, WorkflowDefinitionError

ENTRY_POINT_GROUP: Final = "taskloom.workflows"


class WorkflowRegistry(Mapping[str, Workflow[Any]]):
    """Validated workflows by name."""

    def __init__(self, workflows: Mapping[str, Workflow[Any]] | None = None) -> None:
        self._workflows: dict[str, Workflow[Any]] = {}
        for workflow in (workflows or {}).values():
            self.register(workflow)

    def register(self, workflow: Workflow[Any]) -> None:
        """Validate and add *workflow*.

        Raises:
            WorkflowDefinitionError: it is invalid, or another workflow has its name.
        """
        workflow.validate()
        existing = self._workflows.get(workflow.name)
        if existing is not None and existing is not workflow:
            raise WorkflowDefinitionError(f"two workflows are named {workflow.name!r}")
        self._workflows[workflow.name] = workflow

    def configure(
        self, name: str, values: Mapping[str, Any], *, exposure: Exposure = "local"
    ) -> Workflow[Any]:
        """Replace the workflow *name* by a copy configured with *values* (its settings),
        for callers of this *exposure* (see :func:`taskloom.engine.dag.exposure_of`).

        Raises:
            UnknownWorkflowError: no workflow has this name.
            WorkflowDefinitionError: it takes no settings, or *values* do not fit them.
        """
        configured = self[name].configure(values, exposure=exposure)
        self._workflows[name] = configured
        return configured

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
        try:
            return self._workflows[name]
        except KeyError:
            raise UnknownWorkflowError(f"no workflow is named {name!r}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._workflows)

    def __len__(self) -> int:
        return len(self._workflows)


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
