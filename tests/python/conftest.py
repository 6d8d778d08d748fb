"""Generates Python stubs from proto/ and starts the real `cairn` binary.

This is the polyglot check: a client in another language, generated from the
repository's protos with grpcio-tools, calls every RPC by its contract name.
"""

import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

import grpc
import pytest
from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parents[2]
GEN = pathlib.Path(tempfile.mkdtemp(prefix="cairn-py-"))


def _generate():
    # Cairn's own API; proto/vendor holds etcd's, which the server speaks as a client.
    protos = sorted(str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto" / "cairn").rglob("*.proto"))
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    rc = protoc.main(
        ["protoc", f"-I{ROOT / 'proto'}", f"-I{include}", f"--python_out={GEN}", f"--grpc_python_out={GEN}"]
        + protos
    )
    assert rc == 0, "protoc failed"
    # Regular packages, so that these stubs (from this checkout's protos)
    # win over a `cairn` package installed earlier (clients/python ships
    # its own): a namespace package would lose to it whatever the order.
    for pkg in (GEN / "cairn", GEN / "cairn" / "v1"):
        (pkg / "__init__.py").touch()
    sys.path.insert(0, str(GEN))


_generate()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _target_dir():
    """Where cargo puts binaries: CARGO_TARGET_DIR or the workspace's own,
    as cargo itself reports it."""
    import json

    meta = subprocess.check_output(
        ["cargo", "metadata", "--no-deps", "--format-version", "1"], cwd=ROOT
    )
    return pathlib.Path(json.loads(meta)["target_directory"])


BINARY = os.environ.get("CAIRN_BIN") or str(_target_dir() / "debug" / "cairn")


@pytest.fixture(scope="session")
def server_addr(channel):
    """Address of the session's server, for clients other than gRPC stubs."""
    return channel._cairn_addr


@pytest.fixture(scope="session")
def channel():
    binary = BINARY
    port = _free_port()
    data = tempfile.mkdtemp(prefix="cairn-data-")
    proc = subprocess.Popen(
        [binary, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data],
        stderr=subprocess.PIPE,
    )
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    ch._cairn_addr = f"http://127.0.0.1:{port}"
    try:
        grpc.channel_ready_future(ch).result(timeout=30)
        yield ch
    finally:
        ch.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        assert proc.returncode == 0, f"server exited with {proc.returncode} on SIGTERM"
