"""The agents people already run, unchanged: the real Claude Code, Codex and
Gemini CLI from npm (pinned in tests/agents/package.json), each against a
loopback mock of its model API (mock_model.py, the one scripted part), with
Cairn's hooks installed by `cairn hook install` into a temporary config
dir. Cairn's state is then read through the gRPC API and a Watch.

Each CLI run takes one to a few seconds here. Without the CLIs
(`cd tests/agents && npm ci`), the tests are skipped, and fail under CI.
"""

import json
import os
import pathlib
import subprocess
import tempfile
import threading
import time

import grpc
import pytest

import mock_model
from cairn.v1 import plan_pb2 as plan
from cairn.v1 import plan_pb2_grpc
from cairn.v1 import session_pb2 as session
from cairn.v1 import session_pb2_grpc
from cairn.v1 import watch_pb2 as watch
from cairn.v1 import watch_pb2_grpc
from conftest import BINARY, ROOT, _free_port

CLIS = ROOT / "tests" / "agents" / "node_modules" / ".bin"


def _cli(name):
    path = CLIS / name
    if not path.exists():
        why = f"{path} is missing: run `cd tests/agents && npm ci`"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return str(path)


class Cairn:
    """A `cairn serve` on a fixed port, so that it can stop and come back."""

    def __init__(self):
        self.port = _free_port()
        self.web = _free_port()
        self.data = tempfile.mkdtemp(prefix="cairn-agents-")
        self.addr = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [BINARY, "serve", "--listen", f"127.0.0.1:{self.port}", "--web-listen", f"127.0.0.1:{self.web}",
             "--data-dir", self.data],
            stderr=subprocess.DEVNULL,
        )
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        grpc.channel_ready_future(self.channel).result(timeout=30)

    def stop(self):
        self.channel.close()
        self.proc.terminate()
        self.proc.wait(timeout=20)

    def sessions(self):
        return session_pb2_grpc.SessionServiceStub(self.channel)

    def plan(self, session_id):
        return plan_pb2_grpc.PlanServiceStub(self.channel).GetPlan(plan.GetPlanRequest(session_id=session_id)).plan

    def children(self, parent):
        r = self.sessions().ListSessions(session.ListSessionsRequest(parent_session_id=parent))
        return list(r.sessions)


class TreeWatch:
    """Every event of a session tree, from a revision, in a thread."""

    def __init__(self, cairn, root, start):
        stub = watch_pb2_grpc.WatchServiceStub(cairn.channel)
        self.call = stub.Watch(watch.WatchRequest(session_tree=root, start_revision=start))
        self.events = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for msg in self.call:
                if msg.WhichOneof("kind") == "event":
                    self.events.append(msg.event)
        except grpc.RpcError:
            pass

    def until(self, revision):
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.events and self.events[-1].revision >= revision:
                return self.events
            time.sleep(0.05)
        raise AssertionError(f"the watch did not reach revision {revision}: {self.events[-1:]}")

    def close(self):
        self.call.cancel()


STATUS = {
    plan.STEP_STATUS_PENDING: "pending",
    plan.STEP_STATUS_IN_PROGRESS: "in_progress",
    plan.STEP_STATUS_COMPLETED: "completed",
    plan.STEP_STATUS_CANCELLED: "cancelled",
}


def _steps(p):
    return [(i.step, STATUS[i.status]) for i in p.items]


def _install(cli, config_dir, cairn, parent="orch"):
    subprocess.run(
        [BINARY, "hook", "install", cli, "--config-dir", str(config_dir), "--server", cairn.addr,
         "--parent-session", parent],
        check=True,
        capture_output=True,
    )


def _run(argv, env, cwd, timeout=120):
    started = time.time()
    r = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    return r, time.time() - started


def _claude(script, cairn, work, spool):
    server, url = mock_model.serve(script)
    config = pathlib.Path(work) / "claude"
    _install("claude-code", config, cairn)
    env = dict(
        os.environ,
        ANTHROPIC_BASE_URL=url,
        ANTHROPIC_API_KEY="dummy",
        CLAUDE_CONFIG_DIR=str(config),
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        CLAUDE_CODE_ENABLE_TODO_TOOLS="1",
        ENABLE_TOOL_SEARCH="false",
        CAIRN_HOOK_SPOOL=str(spool),
    )
    try:
        return _run([_cli("claude"), "-p", "Make a plan and do it", "--output-format", "stream-json", "--verbose"], env, work)
    finally:
        server.shutdown()


