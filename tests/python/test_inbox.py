"""Approvals across trees, for real: three trees with plans awaiting
approval, two approvers with different session roots. Each approver's
`cairn inbox`, live in tmux, lists exactly its own items; approving one
there by number takes it out of that list and of the dashboard's inbox
page in Chromium."""

import os
import pathlib
import shutil
import subprocess
import tempfile

import grpc
import pytest

from conftest import BINARY, _free_port
from test_board_tmux import screen, wait_for
from test_dashboard import browser, wait_until  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None or shutil.which("chromium") is None,
    reason="tmux and chromium are installed by .ci/run",
)

from cairn.v1 import auth_pb2 as auth  # noqa: E402
from cairn.v1 import auth_pb2_grpc  # noqa: E402
from cairn.v1 import plan_pb2 as plan  # noqa: E402
from cairn.v1 import plan_pb2_grpc  # noqa: E402
from cairn.v1 import session_pb2 as session  # noqa: E402
from cairn.v1 import session_pb2_grpc  # noqa: E402

ADMIN = "inbox-admin-token-0123456789abcdef"


def test_each_approver_decides_from_its_own_live_inbox(browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    port, web = _free_port(), _free_port()
    data = tempfile.mkdtemp(prefix="cairn-inbox-")
    token_file = pathlib.Path(data) / "admin-token"
    token_file.write_text(ADMIN + "\n")
    server = subprocess.Popen(
        [
            BINARY, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data,
            "--web-listen", f"127.0.0.1:{web}", "--auth", "token", "--admin-token-file", str(token_file),
        ],
        stderr=subprocess.DEVNULL,
    )
    panes = []
    try:
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(ch).result(timeout=30)
        admin = auth_pb2_grpc.AuthServiceStub(ch)

        def make(pid, roles, roots, agents=()):
            return admin.CreatePrincipal(
                auth.CreatePrincipalRequest(principal=auth.Principal(
                    principal_id=pid, roles=roles, session_roots=roots, agent_ids=list(agents))),
                metadata=(("authorization", f"Bearer {ADMIN}"),),
            ).token

        setup = make("setup", [auth.ROLE_ORCHESTRATOR], [])
        tokens = {
            "north": make("north", [auth.ROLE_APPROVER], ["a", "b"]),
            "south": make("south", [auth.ROLE_APPROVER], ["c"]),
        }
        as_setup = (("authorization", f"Bearer {setup}"),)
        sessions = session_pb2_grpc.SessionServiceStub(ch)
        plans = plan_pb2_grpc.PlanServiceStub(ch)
        steps = [plan.ImplementationStep(id=1, description="Schema"), plan.ImplementationStep(id=2, description="API", depends_on=[1])]
        for tree in ["a", "b", "c"]:
            sid = f"{tree}:coder"
            sessions.CreateSession(session.CreateSessionRequest(session=session.Session(session_id=tree, agent_id="main")), metadata=as_setup)
            sessions.CreateSession(
                session.CreateSessionRequest(session=session.Session(session_id=sid, agent_id="coder", parent_session_id=tree)),
                metadata=as_setup,
            )
            plans.EnterPlanMode(plan.EnterPlanModeRequest(session_id=sid, goal=f"goal in {tree}"), metadata=as_setup)
            plans.ExitPlanMode(
                plan.ExitPlanModeRequest(session_id=sid, plan=plan.ImplementationPlan(summary=f"plan of {tree}", steps=steps)),
                metadata=as_setup,
            )

        # Each approver's live inbox, in its own terminal.
        for who in ["north", "south"]:
            name = f"cairn-inbox-{who}-{os.getpid()}"
            panes.append(name)
            subprocess.run(
                ["tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "20",
                 f"CAIRN_TOKEN={tokens[who]} {BINARY} inbox --server http://127.0.0.1:{port}"],
                check=True,
            )
        north, south = panes
        shown = wait_for(north, "b:coder")
        assert "a:coder" in shown and "c:coder" not in shown, shown
        shown = wait_for(south, "c:coder")
        assert "a:coder" not in shown and "b:coder" not in shown, shown

        # North's dashboard inbox page.
        browser.get(f"http://127.0.0.1:{web}/")
        wait_until(lambda: browser.current_url.endswith("/login"), "the sign-in form")
        box = browser.find_element(By.NAME, "token")
        box.send_keys(tokens["north"])
        box.submit()
        wait_until(lambda: browser.find_element(By.ID, "live").text == "live", "signed in")
        browser.get(f"http://127.0.0.1:{web}/inbox")
        wait_until(lambda: browser.title == "Cairn inbox (2)", "north's two items")

        # Approved from the terminal, by number: the oldest, a's.
        subprocess.run(["tmux", "send-keys", "-t", north, "a 1", "Enter"], check=True)
        wait_for(north, "approved 1 (a:coder)")
        wait_until(lambda: "a:coder" not in screen(north).split("approved")[0], "a's item gone from the list")
        wait_until(lambda: browser.title == "Cairn inbox (1)", "a's item gone from the page")
        items = browser.find_elements(By.CSS_SELECTOR, ".inbox-item")
        assert [i.get_attribute("data-session") for i in items] == ["b:coder"]
        status = plans.GetPlanStatus(plan.GetPlanStatusRequest(session_id="a:coder"), metadata=as_setup).status
        assert status.active.approver == "north"
        # Rejected with a reason; south's list never changed.
        subprocess.run(["tmux", "send-keys", "-t", north, "r 1 split it in two", "Enter"], check=True)
        wait_for(north, "rejected 1 (b:coder)")
        wait_until(lambda: browser.title == "Cairn inbox", "an empty inbox page")
        history = plans.ListPlanHistory(plan.ListPlanHistoryRequest(session_id="b:coder"), metadata=as_setup).entries
        assert history[-1].reason == "split it in two"
        assert "c:coder" in screen(south)
        subprocess.run(["tmux", "send-keys", "-t", north, "q", "Enter"], check=True)
    finally:
        for name in panes:
            subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
        server.terminate()
        server.wait(timeout=10)
