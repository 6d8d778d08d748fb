"""The web dashboard in a real browser: Debian's headless Chromium, driven by
Selenium through chromedriver. A plan changed over gRPC appears on the page
without a reload, and clicking Approve approves it."""

import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import grpc
import pytest

from conftest import BINARY, ROOT, _free_port

pytestmark = pytest.mark.skipif(
    shutil.which("chromium") is None or shutil.which("chromedriver") is None,
    reason="chromium and chromium-driver are installed by .ci/run",
)

from cairn.v1 import plan_pb2 as plan  # noqa: E402
from cairn.v1 import plan_pb2_grpc  # noqa: E402
from cairn.v1 import session_pb2 as session  # noqa: E402
from cairn.v1 import session_pb2_grpc  # noqa: E402
from cairn.v1 import todo_pb2 as todo  # noqa: E402
from cairn.v1 import todo_pb2_grpc  # noqa: E402


@pytest.fixture
def dashboard():
    grpc_port, web_port = _free_port(), _free_port()
    data = tempfile.mkdtemp(prefix="cairn-web-")
    proc = subprocess.Popen(
        [BINARY, "serve", "--listen", f"127.0.0.1:{grpc_port}", "--data-dir", data, "--web-listen", f"127.0.0.1:{web_port}"],
        stderr=subprocess.DEVNULL,
    )
    ch = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    grpc.channel_ready_future(ch).result(timeout=30)
    try:
        yield ch, f"http://127.0.0.1:{web_port}/"
    finally:
        ch.close()
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in [
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--window-size=1280,900", f"--user-data-dir={tempfile.mkdtemp(prefix='cairn-chromium-')}",
    ]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_until(check, what, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if check():
                return
        except Exception:  # the page may be mid-render
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_live_updates_and_approve(dashboard, browser):
    from selenium.webdriver.common.by import By

    ch, url = dashboard
    sessions = session_pb2_grpc.SessionServiceStub(ch)
    plans = plan_pb2_grpc.PlanServiceStub(ch)
    todos = todo_pb2_grpc.TodoServiceStub(ch)
    sessions.CreateSession(session.CreateSessionRequest(session=session.Session(session_id="orch", agent_id="main")))
    sessions.CreateSession(
        session.CreateSessionRequest(session=session.Session(session_id="orch:coder", agent_id="coder", parent_session_id="orch"))
    )
    browser.get(url)
    wait_until(lambda: browser.find_element(By.ID, "live").text == "live", "the live stream")
    card = lambda sid: browser.find_element(By.CSS_SELECTOR, f'[data-session="{sid}"]')
    wait_until(lambda: card("orch:coder").is_displayed(), "the sub-agent's session")
    assert card("orch:coder").find_element(By.CLASS_NAME, "todo-empty").text == "No tasks"

    # A plan written over gRPC shows up without a reload, one class per status.
    S = plan.StepStatus
    items = [
        plan.PlanItem(step="Design the schema", status=S.STEP_STATUS_COMPLETED),
        plan.PlanItem(step="Sign-up API", status=S.STEP_STATUS_IN_PROGRESS),
        plan.PlanItem(step="Login API", status=S.STEP_STATUS_PENDING),
        plan.PlanItem(step="Hash passwords", status=S.STEP_STATUS_PENDING),
    ]
    plans.UpdatePlan(plan.UpdatePlanRequest(session_id="orch:coder", explanation="auth", plan=items))
    wait_until(lambda: len(card("orch:coder").find_elements(By.CLASS_NAME, "todo-item")) == 4, "the plan")
    coder = card("orch:coder")
    assert len(coder.find_elements(By.CSS_SELECTOR, ".todo-list")) == 1
    assert coder.find_element(By.CSS_SELECTOR, ".todo-item.todo-done .todo-check").text == "✓"
    assert coder.find_element(By.CSS_SELECTOR, ".todo-item.todo-active .todo-arrow").text == "▶"
    assert len(coder.find_elements(By.CSS_SELECTOR, ".todo-item.todo-pending .todo-circle")) == 2

    todos.WriteTodos(
        todo.WriteTodosRequest(
            agent_id="coder",
            todos=[todo.TodoItem(id="1", content="Write tests", status=todo.TodoStatus.TODO_STATUS_IN_PROGRESS, priority=todo.Priority.PRIORITY_HIGH)],
        )
    )
    wait_until(lambda: browser.find_element(By.CSS_SELECTOR, '[data-agent="coder"] .todo-active').text.startswith("▶"), "the todos")

    # Plan mode: the plan awaiting approval gets Approve / Reject buttons.
    plans.EnterPlanMode(plan.EnterPlanModeRequest(session_id="orch", goal="Ship auth"))
    steps = [
        plan.ImplementationStep(id=1, description="Token type"),
        plan.ImplementationStep(id=2, description="Middleware", depends_on=[1]),
    ]
    plans.ExitPlanMode(plan.ExitPlanModeRequest(session_id="orch", plan=plan.ImplementationPlan(summary="JWT auth", steps=steps)))
    wait_until(lambda: card("orch").find_element(By.CSS_SELECTOR, "button.approve").is_displayed(), "the Approve button")
    shot = ROOT / "docs" / "dashboard.png"
    if os.environ.get("CAIRN_SCREENSHOT"):
        browser.save_screenshot(str(shot))
    card("orch").find_element(By.CSS_SELECTOR, "button.approve").click()

    status = lambda: plans.GetPlanStatus(plan.GetPlanStatusRequest(session_id="orch")).status
    wait_until(lambda: status().mode == plan.PlanMode.PLAN_MODE_NORMAL and status().active.plan_id, "the approval")
    assert status().active.approver == "dashboard"
    # The page follows: no more buttons, the approved steps are the checklist.
    wait_until(lambda: not card("orch").find_elements(By.CSS_SELECTOR, "button.approve"), "the buttons to go")
    wait_until(lambda: len(card("orch").find_elements(By.CSS_SELECTOR, ":scope > .todo-list .todo-item")) == 2, "the approved plan")


ADMIN = "dashboard-admin-token-0123456789abcdef"
HOSTILE = '<img src=x onerror="window.pwned=1">Login API'


@pytest.fixture
def signed_dashboard():
    """A server with authentication on: an admin token from a file, an
    orchestrator that writes plans, an approver that signs in to the page."""
    from cairn.v1 import auth_pb2 as auth
    from cairn.v1 import auth_pb2_grpc

    grpc_port, web_port = _free_port(), _free_port()
    data = tempfile.mkdtemp(prefix="cairn-web-auth-")
    token_file = pathlib.Path(data) / "admin-token"
    token_file.write_text(ADMIN + "\n")
    proc = subprocess.Popen(
        [
            BINARY, "serve", "--listen", f"127.0.0.1:{grpc_port}", "--data-dir", data,
            "--web-listen", f"127.0.0.1:{web_port}", "--auth", "token", "--admin-token-file", str(token_file),
        ],
        stderr=subprocess.DEVNULL,
    )
    ch = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    grpc.channel_ready_future(ch).result(timeout=30)
    admin = auth_pb2_grpc.AuthServiceStub(ch)
    make = lambda pid, roles: admin.CreatePrincipal(
        auth.CreatePrincipalRequest(principal=auth.Principal(principal_id=pid, roles=roles, session_roots=["orch"])),
        metadata=(("authorization", f"Bearer {ADMIN}"),),
    ).token
    tokens = {"orchestrator": make("orchestrator", [auth.ROLE_ORCHESTRATOR]), "reviewer": make("reviewer", [auth.ROLE_APPROVER])}
    try:
        yield ch, f"http://127.0.0.1:{web_port}/", tokens
    finally:
        ch.close()
        proc.terminate()
        proc.wait(timeout=10)


def test_sign_in_csrf_and_hostile_text(signed_dashboard, browser):
    from selenium.webdriver.common.by import By

    ch, url, tokens = signed_dashboard
    orch = (("authorization", f"Bearer {tokens['orchestrator']}"),)
    sessions = session_pb2_grpc.SessionServiceStub(ch)
    plans = plan_pb2_grpc.PlanServiceStub(ch)
    sessions.CreateSession(session.CreateSessionRequest(session=session.Session(session_id="orch", agent_id="main")), metadata=orch)
    S = plan.StepStatus
    plans.UpdatePlan(
        plan.UpdatePlanRequest(
            session_id="orch",
            explanation="<script>window.pwned=2</script>",
            # Enough steps to be stored: one-step plans are not (docs/rules.md).
            plan=[plan.PlanItem(step=HOSTILE, status=S.STEP_STATUS_IN_PROGRESS)]
            + [plan.PlanItem(step=f"step {i}", status=S.STEP_STATUS_PENDING) for i in range(3)],
        ),
        metadata=orch,
    )

    # Not signed in: the page sends the browser to the sign-in form; the API refuses.
    browser.get(url)
    wait_until(lambda: browser.current_url.endswith("/login"), "the sign-in form")
    token_box = lambda: browser.find_element(By.NAME, "token")
    token_box().send_keys("not-a-token")
    token_box().submit()
    wait_until(lambda: "unknown or revoked" in browser.find_element(By.CLASS_NAME, "error").text, "the refusal")

    token_box().send_keys(tokens["reviewer"])
    token_box().submit()
    wait_until(lambda: browser.find_element(By.ID, "live").text == "live", "the live stream")
    card = lambda: browser.find_element(By.CSS_SELECTOR, '[data-session="orch"]')
    wait_until(lambda: card().find_elements(By.CSS_SELECTOR, ".todo-text")[0].text == HOSTILE, "the plan")
    assert "<script>" in card().find_element(By.CLASS_NAME, "explanation").text

    # A plan to approve, with hostile text of its own.
    plans.EnterPlanMode(plan.EnterPlanModeRequest(session_id="orch", goal="Ship auth"), metadata=orch)
    plans.ExitPlanMode(
        plan.ExitPlanModeRequest(
            session_id="orch",
            plan=plan.ImplementationPlan(summary="<b>bold</b>", steps=[plan.ImplementationStep(id=1, description=HOSTILE)]),
        ),
        metadata=orch,
    )
    wait_until(lambda: card().find_element(By.CSS_SELECTOR, "button.approve").is_displayed(), "the Approve button")

    # Hostile text is text: no element made from it, no script run.
    assert card().find_element(By.CSS_SELECTOR, ".approval li").text == HOSTILE
    assert "<b>bold</b>" in card().find_element(By.CLASS_NAME, "summary").text
    assert browser.find_elements(By.TAG_NAME, "img") == []
    assert browser.find_elements(By.CSS_SELECTOR, ".summary b") == []
    assert browser.execute_script("return window.pwned === undefined")
    # The session cookie is out of the page's reach.
    assert "cairn_session" not in browser.execute_script("return document.cookie")

    # A change without the page's CSRF token is refused, even from the page itself.
    post = """
        const [path, headers, done] = arguments;
        fetch(path, {method: "POST", headers, body: "{}"}).then(r => done(r.status), e => done(String(e)));
    """
    assert browser.execute_async_script(post, "/api/sessions/orch/approve", {"content-type": "application/json"}) == 403
    assert status_of(plans, orch).mode == plan.PlanMode.PLAN_MODE_AWAITING_APPROVAL

    # The button carries it: the plan is approved, by the signed-in principal.
    card().find_element(By.CSS_SELECTOR, "button.approve").click()
    wait_until(lambda: status_of(plans, orch).mode == plan.PlanMode.PLAN_MODE_NORMAL, "the approval")
    assert status_of(plans, orch).active.approver == "reviewer"

    # Signed out, the API refuses the browser again.
    page_token = browser.execute_script('return document.querySelector("meta[name=csrf-token]").content')
    assert browser.execute_async_script(post, "/logout", {"x-csrf-token": page_token}) == 200
    assert browser.execute_async_script(post, "/api/sessions/orch/reject", {"content-type": "application/json"}) == 401


def status_of(plans, metadata):
    return plans.GetPlanStatus(plan.GetPlanStatusRequest(session_id="orch"), metadata=metadata).status


def test_the_inbox_page_counts_lists_and_decides(dashboard, browser):
    """The inbox page: its title counts what awaits approval, items arrive
    live, and Approve on a plan or a modification takes it out."""
    from selenium.webdriver.common.by import By

    ch, url = dashboard
    sessions = session_pb2_grpc.SessionServiceStub(ch)
    plans = plan_pb2_grpc.PlanServiceStub(ch)
    steps = [
        plan.ImplementationStep(id=1, description="Token type"),
        plan.ImplementationStep(id=2, description="Middleware", depends_on=[1]),
    ]

    def submit(sid, summary):
        sessions.CreateSession(session.CreateSessionRequest(session=session.Session(session_id=sid, agent_id="coder")))
        plans.EnterPlanMode(plan.EnterPlanModeRequest(session_id=sid, goal=f"goal of {sid}"))
        plans.ExitPlanMode(plan.ExitPlanModeRequest(session_id=sid, plan=plan.ImplementationPlan(summary=summary, steps=steps)))

    submit("auth", "JWT <b>auth</b>")
    submit("cache", "LRU cache")
    plans.ApprovePlan(plan.ApprovePlanRequest(session_id="cache", approver="lead"))
    plans.ModifyPlan(plan.ModifyPlanRequest(session_id="cache", step_id=2, reason="simpler", new_description="No metrics"))

    browser.get(url + "inbox")
    wait_until(lambda: browser.title == "Cairn inbox (2)", "the count in the title")

    def listed():
        # The list may be drawn again between a lookup and a read (the
        # watch's initial state, then its live events): read it whole, or
        # again.
        from selenium.common.exceptions import StaleElementReferenceException

        try:
            items = browser.find_elements(By.CSS_SELECTOR, ".inbox-item")
            return [
                (
                    i.get_attribute("data-session"),
                    i.get_attribute("data-kind"),
                    i.find_element(By.CLASS_NAME, "asks").text,
                    len(i.find_elements(By.TAG_NAME, "b")),
                )
                for i in items
            ]
        except StaleElementReferenceException:
            return None

    wait_until(lambda: [x[:2] for x in listed() or []] == [("auth", "plan"), ("cache", "modification")], "both items listed")
    items = None
    while items is None:
        items = listed()
    assert [x[:2] for x in items] == [("auth", "plan"), ("cache", "modification")]
    # Server text is text: the tags in the summary are shown, not made.
    assert "JWT <b>auth</b>" in items[0][2]
    assert items[0][3] == 0
    assert "Step 2: No metrics (simpler)" in items[1][2]

    # A plan submitted over gRPC arrives without a reload.
    submit("search", "Full-text search")
    wait_until(lambda: browser.title == "Cairn inbox (3)", "the new item")

    card = lambda sid: browser.find_element(By.CSS_SELECTOR, f'.inbox-item[data-session="{sid}"]')  # noqa: E731
    card("auth").find_element(By.CSS_SELECTOR, "button.approve").click()
    wait_until(lambda: browser.title == "Cairn inbox (2)", "the plan approved")
    status = plans.GetPlanStatus(plan.GetPlanStatusRequest(session_id="auth")).status
    assert status.active.approver == "dashboard"
    card("cache").find_element(By.CSS_SELECTOR, "button.approve").click()
    wait_until(lambda: browser.title == "Cairn inbox (1)", "the modification approved")
    status = plans.GetPlanStatus(plan.GetPlanStatusRequest(session_id="cache")).status
    assert not status.pending_modifications
    assert [s.description for s in status.active.plan.steps][1] == "No metrics"
    plans.RejectPlan(plan.RejectPlanRequest(session_id="search", reason="later"))
    wait_until(lambda: browser.title == "Cairn inbox", "an empty inbox")
    assert browser.find_element(By.ID, "inbox").text == "Nothing awaits your approval."
