"""A Python client for Cairn.

The gRPC stubs are generated from the repository's protos when this package
is built (``cairn.v1.*_pb2`` and ``*_pb2_grpc``); use them directly for
every call. This module adds only what is awkward with raw gRPC:

- :func:`connect`: a channel with the bearer token on every call;
- :meth:`Client.watch`: a watch that resumes by itself after a disconnect
  or a server restart, from the last *complete* revision, so nothing is
  missed and nothing seen twice;
- :meth:`Client.wait`: block until every plan in a session tree is done.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, Optional

import grpc
from google.protobuf import duration_pb2
from grpc_status import rpc_status

from cairn.v1 import auth_pb2_grpc, plan_pb2_grpc, session_pb2_grpc, todo_pb2_grpc
from cairn.v1 import watch_pb2, watch_pb2_grpc

__all__ = ["Client", "connect", "error_reason"]

# Worth a reconnect: the server went away or is restarting.
_RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    def __init__(self, token: str):
        self._metadata = (("authorization", f"Bearer {token.strip()}"),)

    def _with_token(self, details):
        metadata = tuple(details.metadata or ()) + self._metadata
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_token(details), request)


@dataclass
class Client:
    """Stubs for every service, on one channel."""

    channel: grpc.Channel

    def __post_init__(self):
        self.sessions = session_pb2_grpc.SessionServiceStub(self.channel)
        self.plans = plan_pb2_grpc.PlanServiceStub(self.channel)
        self.todos = todo_pb2_grpc.TodoServiceStub(self.channel)
        self.watches = watch_pb2_grpc.WatchServiceStub(self.channel)
        self.auth = auth_pb2_grpc.AuthServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def watch(
        self,
        *,
        session_id: Optional[str] = None,
        session_tree: Optional[str] = None,
        agent_id: Optional[str] = None,
        all: bool = False,
        start_revision: Optional[int] = None,
        max_retry_seconds: float = 60.0,
    ) -> Iterator[watch_pb2.WatchResponse]:
        """Follows a target, resuming after disconnects.

        Yields every ``WatchResponse`` (events, ``synced``, ``progress``).
        After a dropped stream it watches again from the revision after the
        last one it delivered whole — events of a revision cut off by the
        drop are delivered again, from the start of that revision, so a
        caller that acts on whole revisions sees each exactly once. Gives
        up (raising the last error) after ``max_retry_seconds`` without a
        message; errors that a retry cannot fix (a compacted revision, bad
        arguments, permissions) are raised at once.
        """
        target = {
            k: v
            for k, v in {
                "session_id": session_id,
                "session_tree": session_tree,
                "agent_id": agent_id,
                "all": all or None,
            }.items()
            if v
        }
        if len(target) != 1:
            raise ValueError("name exactly one of session_id, session_tree, agent_id, all")
        next_revision = start_revision
        last_message = time.monotonic()
        pause = 0.05
        while True:
            request = watch_pb2.WatchRequest(**target)
            if next_revision is not None:
                request.start_revision = next_revision
            pending = []  # events of a revision not yet complete
            try:
                for response in self.watches.Watch(request):
                    last_message = time.monotonic()
                    pause = 0.05
                    kind = response.WhichOneof("kind")
                    if kind == "event":
                        event = response.event
                        pending.append(response)
                        if event.index_in_revision + 1 == event.events_in_revision:
                            yield from pending
                            pending = []
                            next_revision = event.revision + 1
                    else:
                        if kind in ("synced", "progress"):
                            next_revision = getattr(response, kind).revision + 1
                        yield response
                return
            except grpc.RpcError as e:
                if e.code() not in _RETRYABLE or time.monotonic() - last_message > max_retry_seconds:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 2.0)

    def wait(self, session_tree: str, timeout_seconds: float = 600) -> watch_pb2.WaitResponse:
        """Blocks until every plan in the tree is completed (or the timeout)."""
        seconds = int(timeout_seconds)
        timeout = duration_pb2.Duration(seconds=seconds, nanos=int((timeout_seconds - seconds) * 1e9))
        return self.watches.Wait(
            watch_pb2.WaitRequest(session_tree=session_tree, timeout=timeout),
            timeout=timeout_seconds + 30,
        )


def connect(target: str = "127.0.0.1:50051", token: Optional[str] = None) -> Client:
    """A client for the server at ``target`` (``host:port``), presenting
    ``token`` on every call when given (servers with ``--auth token``)."""
    channel = grpc.insecure_channel(target)
    if token:
        channel = grpc.intercept_channel(channel, _Bearer(token))
    return Client(channel)


def error_reason(error: grpc.RpcError) -> Optional[str]:
    """The ``google.rpc.ErrorInfo`` reason of a failed call
    (``MULTIPLE_IN_PROGRESS``, ``REVISION_MISMATCH``, …), if it has one."""
    from google.rpc import error_details_pb2

    status = rpc_status.from_call(error)
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info.reason
    return None
