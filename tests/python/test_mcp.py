"""The seed workflow through `cairn mcp`, driven by the official Python MCP
client over stdio, against the real server."""

import asyncio
import json
import subprocess

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from conftest import BINARY

SEED_TOOLS = {
    "update_plan",
    "todo_read",
    "todo_write",
    "plan_enter",
    "plan_exit",
    "plan_status",
    "plan_approve",
    "plan_reject",
    "plan_step_complete",
    "plan_complete",
    "plan_modify",
    "wait",
    "check_action",
    "inbox",
    "inbox_decide",
}


def run(coro):
    return asyncio.run(coro)


async def with_agent(server_addr, agent, session, body, parent=None):
    args = ["mcp", "--server", server_addr, "--agent-id", agent, "--session-id", session]
    if parent:
        args += ["--parent-session-id", parent]
    params = StdioServerParameters(command=BINARY, args=args)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as mcp:
            await mcp.initialize()
            return await body(mcp)


async def call(mcp, _tool, **arguments):
    result = await mcp.call_tool(_tool, arguments)
    text = result.content[0].text
    return result.is_error, text


def steps(n, current=0):
    return [
        {"step": f"step {i + 1}", "status": "completed" if i < current else "in_progress" if i == current else "pending"}
        for i in range(n)
    ]


def test_tools_are_listed_by_their_seed_names(server_addr):
    async def body(mcp):
        tools = await mcp.list_tools()
        return {t.name: t for t in tools.tools}

    tools = run(with_agent(server_addr, "lister", "lister", body))
    assert SEED_TOOLS <= set(tools)
    assert "in_progress" in tools["update_plan"].description


def test_update_plan_hint_errors_and_a_walk_to_completion(server_addr):
    async def body(mcp):
        err, text = await call(mcp, "update_plan", plan=steps(2))
        assert not err
        assert text == (
            '<system_hint tool="update_plan" reason="simple_task">Task "step 1" is simple (2 steps)'
            " - execute directly without update_plan.</system_hint>"
        )
        two = steps(5)
        two[1]["status"] = "in_progress"
        err, text = await call(mcp, "update_plan", plan=two)
        assert err and text == "At most one step can be in_progress at a time"
        for current in range(6):
            err, text = await call(mcp, "update_plan", explanation=f"at {current}", plan=steps(5, current))
            assert not err, text
            reply = json.loads(text)
            assert reply["message"] == "Plan updated"
            assert reply["explanation"] == f"at {current}"
            assert [s["status"] for s in reply["plan"]] == [s["status"] for s in steps(5, current)]
        # Bad input is a tool error, and the process carries on.
        err, text = await call(mcp, "update_plan", plan=[{"step": "x", "status": "doing"}] * 4)
        assert err and "status" in text
        err, _ = await call(mcp, "update_plan", plan=steps(4))
        assert not err
        # Arguments that do not fit the tool's schema are a tool error too.
        err, text = await call(mcp, "update_plan", steps=[])
        assert err and "plan" in text
        err, _ = await call(mcp, "todo_read")
        assert not err

    run(with_agent(server_addr, "walker", "walker", body))


def test_todos_with_the_merge_rules(server_addr):
    async def body(mcp):
        err, text = await call(mcp, "todo_read")
        assert not err and json.loads(text) == {"todos": []}
        todos = [
            {"id": "1", "content": "Design", "status": "in_progress", "priority": "high"},
            {"id": "2", "content": "Build", "status": "pending", "priority": "medium"},
        ]
        err, text = await call(mcp, "todo_write", todos=todos)
        assert not err, text
        first = json.loads(text)["todos"]
        assert first[0]["created_at"].endswith("Z") and "T" in first[0]["created_at"]
        err, text = await call(mcp, "todo_write", todos=[{"id": "3", "content": "Test", "status": "in_progress", "priority": "low"}])
        merged = json.loads(text)["todos"]
        assert [(t["id"], t["status"]) for t in merged] == [("1", "completed"), ("2", "completed"), ("3", "in_progress")]
        err, text = await call(mcp, "todo_write", todos=[{"id": "3", "content": "Test", "status": "completed"}])
        assert [(t["id"], t["status"]) for t in json.loads(text)["todos"]] == [("3", "completed")]
        err, text = await call(
            mcp,
            "todo_write",
            todos=[
                {"id": "a", "content": "A", "status": "in_progress"},
                {"id": "b", "content": "B", "status": "in_progress"},
            ],
        )
        assert err and text == "At most one todo can be in_progress at a time"
        err, text = await call(mcp, "todo_read")
        assert [t["id"] for t in json.loads(text)["todos"]] == ["3"]

    run(with_agent(server_addr, "todo-agent", "todo-agent", body))


