"""``subscriptions/listen`` on a host's ``MCPServer``: its change events and taskloom's
task changes on one stream (ADR 0025).

The host keeps its own handler (the SDK's ``ListenHandler``: tools, prompts, resources);
taskloom's (``TaskListen``) serves ``notifications.taskIds``. A request is routed by
what it asks for:

- no ``taskIds``: the host's alone, untouched;
- ``taskIds`` and nothing of the host's: taskloom's alone (the stream ends once its
  tasks are terminal, as on ``taskloom serve``);
- both: the two handlers run on one stream. Their acknowledgements leave as one, the
  first frame, naming both honoured subsets; each handler's frames follow, stamped
  with the same subscription id (the request's). The stream lasts as long as the
  host's part (until the client leaves or the host closes its streams); taskloom's
  part stops once its tasks are terminal. A refusal by either part (before anything
  was sent) is the request's error.
"""

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

import anyio
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.session import ServerSession

from taskloom.server.modern import TASK_IDS_KEY

Context = ServerRequestContext[Any, Any]


async def listen_on_host(ctx: Context, host: CallNext, ours: CallNext) -> HandlerResult:
    """Serve a ``subscriptions/listen`` request with the *host*'s handler, *ours*, or both
    (see the module docstring). *ctx* carries the raw, unvalidated params."""
    params = dict(ctx.params or {})
    asked = params.get("notifications")
    if not isinstance(asked, Mapping) or TASK_IDS_KEY not in asked:
        return await host(ctx)
    hosts = {key: value for key, value in asked.items() if key != TASK_IDS_KEY}
    if not any(hosts.values()):
        return await ours(ctx)
    stream = OneAcknowledgement(ctx.session, parts=2)
    shared = replace(ctx, session=cast(ServerSession, stream))
    host_ctx = replace(shared, params={**params, "notifications": hosts})
    ours_ctx = replace(
        shared, params={**params, "notifications": {TASK_IDS_KEY: asked[TASK_IDS_KEY]}}
    )
    ended: list[HandlerResult] = []
    refused: list[Exception] = []

    async def run_host() -> None:
        try:
            ended.append(await host(host_ctx))
        except Exception as error:  # noqa: BLE001  # re-raised below, not in a group
            refused.append(error)
        group.cancel_scope.cancel()

    async def run_ours() -> None:
        try:
            await ours(ours_ctx)
        except Exception as error:  # noqa: BLE001  # re-raised below
            refused.append(error)
            group.cancel_scope.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(run_host)
        group.start_soon(run_ours)
    if refused:
        raise refused[0]
    return ended[0]


class OneAcknowledgement:
    """A session for the parts of one listen stream: it holds their acknowledgements and
    their frames until every part has acknowledged, sends one acknowledgement naming
    everything honoured, then the held frames, then passes frames through in order."""

    def __init__(self, session: ServerSession, *, parts: int) -> None:
        self._session = session
        self._waiting = parts
        self._honoured: dict[str, Any] = {}
        self._held: list[types.ServerNotification] = []
        self._sending = anyio.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    async def send_notification(
        self,
        notification: types.ServerNotification,
        related_request_id: types.RequestId | None = None,
    ) -> None:
        """Send *notification* on the stream, or hold it until every part acknowledged."""
        async with self._sending:
            if not self._waiting:
                await self._session.send_notification(notification, related_request_id)
                return
            if not isinstance(notification, types.SubscriptionsAcknowledgedNotification):
                self._held.append(notification)
                return
            honoured = notification.params.notifications
            self._honoured.update(honoured.model_dump(by_alias=True, exclude_none=True))
            self._waiting -= 1
            if self._waiting:
                return
            both = types.SubscriptionsAcknowledgedNotificationParams(
                notifications=types.SubscriptionFilter.model_validate(self._honoured),
                _meta=notification.params.meta,
            )
            await self._session.send_notification(
                types.SubscriptionsAcknowledgedNotification(params=both), related_request_id
            )
            held, self._held = self._held, []
            for frame in held:
                await self._session.send_notification(frame, related_request_id)
