"""Cairn as an A2A server, through the official Python SDK (`a2a-sdk`
1.3.0, installed by .ci/run): the SDK resolves the agent card from the web
listener, picks the gRPC interface it names, reads and subscribes to a
sub-agent's session as a task while the sub-agent works through its plan
over Cairn's own gRPC API, answers its approval as another principal, and
resumes its stream with Cairn's extension."""

import asyncio
import contextlib
import http.server
import json
import pathlib
import threading
import time
import subprocess
import tempfile

import grpc
import httpx
import pytest

from conftest import BINARY, _free_port

a2a_client = pytest.importorskip("a2a.client", reason="a2a-sdk[grpc] is installed by .ci/run")
from a2a.types import a2a_pb2 as a2a  # noqa: E402

from cairn.v1 import auth_pb2 as auth  # noqa: E402
from cairn.v1 import auth_pb2_grpc  # noqa: E402
from cairn.v1 import plan_pb2 as plan  # noqa: E402
from cairn.v1 import plan_pb2_grpc  # noqa: E402
from cairn.v1 import session_pb2 as session  # noqa: E402
from cairn.v1 import session_pb2_grpc  # noqa: E402

ADMIN = "a2a-admin-token-0123456789abcdef"
META = (("authorization", f"Bearer {ADMIN}"),)


class _Token:
    def __init__(self, token=ADMIN):
        self.meta = (("authorization", f"Bearer {token}"),)

    def _with_token(self, details):
        return details._replace(metadata=list(details.metadata or []) + list(self.meta))


class Bearer(_Token, grpc.aio.UnaryUnaryClientInterceptor):
    """Presents a principal's token on every unary A2A call (grpc.aio
    files an interceptor under one kind of call only)."""

    async def intercept_unary_unary(self, continuation, details, request):
        return await continuation(self._with_token(details), request)


class StreamBearer(_Token, grpc.aio.UnaryStreamClientInterceptor):
    """The same, on streams."""

    async def intercept_unary_stream(self, continuation, details, request):
        return await continuation(self._with_token(details), request)


def _client(card, token=ADMIN, streaming=False, binding="GRPC"):
    """An SDK client of one binding presenting `token`: gRPC metadata
    through interceptors, or an HTTP header on every JSON-RPC request."""
    config = a2a_client.ClientConfig(
        streaming=streaming,
        supported_protocol_bindings=[binding],
        grpc_channel_factory=lambda url: grpc.aio.insecure_channel(
            url, interceptors=[Bearer(token), StreamBearer(token)]),
        httpx_client=httpx.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30),
    )
    return a2a_client.ClientFactory(config).create(card)