def test_plan_mode_workflow_and_blocked_writes(server_addr):
    plan = {
        "summary": "Add JWT auth",
        "approach": "Middleware",
        "alternatives_considered": ["Cookies"],
        "steps": [
            {"id": 1, "description": "Token type", "files": ["src/token.rs"], "verification": "cargo test token"},
            {"id": 2, "description": "Middleware", "depends_on": [1], "verification": "cargo test mw"},
        ],
        "risks": ["Clock skew"],
        "files_to_create": ["src/token.rs"],
        "files_to_modify": ["src/main.rs"],
        "tests_to_write": ["tests/auth.rs"],
        "estimated_complexity": "medium",
    }

    async def body(mcp):
        err, text = await call(mcp, "plan_exit", plan=plan)
        assert err and text == "Not in plan mode. Call plan_enter first."
        err, text = await call(mcp, "plan_enter", goal="Add authentication")
        assert not err and json.loads(text)["mode"] == "planning"
        err, text = await call(mcp, "plan_enter", goal="again")
        assert err and text == "Already in plan mode"
        err, text = await call(mcp, "check_action", tool="write_file")
        verdict = json.loads(text)
        assert verdict["allowed"] is False and "plan" in verdict["reason"]
        err, text = await call(mcp, "check_action", tool="cron", action="create")
        assert json.loads(text)["allowed"] is False
        err, text = await call(mcp, "check_action", tool="read_file")
        assert json.loads(text)["allowed"] is True
        err, text = await call(mcp, "plan_exit", plan=plan)
        status = json.loads(text)
        assert status["mode"] == "awaiting_approval" and status["pending_plan"]["plan_id"].startswith("plan_")
        err, text = await call(mcp, "plan_enter", goal="again")
        assert err and text == "A plan is awaiting approval. Approve or reject it before entering plan mode again."
        err, text = await call(mcp, "plan_approve")
        status = json.loads(text)
        assert status["mode"] == "normal"
        assert status["active_plan"]["current_step"]["id"] == 1
        err, text = await call(mcp, "plan_step_complete", step_id=2, verification_result="ok")
        assert err and text == "Step 2 depends on incomplete steps: 1"
        err, text = await call(mcp, "plan_step_complete", step_id=7, verification_result="ok")
        assert err and text == "Step 7 not found in plan"
        err, text = await call(mcp, "plan_step_complete", step_id=1, verification_result="2 passed")
        assert json.loads(text)["active_plan"]["progress"] == {"completed": 1, "total": 2}
        err, text = await call(mcp, "plan_step_complete", step_id=1, verification_result="again")
        assert err and text == "Step 1 already completed"
        err, text = await call(mcp, "plan_modify", step_id=2, reason="simpler", new_description="Tower layer")
        assert json.loads(text)["pending_modifications"][0]["new_description"] == "Tower layer"
        err, text = await call(mcp, "plan_step_complete", step_id=2, verification_result="3 passed")
        err, text = await call(mcp, "plan_status")
        assert json.loads(text)["active_plan"]["progress"] == {"completed": 2, "total": 2}
        # The CLI presents plan mode in the same shape, from the same code.
        cli = subprocess.run(
            [BINARY, "plan", "status", "planner", "--server", server_addr, "--output", "json"],
            capture_output=True, text=True, check=True,
        )
        shown, told = json.loads(cli.stdout), json.loads(text)
        # The lease's last sign of life moves with every renewal of the
        # running `cairn mcp`; its state does not.
        assert shown.pop("lease")["state"] == told.pop("lease")["state"] == "active"
        assert shown == told
        err, text = await call(mcp, "plan_complete", summary="Auth works")
        assert not err and json.loads(text)["active_plan"] is None
        err, text = await call(mcp, "plan_enter", goal="Another")
        err, text = await call(mcp, "plan_exit", plan=plan)
        err, text = await call(mcp, "plan_reject", reason="not now")
        assert json.loads(text)["mode"] == "normal"

    run(with_agent(server_addr, "planner", "planner", body))


