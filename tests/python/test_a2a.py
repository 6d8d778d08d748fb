"""Cairn as an A2A server, through the official Python SDK (`a2a-sdk`
1.3.0, installed by .ci/run): the SDK resolves the agent card from the web
listener, picks the gRPC interface it names, and reads a sub-agent's
session as a task while the sub-agent works through its plan over Cairn's
own gRPC API."""

import asyncio
import pathlib
import subprocess
import tempfile

import grpc
import httpx
import pytest

from conftest import BINARY, _free_port

a2a_client = pytest.importorskip("a2a.client", reason="a2a-sdk[grpc] is installed by .ci/run")
from a2a.types import a2a_pb2 as a2a  # noqa: E402

from cairn.v1 import plan_pb2 as plan  # noqa: E402
from cairn.v1 import plan_pb2_grpc  # noqa: E402
from cairn.v1 import session_pb2 as session  # noqa: E402
from cairn.v1 import session_pb2_grpc  # noqa: E402

ADMIN = "a2a-admin-token-0123456789abcdef"
META = (("authorization", f"Bearer {ADMIN}"),)


class Bearer(grpc.aio.UnaryUnaryClientInterceptor):
    """Presents the admin's token on every A2A call."""

    async def intercept_unary_unary(self, continuation, details, request):
        details = details._replace(metadata=list(details.metadata or []) + list(META))
        return await continuation(details, request)


def test_the_sdk_resolves_the_card_and_follows_a_sub_agent_s_task():
    port, web = _free_port(), _free_port()
    data = tempfile.mkdtemp(prefix="cairn-a2a-")
    token_file = pathlib.Path(data) / "admin-token"
    token_file.write_text(ADMIN + "\n")
    server = subprocess.Popen(
        [
            BINARY, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data,
            "--web-listen", f"127.0.0.1:{web}", "--auth", "token", "--admin-token-file", str(token_file),
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(ch).result(timeout=30)
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
            async with httpx.AsyncClient() as http:
                card = await a2a_client.A2ACardResolver(http, f"http://127.0.0.1:{web}").get_agent_card()
            assert card.name == "Cairn"
            assert card.supported_interfaces[0].protocol_binding == "GRPC"
            assert card.supported_interfaces[0].url == f"http://127.0.0.1:{port}"
            assert "bearer" in card.security_schemes
            config = a2a_client.ClientConfig(
                streaming=False,
                supported_protocol_bindings=["GRPC"],
                grpc_channel_factory=lambda url: grpc.aio.insecure_channel(
                    url.removeprefix("http://"), interceptors=[Bearer()]),
            )
            client = a2a_client.ClientFactory(config).create(card)
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
    finally:
        server.terminate()
        server.wait(timeout=30)