def _tasks(names):
    calls = [("TaskCreate", {"subject": n, "description": n, "activeForm": n}) for n in names]
    for i in range(1, len(names) + 1):
        calls.append(("TaskUpdate", {"taskId": str(i), "status": "in_progress"}))
        calls.append(("TaskUpdate", {"taskId": str(i), "status": "completed"}))
    return calls


def _claude_session(cairn, parent="orch"):
    kids = [s for s in cairn.children(parent) if s.session_id.startswith("claude:")]
    assert len(kids) == 1, kids
    return kids[0]


@pytest.fixture()
def cairn():
    c = Cairn()
    c.sessions().CreateSession(session.CreateSessionRequest(session=session.Session(session_id="orch", agent_id="main")))
    try:
        yield c
    finally:
        if c.proc.poll() is None:
            c.stop()


def test_claude_code_tasks_land_step_by_step_and_the_tree_watch_sees_each(cairn, tmp_path):
    names = ["Write the parser", "Add tests", "Write the docs"]
    tree = TreeWatch(cairn, "orch", 1)
    _, took = _claude(mock_model.Script(_tasks(names)), cairn, tmp_path, tmp_path / "spool")
    print(f"Claude Code run with Cairn up: {took:.2f}s")
    s = _claude_session(cairn)
    assert s.agent_id == "claude-code"
    assert s.labels["hook.state"] == "ended"
    p = cairn.plan(s.session_id)
    assert _steps(p) == [(n, "completed") for n in names]
    assert [i.id for i in p.items] == [1, 2, 3]
    assert p.source == plan.PLAN_SOURCE_OBSERVED
    events = tree.until(p.revision)
    tree.close()
    # Every change of the tree, in order, with no gap: the store's
    # revisions are dense here, and only this tree is written.
    revisions = [e.revision for e in events]
    assert revisions == list(range(revisions[0], revisions[0] + len(revisions))), revisions
    # One plan event per action of the agent, each its state after it.
    states = [
        [STATUS[i.status] for i in e.plan.items]
        for e in events
        if e.WhichOneof("object") == "plan" and e.plan.session_id == s.session_id
    ]
    expected = [["pending"] * n for n in (1, 2, 3)]
    walk = ["pending"] * 3
    for i in range(3):
        for status in ("in_progress", "completed"):
            walk[i] = status
            expected.append(list(walk))
    assert states == expected


def test_a_claude_code_sub_agent_is_a_child_session_with_its_own_plan(cairn, tmp_path):
    # Claude Code's task list is the session's, shared with its sub-agents:
    # the parent's task is 1, the sub-agent's 2 and 3, and the sub-agent
    # also finishes the parent's.
    script = mock_model.Script(
        _tasks(["Parent task"])[:1]
        + [("Agent", {"description": "Plan child work", "prompt": "SUBTASK-CHILD: make a two step plan",
                      "subagent_type": "general-purpose", "run_in_background": False})],
        child=_tasks(["Child step one", "Child step two"])[:2]
        + [("TaskUpdate", {"taskId": "2", "status": "in_progress"}),
           ("TaskUpdate", {"taskId": "1", "status": "completed"})],
    )
    _claude(script, cairn, tmp_path, tmp_path / "spool")
    parent = _claude_session(cairn)
    kids = cairn.children(parent.session_id)
    assert len(kids) == 1, kids
    child = kids[0]
    assert child.agent_id == "general-purpose"
    assert child.session_id.startswith(parent.session_id + ":")
    assert child.labels["hook.state"] == "stopped"
    assert _steps(cairn.plan(child.session_id)) == [("Child step one", "in_progress"), ("Child step two", "pending")]
    # The parent's task is updated where it lives.
    assert _steps(cairn.plan(parent.session_id)) == [("Parent task", "completed")]


