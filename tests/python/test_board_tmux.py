"""The live board in a real terminal: tmux runs `cairn watch --tree`, the
test changes plans through the CLI, restarts the server under it, and reads
the screen with capture-pane."""

import os
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import BINARY, _free_port

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is installed by .ci/run")


def start_server(port, data):
    proc = subprocess.Popen(
        [BINARY, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data],
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        if subprocess.run([BINARY, "session", "list", "--server", f"http://127.0.0.1:{port}"], capture_output=True).returncode == 0:
            return proc
        time.sleep(0.1)
    raise AssertionError("server did not start")


def cli(port, *args, stdin=""):
    done = subprocess.run(
        [BINARY, *args, "--server", f"http://127.0.0.1:{port}"], input=stdin, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def screen(name):
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", name], capture_output=True, text=True).stdout


def wait_for(name, text, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        shown = screen(name)
        if text in shown:
            return shown
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared:\n{screen(name)}")


def plan(done):
    steps = ["Design the schema", "Sign-up API", "Login API", "Hash passwords"]
    items = [
        {"step": s, "status": "completed" if i < done else "in_progress" if i == done else "pending"}
        for i, s in enumerate(steps)
    ]
    import json

    return json.dumps({"plan": items})


def test_the_board_redraws_survives_a_restart_and_exits_on_ctrl_c():
    port = _free_port()
    data = tempfile.mkdtemp(prefix="cairn-board-")
    server = start_server(port, data)
    name = f"cairn-board-{os.getpid()}"
    try:
        cli(port, "session", "create", "orch", "--agent", "main")
        cli(port, "session", "create", "orch:coder", "--parent", "orch", "--agent", "coder")
        cli(port, "plan", "update", "orch:coder", stdin=plan(1))
        subprocess.run(
            [
                "tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "20",
                f"{BINARY} watch --tree orch --server http://127.0.0.1:{port}",
            ],
            check=True,
        )
        shown = wait_for(name, "1/4")
        assert "orch:coder" in shown and "Sign-up API" in shown
        cli(port, "plan", "update", "orch:coder", stdin=plan(2))
        shown = wait_for(name, "2/4")
        # Redrawn in place, not scrolled: one header on the screen.
        assert shown.count("cairn · tree orch") == 1, shown

        # The server restarts under the board; it resumes and keeps following.
        server.terminate()
        server.wait(timeout=10)
        server = start_server(port, data)
        cli(port, "plan", "update", "orch:coder", stdin=plan(3))
        shown = wait_for(name, "3/4")
        assert "Hash passwords" in shown

        subprocess.run(["tmux", "send-keys", "-t", name, "C-c"], check=True)
        deadline = time.time() + 10
        while time.time() < deadline and subprocess.run(["tmux", "has-session", "-t", name], capture_output=True).returncode == 0:
            time.sleep(0.1)
        assert subprocess.run(["tmux", "has-session", "-t", name], capture_output=True).returncode != 0, "Ctrl-C ends the board"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
        server.terminate()
        server.wait(timeout=10)
