"""A sub-agent that dies: a real `cairn mcp` plans and starts a step, then
is SIGKILLed. The orchestrator's `cairn wait` ends naming it and its step,
the live board in tmux shows it LOST in red, and the dashboard in Chromium
marks its card. The server runs with a 1 s TTL and a 1 s grace."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import BINARY, _free_port
from test_board_tmux import wait_for
from test_dashboard import browser, wait_until  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None or shutil.which("chromium") is None,
    reason="tmux and chromium are installed by .ci/run",
)

TTL, GRACE = 1, 1


def cli(port, *args, stdin="", check=True):
    done = subprocess.run(
        [BINARY, *args, "--server", f"http://127.0.0.1:{port}"], input=stdin, capture_output=True, text=True, timeout=90
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


def rpc(proc, message):
    proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()
    if "id" not in message:
        return None
    while True:
        line = proc.stdout.readline()
        assert line, "cairn mcp closed its output"
        reply = json.loads(line)
        if reply.get("id") == message["id"]:
            return reply


def test_a_killed_sub_agent_is_reported_lost_everywhere(browser):  # noqa: F811
    port, web = _free_port(), _free_port()
    data = tempfile.mkdtemp(prefix="cairn-liveness-")
    server = subprocess.Popen(
        [
            BINARY, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data,
            "--web-listen", f"127.0.0.1:{web}", "--lease-ttl", f"{TTL}s", "--lease-grace", f"{GRACE}s",
        ],
        stderr=subprocess.DEVNULL,
    )
    board = f"cairn-liveness-{os.getpid()}"
    agent = None
    try:
        deadline = time.time() + 30
        while cli(port, "session", "list", check=False).returncode != 0:
            assert time.time() < deadline, "server did not start"
            time.sleep(0.1)
        cli(port, "session", "create", "orch", "--agent", "main")
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", board, "-x", "200", "-y", "20",
             f"{BINARY} watch --tree orch --server http://127.0.0.1:{port}"],
            check=True,
        )
        # The sub-agent: a real `cairn mcp`, spoken to over its stdio.
        agent = subprocess.Popen(
            [BINARY, "mcp", "--server", f"http://127.0.0.1:{port}", "--agent-id", "coder",
             "--session-id", "orch:coder", "--parent-session-id", "orch"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        rpc(agent, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
        rpc(agent, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        steps = ["Design the schema", "Implement the login API", "Hash passwords", "Write tests"]
        plan = [{"step": s, "status": "completed" if i == 0 else "in_progress" if i == 1 else "pending"}
                for i, s in enumerate(steps)]
        reply = rpc(agent, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "update_plan", "arguments": {"explanation": "auth", "plan": plan}}})
        assert not reply["result"].get("isError"), reply
        # The lease is taken as soon as the session exists, and renewed.
        deadline = time.time() + 20
        while "ACTIVE" not in cli(port, "session", "list").stdout:
            assert time.time() < deadline, cli(port, "session", "list").stdout
            time.sleep(0.1)
        time.sleep(3 * TTL)
        assert "ACTIVE" in cli(port, "session", "list").stdout, "a renewing agent stayed active"

        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=10)
        killed = time.time()
        waited = cli(port, "wait", "--tree", "orch", "--timeout", "60s", check=False)
        elapsed = time.time() - killed
        print(f"cairn wait ended {elapsed:.2f}s after the kill (TTL {TTL}s + grace {GRACE}s)")
        assert waited.returncode != 0
        assert "a sub-agent was lost" in waited.stdout, waited.stdout
        assert "Sub-agent coder (orch:coder) was lost at step 2 'Implement the login API'" in waited.stdout, waited.stdout
        assert "LOST" in cli(port, "session", "list").stdout

        # The board: the row of the lost agent says so, in bold red.
        shown = wait_for(board, "LOST")
        row = next(line for line in shown.splitlines() if "orch:coder" in line)
        assert "LOST" in row, shown
        coloured = subprocess.run(["tmux", "capture-pane", "-e", "-p", "-t", board], capture_output=True, text=True).stdout
        row = next(line for line in coloured.splitlines() if "orch:coder" in line)
        assert "31m" in row.split("LOST")[0], repr(row)

        # The dashboard: the card is marked, and its badge says LOST.
        browser.get(f"http://127.0.0.1:{web}/")
        from selenium.webdriver.common.by import By

        card = lambda: browser.find_element(By.CSS_SELECTOR, '[data-session="orch:coder"]')  # noqa: E731
        wait_until(lambda: "lost" in card().get_attribute("class").split(), "the lost card")
        badge = card().find_element(By.CSS_SELECTOR, ".badge.liveness.liveness-lost")
        assert badge.text.startswith("LOST · seen "), badge.text
        assert not browser.find_element(By.CSS_SELECTOR, '[data-session="orch"]').get_attribute("class").split().count("lost")
    finally:
        if agent and agent.poll() is None:
            agent.kill()
        subprocess.run(["tmux", "kill-session", "-t", board], capture_output=True)
        server.terminate()
        server.wait(timeout=10)
