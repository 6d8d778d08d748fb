"""The seed tools over MCP's Streamable HTTP transport at /mcp on the web
listener, driven by the official Python MCP client as a remote agent would:
a URL and a token, no local binary."""

import asyncio
import concurrent.futures
import json
import subprocess
import tempfile
import time
from pathlib import Path

import grpc
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from cairn.v1 import auth_pb2 as auth
from cairn.v1 import auth_pb2_grpc
from cairn.v1 import session_pb2 as session
from cairn.v1 import session_pb2_grpc
from conftest import BINARY, _free_port

ADMIN = "python-mcp-http-admin-0123456789"


def _serve(*flags):
    port, web = _free_port(), _free_port()
    data = tempfile.mkdtemp(prefix="cairn-mcp-http-")
    proc = subprocess.Popen(
        [BINARY, "serve", "--listen", f"127.0.0.1:{port}", "--web-listen", f"127.0.0.1:{web}", "--data-dir", data, *flags],
        stderr=subprocess.DEVNULL,
    )
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(ch).result(timeout=30)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            httpx2.get(f"http://127.0.0.1:{web}/login", timeout=2)
            break
        except httpx2.HTTPError:
            time.sleep(0.1)
    return proc, ch, f"http://127.0.0.1:{web}"


def _stop(proc, ch):
    ch.close()
    proc.terminate()
    proc.wait(timeout=20)
    assert proc.returncode == 0


