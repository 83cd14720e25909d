"""``HttpService`` and ``HttpEndpoint`` take their optional parts by keyword
(``EndpointParts``): a keyword that is none of them is a ``TypeError``, as for any
function, not silently ignored."""

from typing import Any, cast

import pytest

from taskloom.server import TaskServer
from taskloom.server.http import HttpService, HttpSettings
from taskloom.server.http.endpoint import HttpEndpoint

pytestmark = pytest.mark.anyio


async def test_a_misspelled_part_of_the_service_is_a_type_error(task_server: TaskServer) -> None:
    parts: dict[str, Any] = {"metric": lambda: ""}  # for `metrics`
    with pytest.raises(TypeError, match=r"^HttpService\(\) got an unexpected keyword .*'metric'"):
        HttpService(task_server, HttpSettings(port=0), **parts)


async def test_a_misspelled_part_of_the_endpoint_is_a_type_error() -> None:
    parts: dict[str, Any] = {"stored_token": None}  # for `stored_tokens`
    with pytest.raises(TypeError, match=r"'stored_token'$"):
        HttpEndpoint(cast(Any, None), HttpSettings(port=0), **parts)


async def test_every_part_is_taken(task_server: TaskServer) -> None:
    service = HttpService(
        task_server,
        HttpSettings(port=0),
        metrics=lambda: "",
        stored_tokens=None,
        ui=None,
        limiter=None,
        authenticator=None,
    )
    assert service.settings.port == 0
