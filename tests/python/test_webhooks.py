"""Webhooks delivered to real HTTP receivers that check every delivery with
the `standardwebhooks` package from PyPI (not with code of ours).

The receiver answers 500 to its first attempts; the server is SIGKILLed
while a delivery is in flight and more revisions are committed behind it;
every event still arrives, at least once, in revision order. A receiver
that never answers is dead-lettered after the bounded attempts while writes
go on (their rates are printed, never asserted), and a dead letter retried
is delivered."""

import json
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.protobuf import duration_pb2
from standardwebhooks import Webhook as Verifier

from cairn.v1 import admin_pb2 as admin
from cairn.v1 import admin_pb2_grpc
from cairn.v1 import plan_pb2 as plan
from cairn.v1 import plan_pb2_grpc
from conftest import BINARY, _free_port

ATTEMPTS = 4


class Receiver:
    """A webhook receiver: verifies with `standardwebhooks`, records what it
    accepted, and fails, holds or hangs on demand."""

    def __init__(self):
        self.secret = None
        self.fail_left = 0
        self.failed = 0
        self.hang = False
        self.hold = threading.Event()
        self.hold.set()
        self.held = []
        self.accepted = []
        self.rejected = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                headers = {k.lower(): v for k, v in self.headers.items()}
                if receiver.hang:
                    time.sleep(3)
                    return
                with receiver.lock:
                    fail = receiver.fail_left > 0
                    if fail:
                        receiver.fail_left -= 1
                        receiver.failed += 1
                if fail:
                    self.send_response(500)
                    self.end_headers()
                    return
                if not receiver.hold.is_set():
                    receiver.held.append(headers["webhook-id"])
                    receiver.hold.wait(30)
                try:
                    payload = Verifier(receiver.secret).verify(body, headers)
                except Exception as e:  # noqa: BLE001 (any failure is a rejection)
                    receiver.rejected.append(repr(e))
                    self.send_response(400)
                    self.end_headers()
                    return
                with receiver.lock:
                    receiver.accepted.append((headers["webhook-id"], payload))
                self.send_response(204)
                self.end_headers()

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/hook"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def seen(self):
        with self.lock:
            return list(self.accepted)


def start(port, data):
    proc = subprocess.Popen(
        [
            BINARY, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data,
            "--webhook-allow-http", "--webhook-max-attempts", str(ATTEMPTS),
            "--webhook-backoff", "100ms", "--webhook-max-backoff", "200ms", "--webhook-timeout", "1s",
        ],
        stderr=subprocess.DEVNULL,
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=30)
    return proc, channel


def wait_until(what, check, seconds=30):
    deadline = time.time() + seconds
    while True:
        got = check()
        if got:
            return got
        assert time.time() < deadline, f"not within {seconds}s: {what}"
        time.sleep(0.05)


def submit(plans, session):
    plans.EnterPlanMode(plan.EnterPlanModeRequest(session_id=session, goal="ship"))
    steps = [plan.ImplementationStep(id=1, description="one"), plan.ImplementationStep(id=2, description="two")]
    return plans.ExitPlanMode(
        plan.ExitPlanModeRequest(session_id=session, plan=plan.ImplementationPlan(summary=f"plan of {session}", steps=steps))
    ).revision


def finish(plans, session):
    """Approves, works through and completes `session`'s plan."""
    plans.ApprovePlan(plan.ApprovePlanRequest(session_id=session, approver="lead"))
    for step in (1, 2):
        plans.CompleteStep(plan.CompleteStepRequest(session_id=session, step_id=step, verification_result="ok"))
    return plans.CompletePlan(plan.CompletePlanRequest(session_id=session, summary="done")).revision


def kinds(accepted):
    return {(p["type"], p["data"]["session_id"]) for _, p in accepted}


def lifecycle(session):
    return {("approval.requested", session), ("approval.decided", session), ("plan.completed", session)}