def _codex(script, cairn, work):
    server, url = mock_model.serve(script)
    home = pathlib.Path(work) / "codex"
    home.mkdir(parents=True)
    # The user's own config first; the install merges into it.
    (home / "config.toml").write_text(
        f'model = "gpt-5-mock"\nmodel_provider = "mock"\n[model_providers.mock]\nname = "mock"\n'
        f'base_url = "{url}/v1"\nwire_api = "responses"\nenv_key = "MOCK_KEY"\n'
    )
    _install("codex", home, cairn)
    env = dict(os.environ, CODEX_HOME=str(home), MOCK_KEY="dummy", CAIRN_HOOK_SPOOL=str(pathlib.Path(work) / "spool"))
    try:
        return _run([_cli("codex"), "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-hook-trust",
                     "Make a plan"], env, work)
    finally:
        server.shutdown()


PLAN0 = {"explanation": "Start", "plan": [{"step": "Write the parser", "status": "in_progress"},
                                          {"step": "Add tests", "status": "pending"}]}
PLAN1 = {"explanation": "Parser done", "plan": [{"step": "Write the parser", "status": "completed"},
                                                {"step": "Add tests", "status": "in_progress"}]}


def test_codex_update_plan_keeps_in_progress_and_a_spawned_agent_gets_a_child(cairn, tmp_path):
    _codex(mock_model.Script([("update_plan", PLAN0), ("update_plan", PLAN1)]), cairn, tmp_path / "one")
    kids = [s for s in cairn.children("orch") if s.session_id.startswith("codex:")]
    assert len(kids) == 1
    p = cairn.plan(kids[0].session_id)
    # What `codex exec --json` cannot show: the step in progress.
    assert _steps(p) == [("Write the parser", "completed"), ("Add tests", "in_progress")]
    assert p.explanation == "Parser done"

    script = mock_model.Script(
        [("spawn_agent", {"message": "SUBTASK-CHILD: make a two step plan"}),
         ("wait_agent", lambda body: {"targets": [mock_model.spawned_agent(body)], "timeout_ms": 20000})],
        child=[("update_plan", PLAN0), ("update_plan", PLAN1)],
    )
    _codex(script, cairn, tmp_path / "two")
    runs = [s for s in cairn.children("orch") if s.session_id.startswith("codex:") and s.session_id != kids[0].session_id]
    assert len(runs) == 1
    children = cairn.children(runs[0].session_id)
    assert len(children) == 1, children
    assert _steps(cairn.plan(children[0].session_id)) == [("Write the parser", "completed"), ("Add tests", "in_progress")]


def test_gemini_write_todos_keeps_cancelled(cairn, tmp_path):
    todos0 = {"todos": [{"description": "Write the parser", "status": "in_progress"},
                        {"description": "Add tests", "status": "pending"},
                        {"description": "Old idea", "status": "pending"}]}
    todos1 = {"todos": [{"description": "Write the parser", "status": "completed"},
                        {"description": "Add tests", "status": "in_progress"},
                        {"description": "Old idea", "status": "cancelled"}]}
    server, url = mock_model.serve(mock_model.Script([("write_todos", todos0), ("write_todos", todos1)]))
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    _install("gemini", home / ".gemini", cairn)
    settings = json.loads((home / ".gemini" / "settings.json").read_text())
    settings.setdefault("security", {}).setdefault("auth", {})["selectedType"] = "gemini-api-key"
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    env = dict(os.environ, GOOGLE_GEMINI_BASE_URL=url, GEMINI_API_KEY="dummy", GEMINI_CLI_HOME=str(home),
               CAIRN_HOOK_SPOOL=str(tmp_path / "spool"))
    try:
        _run([_cli("gemini"), "-p", "Make a plan", "--output-format", "stream-json", "-m", "gemini-2.5-pro",
              "--approval-mode", "yolo", "--skip-trust"], env, tmp_path)
    finally:
        server.shutdown()
    kids = [s for s in cairn.children("orch") if s.session_id.startswith("gemini:")]
    assert len(kids) == 1
    p = cairn.plan(kids[0].session_id)
    assert _steps(p) == [("Write the parser", "completed"), ("Add tests", "in_progress"), ("Old idea", "cancelled")]


