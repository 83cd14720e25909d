"""The stdio transport on pipes: requests read and answers written from the event loop,
the answers waiting at one moment written together.

The SDK's ``stdio_server`` writes each message with its own write and flush. Answers
come in bursts (a batch of creates committed together answers every one of them), and
each write to a pipe wakes the client's process: on a virtual machine the wake-up costs
more than the message. Here the writer takes every message already waiting when it
takes one and writes them in as few atomic writes as fit (``PipeWriter.write_all``), so
a burst costs one write, and a message alone still goes out at once: nothing waits for
company. Requests are parsed as the SDK's transport parses them (a line that is not
JSON-RPC reaches the server as the error; the SDK's server logs it and answers nothing).

Used when standard output is a pipe or socket and standard input can be polled (a pipe,
a socket or a terminal: :mod:`taskloom.server.stdin_lines`,
:mod:`taskloom.server.stdout_lines`); otherwise the SDK's ``stdio_server`` serves as
before.
"""

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from taskloom.server.stdin_lines import lines
from taskloom.server.stdout_lines import PipeWriter

Incoming = SessionMessage | Exception


@asynccontextmanager
async def pipe_transport(
    requests: int, answers: PipeWriter
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[Incoming], MemoryObjectSendStream[SessionMessage]]
]:
    """The server's read and write streams over the *requests* descriptor and *answers*.
    On exit both streams are closed; it waits until every answer sent is written and the
    requests have ended (standard input closed), as the SDK's transport does."""
    incoming_send, incoming = anyio.create_memory_object_stream[Incoming](0)
    outgoing, outgoing_receive = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_requests() -> None:
        try:
            async with incoming_send:
                async for line in lines(requests):
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except Exception as error:  # noqa: BLE001  # as broad as the SDK's transport
                        await incoming_send.send(error)
                        continue
                    await incoming_send.send(SessionMessage(message))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):  # the server stopped reading
            await anyio.lowlevel.checkpoint()

    async def write_answers() -> None:
        try:
            async with outgoing_receive:
                async for first in outgoing_receive:
                    messages = [first, *_waiting(outgoing_receive)]
                    await answers.write_all([_line(message) for message in messages])
        except anyio.ClosedResourceError:  # the server closed its end under us
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(read_requests)
        task_group.start_soon(write_answers)
        try:
            yield incoming, outgoing
        finally:
            outgoing.close()  # the writer writes what was sent, then ends
            incoming.close()


def _waiting(stream: MemoryObjectReceiveStream[SessionMessage]) -> Iterator[SessionMessage]:
    """The messages that can be taken from *stream* now, without waiting."""
    while True:
        try:
            yield stream.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream):
            return


def _line(message: SessionMessage) -> bytes:
    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
    return f"{text}\n".encode()


__all__ = ("pipe_transport",)
