"""deploy/compose.yaml started for real with podman: three etcd members and
three Cairn replicas from images built here (nothing can be pulled), then
one etcd member paused and, once back, one killed while writes go on.

The etcd image is a Debian base made with debootstrap from the machine's apt
mirror with Debian's etcd-server in it; Cairn's image is deploy/Dockerfile's
runtime-prebuilt stage around the binary CI built (CAIRN_BIN). Needs root,
podman, runc and podman-compose (`.ci/run` installs them). Containers, their
volumes and the Cairn image go at the end; the base image stays in its own
storage root for the next run (debootstrap takes about 40 s)."""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cairn.v1 import plan_pb2 as plan
from cairn.v1 import watch_pb2 as watch
from cairn_client import connect
from debian import debootstrap, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "deploy" / "compose.yaml"
PROJECT = "cairnci"
ETCD_IMAGE = "localhost/cairn-compose-etcd:ci"
CAIRN_IMAGE = "localhost/cairn-compose:ci"
TOKEN = "compose-admin-token-0123456789abcdef"
# Its own storage root, so this test's images and the image test's never
# meet, and a killed run is cleaned by deleting one directory.
STORAGE_ROOT = "/var/tmp/cairn-compose-storage"

# crun fails on this host's cgroups; the default ulimits are above the
# host's hard limits, so containers would not start.
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
"""
STORAGE_CONF = f"""\
[storage]
driver = "vfs"
graphroot = "{STORAGE_ROOT}"
runroot = "/run/cairn-compose-storage"
"""


class Compose:
    """The started deployment: its replicas' addresses and the commands
    that drive it."""

    def __init__(self, conf_dir):
        self.conf_dir = pathlib.Path(conf_dir)
        (self.conf_dir / "containers.conf").write_text(CONTAINERS_CONF)
        (self.conf_dir / "storage.conf").write_text(STORAGE_CONF)
        self.env = {
            **os.environ,
            "CONTAINERS_CONF": str(self.conf_dir / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(self.conf_dir / "storage.conf"),
            "ETCD_IMAGE": ETCD_IMAGE,
            "CAIRN_IMAGE": CAIRN_IMAGE,
        }
        self.ports = [free_port() for _ in range(3)]
        self.override = self.conf_dir / "override.yaml"
        self.took = {}

    def run(self, *args, check=True):
        done = subprocess.run(args, env=self.env, capture_output=True, text=True)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done.stdout.strip()

    def compose(self, *args, check=True):
        return self.run(
            sys.executable, "-m", "podman_compose", "-p", PROJECT,
            "-f", str(COMPOSE_FILE), "-f", str(self.override), *args, check=check,
        )

    def timed(self, what, fn):
        start = time.monotonic()
        out = fn()
        self.took[what] = time.monotonic() - start
        return out

    def build_images(self, binary):
        images = self.run("podman", "images", "--format", "{{.Repository}}:{{.Tag}}").split()
        if ETCD_IMAGE not in images:
            rootfs = tempfile.mkdtemp(prefix="cairn-compose-rootfs-")
            # The directory becomes the image's `/`: mkdtemp's 0700 would
            # lock every user but root out of the whole tree.
            os.chmod(rootfs, 0o755)
            try:
                debootstrap(rootfs, include=["etcd-server"])
                # One Debian base for both: etcd's image is the base whose
                # entrypoint is etcd; Cairn's image sets its own.
                tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
                subprocess.run(
                    ["podman", "import", "--change", 'ENTRYPOINT ["/usr/bin/etcd"]', "-", ETCD_IMAGE],
                    stdin=tar.stdout, env=self.env, check=True, capture_output=True,
                )
                assert tar.wait() == 0
            finally:
                shutil.rmtree(rootfs, ignore_errors=True)
        ctx = tempfile.mkdtemp(prefix="cairn-compose-ctx-")
        try:
            shutil.copy(binary, pathlib.Path(ctx) / "cairn")
            self.run(
                "podman", "build", "-q", "-f", str(ROOT / "deploy" / "Dockerfile"),
                "--target", "runtime-prebuilt",
                "--build-arg", f"RUNTIME_IMAGE={ETCD_IMAGE}",
                "--build-arg", "BINARY=cairn",
                "-t", CAIRN_IMAGE, ctx,
            )
        finally:
            shutil.rmtree(ctx, ignore_errors=True)

    def write_override(self):
        token = self.conf_dir / "cairn-admin-token"
        token.write_text(TOKEN + "\n")
        # Readable by the image's user only, as a mounted secret would be.
        os.chown(token, 10001, 10001)
        os.chmod(token, 0o400)
        # Published on loopback only, on free ports, and the secret from
        # here rather than deploy/admin-token.
        replicas = "".join(
            f'  cairn-{i}:\n    ports: !override ["127.0.0.1:{port}:50051"]\n'
            for i, port in enumerate(self.ports)
        )
        self.override.write_text(
            f"services:\n{replicas}secrets:\n  cairn-admin-token:\n    file: {token}\n"
        )

    def addr(self, replica):
        return f"127.0.0.1:{self.ports[replica]}"

    def logs(self, name):
        return self.run("podman", "logs", "--tail", "40", f"{PROJECT}_{name}_1", check=False)

    def down(self):
        self.compose("down", "-v", "-t", "5", check=False)
        # `down -v` leaves the image's anonymous /data volumes.
        self.run("podman", "volume", "prune", "-f", check=False)
        self.run("podman", "rmi", "-f", CAIRN_IMAGE, check=False)
        self.run("podman", "image", "prune", "-f", check=False)


def _serving(addr, patience):
    deadline = time.monotonic() + patience
    last = None
    while time.monotonic() < deadline:
        try:
            with grpc.insecure_channel(addr) as channel:
                reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = reply.status
        except grpc.RpcError as e:
            last = e.code()
        time.sleep(0.5)
    raise AssertionError(f"{addr} not serving after {patience} s: {last}")


@pytest.fixture(scope="module")
def deployment():
    binary = os.environ.get("CAIRN_BIN") or str(ROOT / "target" / "debug" / "cairn")
    conf = tempfile.mkdtemp(prefix="cairn-compose-")
    c = Compose(conf)
    # A run killed midway leaves its containers under the same project name.
    c.compose("down", "-v", "-t", "1", check=False)
    try:
        c.timed("images", lambda: c.build_images(binary))
        c.write_override()
        c.timed("up", lambda: c.compose("up", "-d"))

        def all_serving():
            for i in range(3):
                _serving(c.addr(i), 90)

        try:
            c.timed("serving", all_serving)
        except AssertionError as e:
            logs = "\n".join(c.logs(f"cairn-{i}") for i in range(3))
            raise AssertionError(f"{e}\n{logs}") from None
        yield c
    finally:
        c.timed("down", c.down)
        shutil.rmtree(conf, ignore_errors=True)
        print(
            "compose: " + ", ".join(f"{k} {v:.0f} s" for k, v in c.took.items()),
            file=sys.stderr,
        )


def _steps(current):
    return [
        plan.PlanItem(
            step=f"step {i + 1}",
            status=plan.STEP_STATUS_COMPLETED
            if i < current
            else plan.STEP_STATUS_IN_PROGRESS
            if i == current
            else plan.STEP_STATUS_PENDING,
        )
        for i in range(5)
    ]


class Follower:
    """A watch on one replica, from a revision on, its events kept."""

    def __init__(self, client, start):
        self.revisions = []
        self.error = None
        self.call = client.watches.Watch(watch.WatchRequest(all=True, start_revision=start))
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()

    def _follow(self):
        try:
            for reply in self.call:
                if reply.WhichOneof("kind") == "event":
                    e = reply.event
                    self.revisions.append((e.revision, e.index_in_revision))
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                self.error = e

    def wait_for(self, revision, patience):
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline and not (self.revisions and self.revisions[-1][0] >= revision):
            assert self.error is None, self.error
            time.sleep(0.1)
        return list(self.revisions)


class Writers:
    """One writer per client, each on its own session, writing until
    stopped: what was acknowledged, what failed, and the slowest call."""

    def __init__(self, clients):
        self.stop = threading.Event()
        self.acked = {}
        self.failed = []
        self.slowest = 0.0
        self.threads = [
            threading.Thread(target=self._write, args=(f"compose-{i}", client), daemon=True)
            for i, client in enumerate(clients)
        ]
        for t in self.threads:
            t.start()

    def _write(self, session, client):
        acked = self.acked.setdefault(session, [])
        n = 0
        while not self.stop.is_set():
            start = time.monotonic()
            try:
                reply = client.plans.UpdatePlan(
                    plan.UpdatePlanRequest(session_id=session, plan=_steps(n % 5)), timeout=30
                )
                acked.append(reply.revision)
            except grpc.RpcError as e:
                self.failed.append(f"{session} write {n}: {e.code()} {e.details()}")
            self.slowest = max(self.slowest, time.monotonic() - start)
            n += 1

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)


def test_writes_go_on_with_one_etcd_member_paused_then_one_killed(deployment):
    c = deployment
    writer, reader, other = (connect(c.addr(i), token=TOKEN) for i in range(3))
    try:
        first = writer.plans.UpdatePlan(
            plan.UpdatePlanRequest(session_id="compose", plan=_steps(0)), timeout=20
        )
        assert first.stored
        # Written on one replica, read on another: the read is fenced on
        # etcd's revision, so it sees what was acknowledged elsewhere.
        got = reader.plans.GetPlan(plan.GetPlanRequest(session_id="compose"), timeout=20)
        assert got.plan.revision == first.revision
        follower = Follower(reader, first.revision)

        # Writes on two replicas all along; the clients point at all
        # three members. First one member hangs (paused: its name still
        # resolves, it answers nothing), then, back, another is killed.
        writers = Writers([writer, other])
        time.sleep(2)
        c.run("podman", "pause", f"{PROJECT}_etcd-1_1")
        time.sleep(6)
        c.run("podman", "unpause", f"{PROJECT}_etcd-1_1")
        time.sleep(3)
        c.run("podman", "kill", f"{PROJECT}_etcd-0_1")
        time.sleep(6)
        writers.finish()
        if writers.failed:
            logs = "\n".join(c.logs(f"cairn-{i}") for i in (0, 2))
            pytest.fail(f"{len(writers.failed)} writes failed: {writers.failed[:5]}\n{logs}")
        acked = sorted(r for rs in writers.acked.values() for r in rs)
        assert all(len(rs) > 10 for rs in writers.acked.values()), writers.acked

        # The reader's watch, on the third replica, saw each of them once
        # and in order (an event is its revision and its place in it).
        try:
            seen = follower.wait_for(acked[-1], 60)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{c.logs('cairn-1')}") from None
        assert seen[0][0] == first.revision
        assert sorted(set(seen)) == seen, "an event twice or out of order"
        revisions = {r for r, _ in seen}
        assert set(acked) <= revisions, f"missing: {sorted(set(acked) - revisions)}"
        for session, rs in writers.acked.items():
            last = reader.plans.GetPlan(plan.GetPlanRequest(session_id=session), timeout=20)
            assert last.plan.revision == rs[-1]
        follower.call.cancel()
        print(
            f"compose: {len(acked)} writes through a paused then a killed etcd member, "
            f"0 failed, slowest {writers.slowest * 1000:.0f} ms",
            file=sys.stderr,
        )
    finally:
        for client in (writer, reader, other):
            client.close()