def test_cairn_down_during_a_claude_code_run_and_the_spool_converges(cairn, tmp_path):
    names = ["Write the parser", "Add tests", "Write the docs"]
    _, up = _claude(mock_model.Script(_tasks(names)), cairn, tmp_path / "up", tmp_path / "spool-up")
    cairn.stop()
    _, down = _claude(mock_model.Script(_tasks(names)), cairn, tmp_path / "down", tmp_path / "spool")
    # Said, not asserted: timings belong to the machine.
    print(f"Claude Code run: {up:.2f}s with Cairn up, {down:.2f}s with Cairn down")
    cairn.start()
    r = subprocess.run([BINARY, "hook", "flush", "--server", cairn.addr, "--spool-dir", str(tmp_path / "spool")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    runs = [s for s in cairn.children("orch") if s.session_id.startswith("claude:")]
    assert len(runs) == 2
    for s in runs:
        # The run made while Cairn was down ends in the same state as the
        # one made with it up.
        assert _steps(cairn.plan(s.session_id)) == [(n, "completed") for n in names]
        assert cairn.sessions().GetSession(session.GetSessionRequest(session_id=s.session_id)).session.labels[
            "hook.state"] == "ended"


# ---- Cairn's own MCP tools, as the real CLIs see them

TWO_IN_PROGRESS = {"plan": [{"step": "Design", "status": "in_progress"}, {"step": "Build", "status": "in_progress"},
                            {"step": "Test", "status": "pending"}, {"step": "Ship", "status": "pending"}]}
GOOD = {"explanation": "Start", "plan": [{"step": "Design", "status": "in_progress"}, {"step": "Build", "status": "pending"},
                                         {"step": "Test", "status": "pending"}, {"step": "Ship", "status": "pending"}]}
RULE = "At most one step can be in_progress at a time"
MCP_QUERY = "agent_id=coder&session_id=orch:coder&parent_session_id=orch"


def _mcp_stdio(cairn):
    return [BINARY, "mcp", "--agent-id", "coder", "--session-id", "orch:coder", "--parent-session-id", "orch",
            "--server", cairn.addr]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_claude_code_uses_cairn_mcp_and_reads_the_exact_rule_text(cairn, tmp_path, transport):
    script = mock_model.Script([("mcp__cairn__update_plan", TWO_IN_PROGRESS), ("mcp__cairn__update_plan", GOOD)])
    server, url = mock_model.serve(script)
    if transport == "stdio":
        cmd = _mcp_stdio(cairn)
        entry = {"command": cmd[0], "args": cmd[1:]}
    else:
        entry = {"type": "http", "url": f"http://127.0.0.1:{cairn.web}/mcp?{MCP_QUERY}"}
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"cairn": entry}}))
    env = dict(os.environ, ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="dummy", CLAUDE_CONFIG_DIR=str(tmp_path / "claude"),
               DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
               ENABLE_TOOL_SEARCH="false")
    try:
        _run([_cli("claude"), "-p", "Plan the work", "--output-format", "stream-json", "--verbose",
              "--mcp-config", str(config), "--allowedTools", "mcp__cairn__update_plan"], env, tmp_path)
    finally:
        server.shutdown()
    results = script.tool_results()
    assert len(results) == 2, results
    assert RULE in results[0], results[0]
    assert _steps(cairn.plan("orch:coder")) == [(s["step"], s["status"]) for s in GOOD["plan"]]


def _codex_mcp(cairn, tmp_path, transport, script, approve):
    server, url = mock_model.serve(script)
    home = tmp_path / "codex"
    home.mkdir(parents=True)
    if transport == "stdio":
        cmd = _mcp_stdio(cairn)
        entry = f'command = "{cmd[0]}"\nargs = {json.dumps(cmd[1:])}\n'
    else:
        entry = f'url = "http://127.0.0.1:{cairn.web}/mcp?{MCP_QUERY}"\n'
    if approve:
        entry += 'default_tools_approval_mode = "approve"\n'
    (home / "config.toml").write_text(
        f'model = "gpt-5-mock"\nmodel_provider = "mock"\napproval_policy = "never"\n'
        f'[model_providers.mock]\nname = "mock"\nbase_url = "{url}/v1"\nwire_api = "responses"\nenv_key = "MOCK_KEY"\n'
        f'[mcp_servers.cairn]\n{entry}'
    )
    env = dict(os.environ, CODEX_HOME=str(home), MOCK_KEY="dummy")
    try:
        _run([_cli("codex"), "exec", "--json", "--skip-git-repo-check", "Plan the work"], env, tmp_path)
    finally:
        server.shutdown()
    return script.tool_results()


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_codex_runs_cairns_read_only_tools_without_approval(cairn, tmp_path, transport):
    """approval_policy = "never" and no override for the server: the tools
    annotated read-only run; a tool that writes needs the server's
    `default_tools_approval_mode = "approve"`, as any writing tool does."""
    script = mock_model.Script([("mcp__cairn/todo_read", {}), ("mcp__cairn/plan_status", {}),
                                ("mcp__cairn/update_plan", GOOD)])
    results = _codex_mcp(cairn, tmp_path / "never", transport, script, approve=False)
    assert '\\"todos\\":[]' in results[0] or '"todos":[]' in results[0], results[0]
    assert "mode" in results[1], results[1]
    assert "requires approval" in results[2], results[2]

    script = mock_model.Script([("mcp__cairn/update_plan", TWO_IN_PROGRESS), ("mcp__cairn/update_plan", GOOD)])
    results = _codex_mcp(cairn, tmp_path / "approve", transport, script, approve=True)
    assert RULE in results[0], results[0]
    assert _steps(cairn.plan("orch:coder")) == [(s["step"], s["status"]) for s in GOOD["plan"]]


