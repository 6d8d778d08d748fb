"""The container image, built and started for real: a Debian base made with
debootstrap from the machine's apt mirror (no image can be pulled here),
the runtime stage of deploy/Dockerfile built by buildah around the binary
CI built, then started and called over gRPC.

Needs root, buildah and debootstrap (`.ci/run` installs them); CAIRN_BIN is
the binary to put in the image (glibc of this machine: the base is the
same Debian release)."""

import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from debian import debootstrap, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = {**os.environ, "STORAGE_DRIVER": "vfs", "BUILDAH_ISOLATION": "chroot"}
BASE = "localhost/cairn-debian-base:ci"
IMAGE = "localhost/cairn:ci"
TOKEN = "image-admin-token-0123456789abcdef"


def _run(*args, **kw):
    return subprocess.run(args, env=ENV, check=True, capture_output=True, text=True, **kw).stdout.strip()


@pytest.fixture(scope="module")
def image():
    binary = os.environ.get("CAIRN_BIN") or str(ROOT / "target" / "debug" / "cairn")
    images = _run("buildah", "images", "--format", "{{.Name}}:{{.Tag}}")
    if BASE not in images.split():
        rootfs = tempfile.mkdtemp(prefix="cairn-rootfs-")
        debootstrap(rootfs)
        ctr = _run("buildah", "from", "scratch")
        _run("buildah", "copy", ctr, rootfs, "/")
        _run("buildah", "commit", "-q", ctr, BASE)
        _run("buildah", "rm", ctr)
        shutil.rmtree(rootfs, ignore_errors=True)
    # Each build leaves a ~0.5 GB image under vfs storage; a re-tag would
    # orphan the last one, so every run removes its own image and context
    # (repeated runs once filled the disk mid-build).
    ctx = tempfile.mkdtemp(prefix="cairn-image-")
    try:
        shutil.copy(binary, pathlib.Path(ctx) / "cairn")
        _run(
            "buildah", "build", "-q",
            "-f", str(ROOT / "deploy" / "Dockerfile"),
            "--target", "runtime-prebuilt",
            "--build-arg", f"RUNTIME_IMAGE={BASE}",
            "--build-arg", "BINARY=cairn",
            "-t", IMAGE, ctx,
        )
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    yield IMAGE
    subprocess.run(["buildah", "rmi", "-f", IMAGE], env=ENV, capture_output=True)
    subprocess.run(["buildah", "rmi", "--prune"], env=ENV, capture_output=True)


def _listener_pids(port):
    """The processes holding the listening socket of `port`: the
    container's own server, whatever other `cairn` runs on the machine."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = pathlib.Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{inode}]")
    pids = set()
    for proc_dir in pathlib.Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            for fd in (proc_dir / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    pids.add(proc_dir.name)
                    break
        except OSError:
            continue
    return pids


def test_the_image_starts_answers_health_and_requires_a_token(image):
    secrets = tempfile.mkdtemp(prefix="cairn-secrets-")
    token = pathlib.Path(secrets, "cairn-admin-token")
    token.write_text(TOKEN + "\n")
    # Readable by the image's user only, as a secret mounted for it would be.
    os.chmod(secrets, 0o755)
    os.chown(token, 10001, 10001)
    os.chmod(token, 0o400)
    port = free_port()
    ctr = _run("buildah", "from", image)
    # The image's own configuration (0.0.0.0, token auth, the admin token
    # from the mounted secret, /data); only the port moves, to a free one.
    proc = subprocess.Popen(
        ["buildah", "run", "--env", f"CAIRN_LISTEN=0.0.0.0:{port}",
         "--env", f"CAIRN_WEB_LISTEN=127.0.0.1:{free_port()}",
         "--env", f"CAIRN_METRICS_LISTEN=127.0.0.1:{free_port()}",
         "-v", f"{secrets}:/run/secrets:ro", ctr, "--", "/usr/local/bin/cairn", "serve"],
        env=ENV, stderr=subprocess.PIPE, text=True,
    )
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        try:
            grpc.channel_ready_future(channel).result(timeout=60)
        except grpc.FutureTimeoutError:
            proc.kill()
            pytest.fail(f"the container did not serve:\n{proc.communicate(timeout=10)[1]}")
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.SERVING

        # Beyond loopback with authentication on: no token, no answer.
        from cairn.v1 import auth_pb2, auth_pb2_grpc

        stub = auth_pb2_grpc.AuthServiceStub(channel)
        with pytest.raises(grpc.RpcError) as e:
            stub.WhoAmI(auth_pb2.WhoAmIRequest(), timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        me = stub.WhoAmI(auth_pb2.WhoAmIRequest(), metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=10)
        assert me.principal.principal_id

        # Not root: the server process runs as the image's user. It is found
        # by its listening socket, not its name (another `cairn` may run).
        pid = _listener_pids(port)
        assert pid, f"no process listens on {port}"
        uids = {
            pathlib.Path(f"/proc/{p}/status").read_text().split("Uid:")[1].split()[0]
            for p in pid
        }
        assert uids == {"10001"}, uids
        channel.close()
    finally:
        subprocess.run(["pkill", "-TERM", "-f", f"CAIRN_LISTEN=0.0.0.0:{port}"], env=ENV)
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        for p in _listener_pids(port):
            subprocess.run(["kill", "-KILL", p], env=ENV)
        _run("buildah", "rm", ctr)
