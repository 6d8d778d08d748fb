"""The installed package against the real `cairn` binary: calls through
the generated stubs, error reasons, a watch that resumes across a server
restart, and wait."""

import os
import pathlib
import socket
import subprocess
import tempfile
import threading
import time

import grpc
import pytest

from cairn.v1 import plan_pb2 as plan
from cairn_client import connect, error_reason

ROOT = pathlib.Path(__file__).resolve().parents[3]
BINARY = os.environ.get("CAIRN_BIN") or str(ROOT / "target" / "debug" / "cairn")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self):
        self.port = _free_port()
        self.data = tempfile.mkdtemp(prefix="cairn-pyclient-")
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [BINARY, "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.data],
            stderr=subprocess.DEVNULL,
        )
        channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        grpc.channel_ready_future(channel).result(timeout=30)
        channel.close()

    def stop(self):
        self.proc.terminate()
        assert self.proc.wait(timeout=20) == 0


@pytest.fixture()
def server():
    s = Server()
    yield s
    s.stop()


def steps(n, current=0):
    return [
        plan.PlanItem(
            step=f"step {i + 1}",
            status=plan.STEP_STATUS_COMPLETED
            if i < current
            else plan.STEP_STATUS_IN_PROGRESS
            if i == current
            else plan.STEP_STATUS_PENDING,
        )
        for i in range(n)
    ]


def test_calls_and_error_reasons(server):
    with connect(f"127.0.0.1:{server.port}") as cairn:
        reply = cairn.plans.UpdatePlan(plan.UpdatePlanRequest(session_id="s", plan=steps(5)))
        assert reply.stored and reply.revision == 1
        bad = steps(5)
        bad[1].status = plan.STEP_STATUS_IN_PROGRESS
        with pytest.raises(grpc.RpcError) as e:
            cairn.plans.UpdatePlan(plan.UpdatePlanRequest(session_id="s", plan=bad))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details() == "At most one step can be in_progress at a time"
        assert error_reason(e.value) == "MULTIPLE_IN_PROGRESS"


def test_watch_resumes_across_a_restart_with_nothing_missed_or_repeated(server):
    target = f"127.0.0.1:{server.port}"
    with connect(target) as cairn:
        for i in range(3):
            cairn.plans.UpdatePlan(plan.UpdatePlanRequest(session_id=f"w{i}", plan=steps(5)))
    seen = []
    done = threading.Event()

    def follow():
        with connect(target) as cairn:
            for r in cairn.watch(all=True, start_revision=1, max_retry_seconds=30):
                if r.WhichOneof("kind") == "event":
                    seen.append((r.event.revision, r.event.index_in_revision))
                    if r.event.revision == 6 and r.event.index_in_revision + 1 == r.event.events_in_revision:
                        done.set()
                        return

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    deadline = time.time() + 20
    while len(seen) < 6 and time.time() < deadline:
        time.sleep(0.02)
    # The server goes away under the watch and comes back on the same data.
    server.stop()
    server.start()
    with connect(target) as cairn:
        for i in range(3):
            cairn.plans.UpdatePlan(plan.UpdatePlanRequest(session_id=f"w{i}", plan=steps(5, 1)))
    assert done.wait(30), seen
    # Revisions 1-3 carry two events each (created + plan), 4-6 one each.
    assert seen == [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1), (4, 0), (5, 0), (6, 0)]


def test_wait_returns_when_the_tree_is_done(server):
    with connect(f"127.0.0.1:{server.port}") as cairn:
        cairn.plans.UpdatePlan(plan.UpdatePlanRequest(session_id="orch", plan=steps(4)))

        def finish():
            time.sleep(0.3)
            cairn.plans.UpdatePlan(plan.UpdatePlanRequest(session_id="orch", plan=steps(4, 4)))

        threading.Thread(target=finish, daemon=True).start()
        reply = cairn.wait("orch", timeout_seconds=20)
        assert reply.satisfied
        assert [p.session_id for p in reply.plans] == ["orch"]
        assert all(i.status == plan.STEP_STATUS_COMPLETED for i in reply.plans[0].items)