def test_every_event_is_delivered_at_least_once_in_order_through_failures_and_a_kill():
    port, data = _free_port(), tempfile.mkdtemp(prefix="cairn-webhooks-")
    receiver = Receiver()
    proc, channel = start(port, data)
    try:
        admins = admin_pb2_grpc.AdminServiceStub(channel)
        created = admins.CreateWebhook(admin.CreateWebhookRequest(webhook=admin.Webhook(
            webhook_id="ops", url=receiver.url,
            event_types=["approval.requested", "approval.decided", "plan.completed"],
        )))
        assert created.secret.startswith("whsec_")
        receiver.secret = created.secret
        # Never shown again.
        listed = admins.ListWebhooks(admin.ListWebhooksRequest()).webhooks
        assert [w.webhook_id for w in listed] == ["ops"] and created.secret not in str(listed)

        receiver.fail_left = 3
        plans = plan_pb2_grpc.PlanServiceStub(channel)
        for s in ("a", "b"):
            submit(plans, s)
            finish(plans, s)
        wait_until("six deliveries", lambda: kinds(receiver.seen()) >= lifecycle("a") | lifecycle("b"))
        assert receiver.failed == 3, "the first attempts were answered 500 and retried"

        # A delivery in flight, more committed behind it, then SIGKILL.
        receiver.hold.clear()
        submit(plans, "c")
        wait_until("a delivery in flight", lambda: receiver.held)
        last = finish(plans, "c")
        proc.kill()
        proc.wait()
        channel.close()
        receiver.hold.set()
        held = receiver.held[0]
        before = len(receiver.seen())

        proc, channel = start(port, data)
        wait_until("c's events after the restart", lambda: kinds(receiver.seen()) >= lifecycle("c"))
        after = receiver.seen()[before:]
        assert held in {i for i, _ in after}, "the delivery cut by the kill came again"
        seen = receiver.seen()
        assert receiver.rejected == [], receiver.rejected
        assert kinds(seen) == lifecycle("a") | lifecycle("b") | lifecycle("c")
        revisions = [p["data"]["revision"] for _, p in seen]
        assert revisions == sorted(revisions), f"in revision order: {revisions}"
        assert max(revisions) == last
        # Each message id names one revision, whatever the attempt.
        by_id = {}
        for i, p in seen:
            assert by_id.setdefault(i, p["data"]["revision"]) == p["data"]["revision"]
        print(f"\ndeliveries: {len(seen)} accepted for {len(by_id)} messages; 3 answered 500 first")
    finally:
        proc.kill()
        receiver.http.shutdown()


def rate(plans, seconds):
    n, end = 0, time.time() + seconds
    while time.time() < end:
        plans.UpdatePlan(plan.UpdatePlanRequest(
            session_id="load", explanation="load",
            plan=[plan.PlanItem(step=f"write {n}", status=plan.STEP_STATUS_IN_PROGRESS)],
        ))
        n += 1
    return n / seconds


def test_a_receiver_that_never_answers_is_dead_lettered_while_writes_go_on():
    port, data = _free_port(), tempfile.mkdtemp(prefix="cairn-webhooks-dead-")
    receiver = Receiver()
    receiver.hang = True
    proc, channel = start(port, data)
    try:
        admins = admin_pb2_grpc.AdminServiceStub(channel)
        created = admins.CreateWebhook(admin.CreateWebhookRequest(webhook=admin.Webhook(
            webhook_id="dead", url=receiver.url, event_types=["approval.requested"],
        )))
        receiver.secret = created.secret
        plans = plan_pb2_grpc.PlanServiceStub(channel)
        before = rate(plans, 2)
        started = time.time()
        submit(plans, "waiting")
        during = rate(plans, 2)
        letters = wait_until("a dead letter", lambda: admins.ListDeadLetters(
            admin.ListDeadLettersRequest(webhook_id="dead")).dead_letters)
        dead_after = time.time() - started
        (letter,) = letters
        assert letter.attempts == ATTEMPTS
        assert letter.event_type == "approval.requested"
        assert json.loads(letter.body)["data"]["session_id"] == "waiting"
        assert receiver.seen() == []
        print(f"\nwrites/s: {before:.0f} before, {during:.0f} while the receiver hung; "
              f"dead-lettered after {dead_after:.1f}s ({ATTEMPTS} attempts of 1s)")

        # The receiver is back; the dead letter, retried, is delivered.
        receiver.hang = False
        admins.RetryDeadLetter(admin.RetryDeadLetterRequest(webhook_id="dead", key=letter.key))
        got = wait_until("the retried delivery", receiver.seen)
        assert got[0][0] == letter.message_id
        assert admins.ListDeadLetters(admin.ListDeadLettersRequest(webhook_id="dead")).dead_letters == []
    finally:
        proc.kill()
        receiver.http.shutdown()


def test_bad_subscriptions_are_refused(channel):
    admins = admin_pb2_grpc.AdminServiceStub(channel)
    for hook, field in [
        (admin.Webhook(webhook_id="x", url="http://127.0.0.1:9/", event_types=["plan.completed"]), "--webhook-allow-http"),
        (admin.Webhook(webhook_id="x", url="https://h/", event_types=["plan.done"]), "event_types[0]"),
        (admin.Webhook(webhook_id="x", url="https://h/", event_types=[]), "event_types"),
        (admin.Webhook(webhook_id="x y", url="https://h/", event_types=["plan.completed"]), "webhook_id"),
    ]:
        try:
            admins.CreateWebhook(admin.CreateWebhookRequest(webhook=hook))
            raise AssertionError(f"accepted {hook}")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
            assert field in e.details(), e.details()
    try:
        admins.DeleteWebhook(admin.DeleteWebhookRequest(webhook_id="nope"))
        raise AssertionError("deleted nothing")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND


def test_the_cli_manages_subscriptions(server_addr):
    def cairn(*args):
        done = subprocess.run([BINARY, *args, "--server", server_addr], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = cairn("admin", "webhook", "create", "cli-hook", "--url", "https://hooks.invalid/x",
                "--event", "plan.completed", "--event", "session.lost", "--tree", "orch")
    assert "whsec_" in out
    listed = json.loads(cairn("admin", "webhook", "list", "--output", "json"))["webhooks"]
    (hook,) = [w for w in listed if w["webhook_id"] == "cli-hook"]
    assert hook["event_types"] == ["plan.completed", "session.lost"] and hook["session_root"] == "orch"
    assert "secret" not in json.dumps(listed) and "whsec_" not in json.dumps(listed)
    assert "No dead letters." in cairn("admin", "webhook", "dead", "cli-hook")
    cairn("admin", "webhook", "delete", "cli-hook")
    assert "cli-hook" not in cairn("admin", "webhook", "list")


def test_escalations_lost_agents_tree_filters_and_redirects(tmp_path):
    """`approval.escalated` and `session.lost` arrive; a subscription to one
    tree hears nothing of another; a redirect to another host is a failed
    attempt, never followed."""
    from cairn.v1 import session_pb2 as session
    from cairn.v1 import session_pb2_grpc

    port, data = _free_port(), tempfile.mkdtemp(prefix="cairn-webhooks-kinds-")
    receiver, other = Receiver(), Receiver()
    # The redirecting receiver sends every delivery on to `other` under a
    # different host name (localhost, not 127.0.0.1).
    target = other.url.replace("127.0.0.1", "localhost")

    class Redirect(ThreadingHTTPServer):
        pass

    from http.server import BaseHTTPRequestHandler as Base

    class Handler(Base):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(307)
            self.send_header("location", target)
            self.end_headers()

    redirect = Redirect(("127.0.0.1", 0), Handler)
    threading.Thread(target=redirect.serve_forever, daemon=True).start()
    proc, channel = start(port, data)
    try:
        admins = admin_pb2_grpc.AdminServiceStub(channel)
        sessions = session_pb2_grpc.SessionServiceStub(channel)
        for root in ("orch", "elsewhere"):
            sessions.CreateSession(session.CreateSessionRequest(session=session.Session(session_id=root, agent_id="main")))
        receiver.secret = admins.CreateWebhook(admin.CreateWebhookRequest(webhook=admin.Webhook(
            webhook_id="orch-only", url=receiver.url, session_root="orch",
            event_types=["approval.requested", "approval.escalated", "session.lost"],
        ))).secret
        other.secret = admins.CreateWebhook(admin.CreateWebhookRequest(webhook=admin.Webhook(
            webhook_id="redirected", url=f"http://127.0.0.1:{redirect.server_address[1]}/hook",
            event_types=["approval.requested"],
        ))).secret
        plans = plan_pb2_grpc.PlanServiceStub(channel)
        for s, parent in (("orch:coder", "orch"), ("elsewhere:coder", "elsewhere")):
            sessions.CreateSession(session.CreateSessionRequest(
                session=session.Session(session_id=s, agent_id="coder", parent_session_id=parent)))
        # An escalating deadline on a plan in orch; the same plan elsewhere.
        plans.EnterPlanMode(plan.EnterPlanModeRequest(session_id="orch:coder", goal="ship"))
        steps = [plan.ImplementationStep(id=1, description="one")]
        plans.ExitPlanMode(plan.ExitPlanModeRequest(
            session_id="orch:coder", plan=plan.ImplementationPlan(summary="p", steps=steps),
            deadline=plan.ApprovalDeadline(
                timeout=duration_pb2.Duration(seconds=1), policy=plan.DEADLINE_POLICY_ESCALATE,
                escalate_to="role:admin", escalation_timeout=duration_pb2.Duration(seconds=600)),
        ))
        submit(plans, "elsewhere:coder")
        # A lease nobody renews: STALLED after 1 s, LOST 1 s later.
        sessions.KeepAlive(session.KeepAliveRequest(
            session_id="orch:coder", ttl=duration_pb2.Duration(seconds=1), grace=duration_pb2.Duration(seconds=1)))
        got = wait_until("escalated and lost", lambda: (
            kinds(receiver.seen()) >= {("approval.escalated", "orch:coder"), ("session.lost", "orch:coder")}
            and receiver.seen()))
        assert kinds(got) <= {("approval.requested", "orch:coder"), ("approval.escalated", "orch:coder"),
                              ("session.lost", "orch:coder")}, kinds(got)
        escalated = [p for _, p in got if p["type"] == "approval.escalated"][0]
        assert escalated["data"]["item"]["deadline"]["escalated_to"] == "role:admin"
        letters = wait_until("the redirect dead-lettered", lambda: admins.ListDeadLetters(
            admin.ListDeadLettersRequest(webhook_id="redirected")).dead_letters)
        assert all("307" in d.last_error for d in letters), [d.last_error for d in letters]
        assert other.seen() == [], "a redirect to another host is never followed"
    finally:
        proc.kill()
        receiver.http.shutdown()
        other.http.shutdown()
        redirect.shutdown()