def test_an_approving_agent_decides_from_its_inbox(server_addr):
    plan = {
        "summary": "Cache the sessions",
        "steps": [{"id": 1, "description": "LRU"}, {"id": 2, "description": "Metrics", "depends_on": [1]}],
    }

    async def submit(mcp):
        await call(mcp, "plan_enter", goal="Faster reads")
        err, text = await call(mcp, "plan_exit", plan=plan)
        assert not err, text

    run(with_agent(server_addr, "inbox-coder", "inbox:coder", submit))

    async def decide(mcp):
        err, text = await call(mcp, "inbox")
        assert not err, text
        mine = [i for i in json.loads(text)["items"] if i["session_id"] == "inbox:coder"]
        assert len(mine) == 1, text
        item = mine[0]
        assert item["kind"] == "plan" and item["summary"] == "Cache the sessions" and item["goal"] == "Faster reads"
        assert item["waiting_seconds"] >= 0 and item["plan_id"].startswith("plan_")
        err, text = await call(mcp, "inbox_decide", session_id="inbox:coder", decision="maybe")
        assert err and text == 'decision: "maybe" is not one of approve or reject', text
        err, text = await call(mcp, "inbox_decide", session_id="inbox:coder", decision="approve")
        assert not err, text
        assert json.loads(text)["active_plan"]["plan_id"] == item["plan_id"]
        err, text = await call(mcp, "inbox")
        assert all(i["session_id"] != "inbox:coder" for i in json.loads(text)["items"])

    run(with_agent(server_addr, "inbox-lead", "inbox:lead", decide))


def test_an_orchestrator_waits_for_its_sub_agent(server_addr):
    async def sub(mcp):
        await call(mcp, "update_plan", plan=steps(4, 4))

    async def main(mcp):
        err, text = await call(mcp, "wait", timeout_seconds=1)
        reply = json.loads(text)
        assert reply["satisfied"] is False or reply["sessions"]
        run_sub = with_agent(server_addr, "sub-agent", "orch-mcp:sub", sub, parent="orch-mcp")
        await run_sub
        err, text = await call(mcp, "wait", timeout_seconds=10)
        reply = json.loads(text)
        assert reply["satisfied"] is True
        assert any(s["session_id"] == "orch-mcp:sub" and s["completed"] == 4 for s in reply["sessions"])

    run(with_agent(server_addr, "orchestrator", "orch-mcp", main))


def test_a_stopped_server_is_a_tool_error_within_the_call_timeout():
    """With nothing listening, a tool answers with an error in bounded time
    instead of leaving the agent waiting forever."""
    from conftest import _free_port

    dead = f"http://127.0.0.1:{_free_port()}"

    async def main():
        params = StdioServerParameters(
            command=BINARY, args=["mcp", "--server", dead, "--agent-id", "lost", "--call-timeout", "2s"]
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as mcp:
                await mcp.initialize()
                return await asyncio.wait_for(call(mcp, "todo_read"), timeout=20)

    err, text = run(main())
    assert err, text


def test_malformed_input_lines_get_a_parse_error():
    """JSON-RPC 2.0: input that is not JSON is answered with -32700 and a
    null id; the session carries on."""
    import subprocess

    proc = subprocess.Popen(
        [BINARY, "mcp", "--agent-id", "p", "--call-timeout", "2s"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        proc.stdin.write(b"this is not json\n")
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline())
        assert reply["jsonrpc"] == "2.0" and reply["id"] is None
        assert reply["error"]["code"] == -32700
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        }
        proc.stdin.write((json.dumps(init) + "\n").encode())
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline())
        assert reply["id"] == 1 and "result" in reply, reply
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


def test_every_tool_says_what_it_does_and_statuses_are_enums(server_addr):
    """Annotations that say the truth (Codex decides from them whether a call
    needs approval), and schemas a model need not guess from prose."""

    async def body(mcp):
        return (await mcp.list_tools()).tools

    tools = {t.name: t for t in run(with_agent(server_addr, "annotated", "annotated", body))}
    read_only = {"todo_read", "plan_status", "wait", "check_action", "inbox"}
    for name, tool in tools.items():
        a = tool.annotations
        assert a is not None and a.title, name
        assert a.read_only_hint == (name in read_only), name
        assert a.open_world_hint is False, name
        if name not in read_only:
            assert a.destructive_hint == (name in {"update_plan", "todo_write", "plan_reject", "inbox_decide"}), name
    status = json.dumps(tools["update_plan"].input_schema)
    assert '"enum": ["pending", "in_progress", "completed"]' in status, status
    todo = json.dumps(tools["todo_write"].input_schema)
    assert '"enum": ["pending", "in_progress", "completed"]' in todo, todo
    exit_schema = json.dumps(tools["plan_exit"].input_schema)
    assert '"minimum": 1' in exit_schema, exit_schema
    assert "Cairn" in tools["update_plan"].description