async def _agent(url, body, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with create_mcp_http_client(headers=headers) as client:
        async with streamable_http_client(url, http_client=client) as (read, write, *_):
            async with ClientSession(read, write) as mcp:
                await mcp.initialize()
                return await body(mcp)


async def _call(mcp, _tool, **arguments):
    result = await mcp.call_tool(_tool, arguments)
    return result.is_error, result.content[0].text


def _steps(n, current=0):
    return [
        {"step": f"step {i + 1}", "status": "completed" if i < current else "in_progress" if i == current else "pending"}
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def open_server():
    proc, ch, web = _serve()
    try:
        yield ch, web
    finally:
        _stop(proc, ch)


def test_the_seed_workflow_over_http_with_rule_violations_as_tool_errors(open_server):
    ch, web = open_server
    url = f"{web}/mcp?agent_id=coder&session_id=orch:coder&parent_session_id=orch"
    session_pb2_grpc.SessionServiceStub(ch).CreateSession(
        session.CreateSessionRequest(session=session.Session(session_id="orch", agent_id="main"))
    )

    async def body(mcp):
        tools = {t.name for t in (await mcp.list_tools()).tools}
        assert {"update_plan", "todo_write", "plan_enter", "plan_exit", "wait", "check_action"} <= tools
        two = _steps(5)
        two[1]["status"] = "in_progress"
        err, text = await _call(mcp, "update_plan", plan=two)
        assert err and text == "At most one step can be in_progress at a time"
        for current in range(6):
            err, text = await _call(mcp, "update_plan", plan=_steps(5, current))
            assert not err, text
        err, text = await _call(mcp, "todo_write", todos=[{"id": "1", "content": "ship", "status": "in_progress"}])
        assert not err, text
        err, text = await _call(mcp, "plan_exit", plan={"summary": "x", "steps": []})
        assert err and text == "Not in plan mode. Call plan_enter first."
        err, text = await _call(mcp, "plan_enter", goal="Refactor")
        assert not err and json.loads(text)["mode"] == "planning"
        err, text = await _call(mcp, "check_action", tool="write_file")
        assert json.loads(text)["allowed"] is False
        return True

    assert asyncio.run(_agent(url, body))
    # The agent's session landed under its parent, as with `cairn mcp`.
    got = session_pb2_grpc.SessionServiceStub(ch).GetSession(session.GetSessionRequest(session_id="orch:coder"))
    assert got.session.parent_session_id == "orch"
    assert got.session.agent_id == "coder"


def test_an_agent_id_is_required(open_server):
    _, web = open_server
    r = httpx2.post(
        f"{web}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert r.status_code == 400
    assert "agent_id" in r.json()["error"]["message"]


def test_with_auth_the_token_must_act_as_the_agent():
    token_file = Path(tempfile.mkdtemp(prefix="cairn-admin-")) / "token"
    token_file.write_text(ADMIN + "\n")
    proc, ch, web = _serve("--auth", "token", "--admin-token-file", str(token_file))
    try:
        admin = (("authorization", f"Bearer {ADMIN}"),)
        admins = auth_pb2_grpc.AuthServiceStub(ch)
        session_pb2_grpc.SessionServiceStub(ch).CreateSession(
            session.CreateSessionRequest(session=session.Session(session_id="orch", agent_id="main")), metadata=admin
        )
        coder = admins.CreatePrincipal(
            auth.CreatePrincipalRequest(
                principal=auth.Principal(
                    principal_id="coder-agent", roles=[auth.ROLE_AGENT], agent_ids=["coder"], session_roots=["orch"]
                )
            ),
            metadata=admin,
        ).token

        async def write(mcp):
            return await _call(mcp, "update_plan", plan=_steps(4, 1))

        own = f"{web}/mcp?agent_id=coder&session_id=orch:coder&parent_session_id=orch"
        err, text = asyncio.run(_agent(own, write, token=coder))
        assert not err, text
        assert json.loads(text)["message"] == "Plan updated"

        # Another agent's id, or no token: refused before any tool runs.
        req = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        accept = {"Accept": "application/json, text/event-stream"}
        other = f"{web}/mcp?agent_id=reviewer&session_id=orch:reviewer&parent_session_id=orch"
        r = httpx2.post(other, json=req, headers={**accept, "Authorization": f"Bearer {coder}"})
        assert r.status_code == 403
        assert "does not act as agent reviewer" in r.json()["error"]["message"]
        r = httpx2.post(own, json=req, headers=accept)
        assert r.status_code == 401
        r = httpx2.post(own, json=req, headers={**accept, "Authorization": "Bearer cairn_not_a_real_token"})
        assert r.status_code == 401
    finally:
        _stop(proc, ch)


def _post(url, body, **headers):
    return httpx2.post(
        url,
        content=body if isinstance(body, (bytes, str)) else json.dumps(body),
        headers={"Accept": "application/json, text/event-stream", "Content-Type": "application/json", **headers},
        timeout=10,
    )


def test_json_rpc_errors_as_clients_expect_and_localhost_is_this_listener():
    """What the MCP conformance suite checks of a server, beyond the happy
    path: malformed bodies, missing params, and the loopback names."""
    metrics = _free_port()
    proc, ch, base = _serve("--metrics-listen", f"127.0.0.1:{metrics}")
    web = base.rsplit(":", 1)[1]
    try:
        url = f"{base}/mcp?agent_id=conf"
        r = _post(url, b"{not json")
        assert r.status_code == 400 and r.json()["error"]["code"] == -32700, r.text
        r = _post(url, {"id": 1, "method": "ping"})
        assert r.status_code == 400 and r.json()["error"]["code"] == -32600, r.text
        for method in ["tools/call", "initialize"]:
            r = _post(url, {"jsonrpc": "2.0", "id": 7, "method": method})
            body = r.json()
            assert body["error"]["code"] == -32602 and body["id"] == 7, r.text
        # A page of this listener under `localhost` may call it; another
        # origin may not (DNS rebinding).
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        r = _post(url, init, Origin=f"http://localhost:{web}")
        assert r.status_code == 200, r.text
        r = _post(url, init, Origin="http://evil.example")
        assert r.status_code == 403, r.text

        # Tools are made per request, but the agent's session is created
        # once: three calls, one CreateSession.
        async def three(mcp):
            for _ in range(3):
                err, text = await _call(mcp, "todo_read")
                assert not err, text
            await _call(mcp, "update_plan", plan=_steps(4, 1))
            await _call(mcp, "update_plan", plan=_steps(4, 2))

        asyncio.run(_agent(f"{base}/mcp?agent_id=once&session_id=once", three))
        text = httpx2.get(f"http://127.0.0.1:{metrics}/metrics", timeout=5).text
        created = [
            line for line in text.splitlines()
            if line.startswith("cairn_rpc_requests_total") and 'method="CreateSession"' in line
        ]
        assert sum(float(line.rsplit(" ", 1)[1]) for line in created) == 1, created
    finally:
        _stop(proc, ch)


def test_a_cancelled_wait_stops(open_server):
    """notifications/cancelled over HTTP ends the running call: the wait
    answers at once instead of after its timeout."""
    _, web = open_server
    url = f"{web}/mcp?agent_id=waiter&session_id=waiter"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    assert _post(url, init).status_code == 200
    _post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    _post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "update_plan", "arguments": {"plan": _steps(4, 1)}}})
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "wait", "arguments": {"session_ids": ["waiter"], "timeout_seconds": 60}}}
    with concurrent.futures.ThreadPoolExecutor() as pool:
        waiting = pool.submit(lambda: httpx2.post(
            url, json=call, headers={"Accept": "application/json, text/event-stream"}, timeout=90))
        time.sleep(1)
        assert not waiting.done()
        r = _post(url, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}})
        assert r.status_code in (200, 202), r.text
        answer = waiting.result(timeout=90)
    # Ended by the cancellation (its error), not by the 60 s timeout (which
    # would answer the tool's result).
    assert answer.json()["error"]["code"] == -32800, answer.text
