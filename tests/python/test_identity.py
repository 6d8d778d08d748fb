"""Identity from Python: TLS and mutual TLS through the generated client,
and `cairn mcp` acting for an agent with its token."""

import asyncio
import datetime
import http.client
import json
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mcp import ClientSession, StdioServerParameters, stdio_client

from cairn.v1 import auth_pb2 as auth
from cairn.v1 import auth_pb2_grpc
from cairn.v1 import session_pb2 as session
from cairn.v1 import session_pb2_grpc
from conftest import BINARY, _free_port

ADMIN = "python-admin-token-0123456789abcdef"


def _cert(name, key, issuer=None, issuer_key=None, ca=False, sans=()):
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki():
    """A CA, a certificate for localhost, a client certificate: PEM bytes
    and files, made at run time."""
    import ipaddress

    d = Path(tempfile.mkdtemp(prefix="cairn-pki-"))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("cairn test CA", ca_key, ca=True)
    pem = lambda c: c.public_bytes(serialization.Encoding.PEM)
    key_pem = lambda k: k.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    out = {"ca": pem(ca)}
    for name, sans in [
        ("server", [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
        ("client", []),
    ]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _cert(name, key, issuer=ca.subject, issuer_key=ca_key, sans=sans)
        out[name] = pem(cert)
        out[name + "_key"] = key_pem(key)
    files = {}
    for k, v in out.items():
        (d / f"{k}.pem").write_bytes(v)
        files[k] = str(d / f"{k}.pem")
    return out, files


def _serve(*flags):
    port = _free_port()
    data = tempfile.mkdtemp(prefix="cairn-id-")
    proc = subprocess.Popen(
        [BINARY, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data, *flags],
        stderr=subprocess.DEVNULL,
    )
    return proc, port


def _stop(proc):
    proc.terminate()
    proc.wait(timeout=20)


def _healthy(channel):
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status


def test_tls_and_mutual_tls_from_python(pki):
    pems, files = pki
    web = _free_port()
    proc, port = _serve(
        "--tls-cert", files["server"], "--tls-key", files["server_key"], "--web-listen", f"127.0.0.1:{web}"
    )
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=pems["ca"])
        with grpc.secure_channel(f"localhost:{port}", creds) as ch:
            grpc.channel_ready_future(ch).result(timeout=30)
            assert _healthy(ch) == health_pb2.HealthCheckResponse.SERVING
        # The dashboard's listener is on TLS too; plain HTTP gets nowhere.
        trusted = ssl.create_default_context(cadata=pems["ca"].decode())
        with urllib.request.urlopen(f"https://localhost:{web}/app.css", context=trusted, timeout=10) as r:
            assert r.status == 200
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            urllib.request.urlopen(f"http://localhost:{web}/app.css", timeout=10).read()
    finally:
        _stop(proc)

    proc, port = _serve(
        "--tls-cert", files["server"], "--tls-key", files["server_key"], "--tls-client-ca", files["ca"]
    )
    try:
        bare = grpc.ssl_channel_credentials(root_certificates=pems["ca"])
        with grpc.secure_channel(f"localhost:{port}", bare) as ch:
            with pytest.raises(grpc.RpcError) as refused:
                _healthy(ch)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        mutual = grpc.ssl_channel_credentials(
            root_certificates=pems["ca"], private_key=pems["client_key"], certificate_chain=pems["client"]
        )
        with grpc.secure_channel(f"localhost:{port}", mutual) as ch:
            grpc.channel_ready_future(ch).result(timeout=30)
            assert _healthy(ch) == health_pb2.HealthCheckResponse.SERVING
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def auth_server():
    token_file = Path(tempfile.mkdtemp(prefix="cairn-admin-")) / "token"
    token_file.write_text(ADMIN + "\n")
    proc, port = _serve("--auth", "token", "--admin-token-file", str(token_file))
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(ch).result(timeout=30)
    try:
        yield ch, f"http://127.0.0.1:{port}"
    finally:
        ch.close()
        _stop(proc)


def _as(token):
    return (("authorization", f"Bearer {token}"),)


def test_an_agent_over_mcp_acts_only_as_its_agent(auth_server):
    ch, addr = auth_server
    admins = auth_pb2_grpc.AuthServiceStub(ch)
    orch = admins.CreatePrincipal(
        auth.CreatePrincipalRequest(
            principal=auth.Principal(principal_id="orchestrator", roles=[auth.ROLE_ORCHESTRATOR], session_roots=["orch"])
        ),
        metadata=_as(ADMIN),
    ).token
    session_pb2_grpc.SessionServiceStub(ch).CreateSession(
        session.CreateSessionRequest(session=session.Session(session_id="orch", agent_id="main")), metadata=_as(orch)
    )
    # The orchestrator hands its agent a token that acts as `coder` in its tree.
    coder = admins.CreatePrincipal(
        auth.CreatePrincipalRequest(
            principal=auth.Principal(
                principal_id="coder-agent", roles=[auth.ROLE_AGENT], agent_ids=["coder"], session_roots=["orch"]
            )
        ),
        metadata=_as(ADMIN),
    ).token

    async def tools(agent, token):
        params = StdioServerParameters(
            command=BINARY,
            args=["mcp", "--server", addr, "--agent-id", agent, "--session-id", f"orch:{agent}", "--parent-session-id", "orch"],
            env={"CAIRN_TOKEN": token},
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as mcp:
                await mcp.initialize()
                out = []
                for name, args in [
                    ("todo_write", {"todos": [{"id": "1", "content": "build", "status": "in_progress"}]}),
                    ("todo_read", {}),
                    ("update_plan", {"plan": [{"step": f"s{i}", "status": "pending"} for i in range(4)]}),
                    ("plan_approve", {}),
                ]:
                    r = await mcp.call_tool(name, args)
                    out.append((r.is_error, r.content[0].text))
                return out

    own = asyncio.run(tools("coder", coder))
    assert not own[0][0] and not own[1][0], own
    assert json.loads(own[1][1])["todos"][0]["content"] == "build"
    assert not own[2][0], own[2]
    # An agent never approves: that needs an approver.
    assert own[3][0] and "approver" in own[3][1], own[3]
    # The same token, claiming another agent: refused by the server.
    other = asyncio.run(tools("tester", coder))
    assert all(err for err, _ in other), other
    assert "does not act as agent tester" in other[1][1], other[1]