# --- Claude Code's plans approved in Cairn -----------------------------------

ADMIN = "agents-admin-token-0123456789abcdef"
PERMISSION_PROMPT = ROOT / "tests" / "python" / "permission_prompt.py"


def _as(token):
    return (("authorization", f"Bearer {token}"),)


def _plan_file(body):
    """Claude Code names the plan file in its plan-mode prompt; the mock
    model writes the plan there, as the real model does."""
    import re

    found = re.search(r"create your plan at ([^ \\\"]+?\.md)", json.dumps(body))
    assert found, "the plan-mode prompt names no plan file"
    return {"file_path": found.group(1), "content": "# Add a login page\n\n1. Write the form\n2. Check the password\n"}


@pytest.fixture()
def authed(tmp_path):
    """A Cairn with tokens: the hooks act as an orchestrator of `orch`, a
    lead approves in it."""
    token_file = tmp_path / "admin-token"
    token_file.write_text(ADMIN)
    c = Cairn.__new__(Cairn)
    c.port, c.web = _free_port(), _free_port()
    c.data = tempfile.mkdtemp(prefix="cairn-approvals-")
    c.addr = f"http://127.0.0.1:{c.port}"

    def start():
        c.proc = subprocess.Popen(
            [BINARY, "serve", "--listen", f"127.0.0.1:{c.port}", "--data-dir", c.data,
             "--auth", "token", "--admin-token-file", str(token_file)],
            stderr=subprocess.DEVNULL,
        )
        c.channel = grpc.insecure_channel(f"127.0.0.1:{c.port}")
        grpc.channel_ready_future(c.channel).result(timeout=30)

    c.start = start
    start()
    from cairn.v1 import auth_pb2 as auth
    from cairn.v1 import auth_pb2_grpc

    admins = auth_pb2_grpc.AuthServiceStub(c.channel)

    def principal(pid, role):
        return admins.CreatePrincipal(
            auth.CreatePrincipalRequest(principal=auth.Principal(principal_id=pid, roles=[role], session_roots=["orch"])),
            metadata=_as(ADMIN),
        ).token

    c.orch = principal("orchestrator", auth.ROLE_ORCHESTRATOR)
    c.lead = principal("lead", auth.ROLE_APPROVER)
    session_pb2_grpc.SessionServiceStub(c.channel).CreateSession(
        session.CreateSessionRequest(session=session.Session(session_id="orch", agent_id="main")), metadata=_as(c.orch)
    )
    try:
        yield c
    finally:
        if c.proc.poll() is None:
            c.stop()