@contextlib.contextmanager
def _serve(*extra, data=None, ports=None):
    """A server with token auth and a web listener (and `extra` flags), on
    `data` and `ports` when given (a restart): its gRPC channel (as the
    admin dials it) and both ports. Stopped with SIGTERM at the end, or
    killed by the caller first."""
    port, web = ports or (_free_port(), _free_port())
    data = data or tempfile.mkdtemp(prefix="cairn-a2a-")
    token_file = pathlib.Path(data) / "admin-token"
    token_file.write_text(ADMIN + "\n")
    server = subprocess.Popen(
        [
            BINARY, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data,
            "--web-listen", f"127.0.0.1:{web}", "--auth", "token", "--admin-token-file", str(token_file),
            *extra,
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(ch).result(timeout=30)
        _serve.last = (server, data)
        yield ch, port, web
    finally:
        if server.poll() is None:
            server.terminate()
        server.wait(timeout=30)


async def _card(web):
    async with httpx.AsyncClient() as http:
        return await a2a_client.A2ACardResolver(http, f"http://127.0.0.1:{web}").get_agent_card()


def test_the_sdk_resolves_the_card_and_follows_a_sub_agent_s_task():
    with _serve() as (ch, port, web):
        sessions = session_pb2_grpc.SessionServiceStub(ch)
        plans = plan_pb2_grpc.PlanServiceStub(ch)
        sessions.CreateSession(session.CreateSessionRequest(session=session.Session(
            session_id="lead", agent_id="lead")), metadata=META)
        sessions.CreateSession(session.CreateSessionRequest(session=session.Session(
            session_id="sub", agent_id="coder", parent_session_id="lead")), metadata=META)

        def step(items):
            plans.UpdatePlan(plan.UpdatePlanRequest(session_id="sub", plan=[
                plan.PlanItem(step=s, status=st) for s, st in items]), metadata=META)

        async def follow():
            card = await _card(web)
            assert card.name == "Cairn"
            assert card.supported_interfaces[0].protocol_binding == "GRPC"
            assert card.supported_interfaces[0].url == f"127.0.0.1:{port}"
            assert "bearer" in card.security_schemes
            client = _client(card)
            states = []
            for items in (
                [("Read", plan.STEP_STATUS_IN_PROGRESS), ("Fix", plan.STEP_STATUS_PENDING),
                 ("Test", plan.STEP_STATUS_PENDING), ("Ship", plan.STEP_STATUS_PENDING)],
                [("Read", plan.STEP_STATUS_COMPLETED), ("Fix", plan.STEP_STATUS_COMPLETED),
                 ("Test", plan.STEP_STATUS_COMPLETED), ("Ship", plan.STEP_STATUS_COMPLETED)],
            ):
                step(items)
                task = await client.get_task(a2a.GetTaskRequest(id="sub"))
                assert task.context_id == "lead"
                states.append(task.status.state)
            assert states == [a2a.TASK_STATE_WORKING, a2a.TASK_STATE_COMPLETED]
            text = [p.text for p in task.artifacts[0].parts if p.HasField("text")]
            assert text == ["[x] Read\n[x] Fix\n[x] Test\n[x] Ship\n"]
            listed = await client.list_tasks(a2a.ListTasksRequest(status=a2a.TASK_STATE_COMPLETED))
            assert [t.id for t in listed.tasks] == ["sub"]
            with pytest.raises(Exception) as missing:
                await client.get_task(a2a.GetTaskRequest(id="nobody"))
            assert "not found" in str(missing.value).lower()
            await client.close()

        asyncio.run(follow())


def _principal(ch, pid, role):
    """A principal for the agent id `coder`, made by the admin: its token."""

    return auth_pb2_grpc.AuthServiceStub(ch).CreatePrincipal(auth.CreatePrincipalRequest(
        principal=auth.Principal(principal_id=pid, roles=[role], agent_ids=["coder"])), metadata=META).token


def _sub_agent(ch):
    """The agent `coder` with its session `sub`: the metadata it calls with."""

    coder = (("authorization", f"Bearer {_principal(ch, 'coder', auth.ROLE_AGENT)}"),)
    session_pb2_grpc.SessionServiceStub(ch).CreateSession(session.CreateSessionRequest(
        session=session.Session(session_id="sub", agent_id="coder")), metadata=META)
    return coder


def _told(event):
    """What a stream event tells, and its resume token."""
    kind = event.WhichOneof("payload")
    if kind == "task":
        what, meta = ("task", a2a.TaskState.Name(event.task.status.state)), event.task.metadata
    elif kind == "status_update":
        what, meta = a2a.TaskState.Name(event.status_update.status.state), event.status_update.metadata
    else:
        parts = event.artifact_update.artifact.parts
        what, meta = ("plan", [p.text for p in parts if p.HasField("text")][0]), event.artifact_update.metadata
    return what, meta["cairn_resume"]


@pytest.mark.parametrize("binding", ["GRPC", "JSONRPC"])
def test_the_sdk_subscribes_answers_the_approval_and_resumes(binding):

    with _serve() as (ch, port, web):
        coder = _sub_agent(ch)
        boss = _principal(ch, "boss", auth.ROLE_APPROVER)
        plans = plan_pb2_grpc.PlanServiceStub(ch)

        async def follow():
            card = await _card(web)
            assert card.capabilities.streaming
            resume = [e.uri for e in card.capabilities.extensions]
            assert resume == ["urn:cairn:a2a:resume:v1"]
            assert [i.protocol_binding for i in card.supported_interfaces] == ["GRPC", "JSONRPC"]
            assert card.supported_interfaces[1].url == f"http://127.0.0.1:{web}/a2a"
            watcher = _client(card, streaming=True, binding=binding)
            # The binding asked for is the one used, not a fallback.
            transport = {"GRPC": "GrpcTransport", "JSONRPC": "JsonRpcTransport"}[binding]
            assert type(watcher._transport).__name__ == transport, type(watcher._transport)
            seen, tokens = [], []
            stream = watcher.subscribe(a2a.SubscribeToTaskRequest(id="sub")).__aiter__()

            async def until(state):
                while True:
                    what, token = _told(await asyncio.wait_for(anext(stream), 10))
                    seen.append(what)
                    tokens.append(token)
                    if what == state:
                        return

            await until(("task", "TASK_STATE_SUBMITTED"))
            # The sub-agent works over cairn.v1 while the SDK follows it.
            await asyncio.to_thread(plans.UpdatePlan, plan.UpdatePlanRequest(session_id="sub", plan=[
                plan.PlanItem(step=s, status=plan.STEP_STATUS_PENDING) for s in ("Read", "Fix", "Test", "Ship")
            ]), metadata=coder)
            await until("TASK_STATE_WORKING")
            await asyncio.to_thread(plans.EnterPlanMode, plan.EnterPlanModeRequest(session_id="sub", goal="ship"), metadata=coder)
            await asyncio.to_thread(plans.ExitPlanMode, plan.ExitPlanModeRequest(session_id="sub", plan=plan.ImplementationPlan(
                summary="ship it", steps=[plan.ImplementationStep(id=1, description="build"),
                                          plan.ImplementationStep(id=2, description="deploy", depends_on=[1])])), metadata=coder)
            await until("TASK_STATE_INPUT_REQUIRED")

            # Answered through A2A by another principal, an approver.
            # A streaming client sends it as SendStreamingMessage: the task
            # as answered comes first (the stream would stay open until the
            # task ends or awaits the next answer).
            approver = _client(card, token=boss, streaming=True, binding=binding)
            answer = a2a.SendMessageRequest(message=a2a.Message(
                message_id="answer-1", task_id="sub", role=a2a.ROLE_USER, parts=[a2a.Part(text="approve")]))
            replies = approver.send_message(answer)
            first = await asyncio.wait_for(anext(replies), 10)
            await replies.aclose()
            assert a2a.TaskState.Name(first.task.status.state) == "TASK_STATE_WORKING", first
            status = await asyncio.to_thread(plans.GetPlanStatus, plan.GetPlanStatusRequest(session_id="sub"), metadata=coder)
            assert status.status.active.approver == "boss"
            await until("TASK_STATE_WORKING")

            # The subscriber goes away; the agent finishes meanwhile.
            await stream.aclose()
            for step in (1, 2):
                await asyncio.to_thread(plans.CompleteStep, plan.CompleteStepRequest(
                    session_id="sub", step_id=step, verification_result="ok"), metadata=coder)
            # Back with the last token it got: everything after, then the end.
            context = a2a_client.ClientCallContext(service_parameters={
                "cairn-resume": tokens[-1], "A2A-Extensions": resume[0]})
            async for event in watcher.subscribe(a2a.SubscribeToTaskRequest(id="sub"), context=context):
                seen.append(_told(event)[0])
            assert seen == [
                ("task", "TASK_STATE_SUBMITTED"),
                ("plan", "[ ] Read\n[ ] Fix\n[ ] Test\n[ ] Ship\n"),
                "TASK_STATE_WORKING",
                "TASK_STATE_INPUT_REQUIRED",
                ("plan", "[>] build\n[ ] deploy\n"),
                "TASK_STATE_WORKING",
                ("task", "TASK_STATE_WORKING"),
                ("plan", "[x] build\n[>] deploy\n"),
                ("plan", "[x] build\n[x] deploy\n"),
                "TASK_STATE_COMPLETED",
            ], seen
            await watcher.close()
            await approver.close()

        asyncio.run(follow())


class _Receiver(http.server.BaseHTTPRequestHandler):
    """A push notification receiver: keeps what it is sent."""

    got = []

    def do_POST(self):  # noqa: N802 (the http.server API)
        body = self.rfile.read(int(self.headers["content-length"]))
        type(self).got.append((dict(self.headers), json.loads(body)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_push_notification_configs_deliver_each_state_change_through_the_webhook_outbox():

    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{receiver.server_address[1]}/a2a-push"
    with _serve("--webhook-allow-http") as (ch, port, web):
        coder = _sub_agent(ch)
        plans = plan_pb2_grpc.PlanServiceStub(ch)

        async def push():
            card = await _card(web)
            assert card.capabilities.push_notifications
            client = _client(card)
            made = await client.create_task_push_notification_config(a2a.TaskPushNotificationConfig(
                task_id="sub", url=hook, token="tok-123",
                authentication=a2a.AuthenticationInfo(scheme="Bearer", credentials="receiver-secret")))
            assert made.id and made.task_id == "sub"
            # Read back without what is kept sealed.
            got = await client.get_task_push_notification_config(
                a2a.GetTaskPushNotificationConfigRequest(task_id="sub", id=made.id))
            assert (got.url, got.token, got.authentication.scheme, got.authentication.credentials) == (
                hook, "", "Bearer", "")

            # The sub-agent works; each change of state is pushed once.
            plans.UpdatePlan(plan.UpdatePlanRequest(session_id="sub", plan=[
                plan.PlanItem(step=s, status=plan.STEP_STATUS_PENDING) for s in ("a", "b", "c", "d")]), metadata=coder)
            plans.EnterPlanMode(plan.EnterPlanModeRequest(session_id="sub", goal="ship"), metadata=coder)
            plans.ExitPlanMode(plan.ExitPlanModeRequest(session_id="sub", plan=plan.ImplementationPlan(
                summary="ship it", steps=[plan.ImplementationStep(id=1, description="build")])), metadata=coder)
            answer = a2a.SendMessageRequest(message=a2a.Message(
                message_id="a", task_id="sub", role=a2a.ROLE_USER, parts=[a2a.Part(text="approve")]))
            [_ async for _ in client.send_message(answer)]
            plans.CompleteStep(plan.CompleteStepRequest(session_id="sub", step_id=1, verification_result="ok"), metadata=coder)
            for _ in range(200):
                if len(_Receiver.got) >= 4:
                    break
                await asyncio.sleep(0.05)
            states = [b["statusUpdate"]["status"]["state"] for _, b in _Receiver.got]
            assert states == ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING",
                              "TASK_STATE_COMPLETED"], _Receiver.got
            for headers, body in _Receiver.got:
                headers = {k.lower(): v for k, v in headers.items()}
                assert headers["x-a2a-notification-token"] == "tok-123"
                assert headers["authorization"] == "Bearer receiver-secret"
                assert headers["content-type"] == "application/a2a+json"
                assert body["statusUpdate"]["taskId"] == "sub"
            assert len({h["webhook-id"] for h, _ in _Receiver.got}) == 4

            await client.delete_task_push_notification_config(
                a2a.DeleteTaskPushNotificationConfigRequest(task_id="sub", id=made.id))
            listed = await client.list_task_push_notification_configs(
                a2a.ListTaskPushNotificationConfigsRequest(task_id="sub"))
            assert list(listed.configs) == []

            # A deleted session takes its configs along: made again under
            # the same id, it has none.
            await client.create_task_push_notification_config(
                a2a.TaskPushNotificationConfig(task_id="sub", id="second", url=hook))
            sessions = session_pb2_grpc.SessionServiceStub(ch)
            sessions.DeleteSession(session.DeleteSessionRequest(session_id="sub"), metadata=META)
            sessions.CreateSession(session.CreateSessionRequest(
                session=session.Session(session_id="sub", agent_id="coder")), metadata=META)
            listed = await client.list_task_push_notification_configs(
                a2a.ListTaskPushNotificationConfigsRequest(task_id="sub"))
            assert list(listed.configs) == []
            await client.close()

        asyncio.run(push())
    receiver.shutdown()


def test_a_push_config_tells_each_change_once_across_a_killed_server():
    """At least once, and no change told twice: the config's cursor keeps
    the state it last told, so a restarted server goes on from it."""

    got = []

    class Receiver(_Receiver):
        pass

    Receiver.got = got
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{receiver.server_address[1]}/push"

    def states():
        # A receiver drops a repeat by its webhook-id, as Standard Webhooks say.
        seen, out = set(), []
        for headers, body in got:
            wid = {k.lower(): v for k, v in headers.items()}["webhook-id"]
            if wid not in seen:
                seen.add(wid)
                out.append(body["statusUpdate"]["status"]["state"])
        return out

    def wait_for(n):
        for _ in range(300):
            if len(states()) >= n:
                return
            time.sleep(0.05)
        raise AssertionError(f"{states()} after 15 s")

    ports = (_free_port(), _free_port())
    with _serve("--webhook-allow-http", ports=ports) as (ch, port, web):
        server, data = _serve.last
        coder = _sub_agent(ch)

        async def configure():
            client = _client(await _card(web))
            await client.create_task_push_notification_config(
                a2a.TaskPushNotificationConfig(task_id="sub", url=hook))
            await client.close()

        asyncio.run(configure())
        plans = plan_pb2_grpc.PlanServiceStub(ch)
        plans.UpdatePlan(plan.UpdatePlanRequest(session_id="sub", plan=[
            plan.PlanItem(step=s, status=plan.STEP_STATUS_PENDING) for s in ("a", "b", "c", "d")]), metadata=coder)
        plans.EnterPlanMode(plan.EnterPlanModeRequest(session_id="sub", goal="ship"), metadata=coder)
        plans.ExitPlanMode(plan.ExitPlanModeRequest(session_id="sub", plan=plan.ImplementationPlan(
            summary="ship it", steps=[plan.ImplementationStep(id=1, description="build"),
                                      plan.ImplementationStep(id=2, description="ship")])), metadata=coder)
        plans.ApprovePlan(plan.ApprovePlanRequest(session_id="sub"), metadata=META)
        wait_for(3)
        server.kill()
        server.wait(timeout=30)
    with _serve("--webhook-allow-http", data=data, ports=ports) as (ch, port, web):
        plans = plan_pb2_grpc.PlanServiceStub(ch)
        # Working still: nothing to tell, unless the restart forgot what it
        # last told.
        plans.CompleteStep(plan.CompleteStepRequest(session_id="sub", step_id=2, verification_result="ok"), metadata=coder)
        plans.CompleteStep(plan.CompleteStepRequest(session_id="sub", step_id=1, verification_result="ok"), metadata=coder)
        wait_for(4)
        time.sleep(0.5)
        assert states() == ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING",
                            "TASK_STATE_COMPLETED"], got
    receiver.shutdown()