def _claude_planning(cairn, work):
    """Starts Claude Code in plan mode with Cairn's hooks: the mock model
    writes a plan file and calls ExitPlanMode. Returns the process, the
    script (what the model was sent back), the mock and the prompt log."""
    script = mock_model.Script([("Write", _plan_file), ("ExitPlanMode", {})])
    server, url = mock_model.serve(script)
    config = pathlib.Path(work) / "claude"
    subprocess.run(
        [BINARY, "hook", "install", "claude-code", "--config-dir", str(config), "--server", cairn.addr,
         "--parent-session", "orch", "--token", cairn.orch],
        check=True, capture_output=True,
    )
    log = pathlib.Path(work) / "permission-prompts.jsonl"
    mcp_config = pathlib.Path(work) / "mcp.json"
    mcp_config.write_text(json.dumps({"mcpServers": {"perm": {
        "command": "python3", "args": [str(PERMISSION_PROMPT)], "env": {"PERMISSION_LOG": str(log)}}}}))
    env = dict(
        os.environ, ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="dummy", CLAUDE_CONFIG_DIR=str(config),
        DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        CAIRN_HOOK_SPOOL=str(pathlib.Path(work) / "spool"), CAIRN_HOOK_TIMEOUT="200ms",
    )
    proc = subprocess.Popen(
        [_cli("claude"), "-p", "Plan a login page", "--output-format", "stream-json", "--verbose",
         "--permission-mode", "plan", "--mcp-config", str(mcp_config), "--permission-prompt-tool", "mcp__perm__ask"],
        env=env, cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    return proc, script, server, log


def _awaiting(cairn):
    """The Claude Code session whose plan awaits approval, once it does."""
    plans = plan_pb2_grpc.PlanServiceStub(cairn.channel)
    deadline = time.time() + 90
    while time.time() < deadline:
        r = session_pb2_grpc.SessionServiceStub(cairn.channel).ListSessions(
            session.ListSessionsRequest(parent_session_id="orch"), metadata=_as(cairn.lead))
        for s in r.sessions:
            st = plans.GetPlanStatus(plan.GetPlanStatusRequest(session_id=s.session_id), metadata=_as(cairn.lead)).status
            if st.mode == plan.PLAN_MODE_AWAITING_APPROVAL:
                return s.session_id, st
        time.sleep(0.2)
    raise AssertionError("no Claude Code plan came to await approval")


def _finish(proc, server):
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        server.shutdown()
    assert proc.returncode == 0, (out[-2000:], err[-2000:])
    return out


def test_claude_code_s_plan_is_approved_in_cairn_by_another_principal(authed, tmp_path):
    proc, script, server, log = _claude_planning(authed, tmp_path)
    sid, st = _awaiting(authed)
    assert st.pending.plan.summary == "Add a login page"
    assert [s.description for s in st.pending.plan.steps] == ["Write the form", "Check the password"]
    # The hook blocks: Claude Code has not been answered yet.
    assert proc.poll() is None and len(script.tool_results()) == 1
    plans = plan_pb2_grpc.PlanServiceStub(authed.channel)
    # The agent's own principal cannot approve it.
    with pytest.raises(grpc.RpcError) as own:
        plans.ApprovePlan(plan.ApprovePlanRequest(session_id=sid), metadata=_as(authed.orch))
    assert own.value.code() == grpc.StatusCode.PERMISSION_DENIED
    plans.ApprovePlan(plan.ApprovePlanRequest(session_id=sid), metadata=_as(authed.lead))
    _finish(proc, server)
    result = script.tool_results()[-1]
    assert "approved" in result.lower(), result
    assert not log.exists(), "Claude Code's own prompt was not asked"
    st = plans.GetPlanStatus(plan.GetPlanStatusRequest(session_id=sid), metadata=_as(authed.lead)).status
    assert st.active.approver == "lead"


def test_claude_code_s_plan_rejected_in_cairn_gets_the_reason(authed, tmp_path):
    proc, script, server, log = _claude_planning(authed, tmp_path)
    sid, _ = _awaiting(authed)
    plans = plan_pb2_grpc.PlanServiceStub(authed.channel)
    plans.RejectPlan(plan.RejectPlanRequest(session_id=sid, reason="Use the SSO login instead"), metadata=_as(authed.lead))
    _finish(proc, server)
    result = script.tool_results()[-1]
    assert "Use the SSO login instead" in result, result
    assert not log.exists()


def test_with_cairn_down_claude_code_asks_as_it_always_does(authed, tmp_path):
    authed.stop()
    proc, script, server, log = _claude_planning(authed, tmp_path)
    _finish(proc, server)
    asked = [json.loads(line) for line in log.read_text().splitlines()]
    assert [a["tool_name"] for a in asked] == ["ExitPlanMode"], asked
    result = script.tool_results()[-1]
    assert "Asked at the terminal: not now." in result, result
