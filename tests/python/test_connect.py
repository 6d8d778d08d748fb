"""The Connect protocol on the gRPC port: JSON (and binary protobuf) over
plain HTTP, exactly as the README shows it with curl, errors with their
details, and Watch as a Connect server stream."""

import json
import shutil
import struct
import subprocess

import httpx2

from cairn.v1 import plan_pb2 as plan
from conftest import ROOT

PLAN = {
    "sessionId": "demo",
    "explanation": "Ship it",
    "plan": [
        {"step": "Write the code", "status": "STEP_STATUS_IN_PROGRESS"},
        {"step": "Test it", "status": "STEP_STATUS_PENDING"},
        {"step": "Review it", "status": "STEP_STATUS_PENDING"},
        {"step": "Ship it", "status": "STEP_STATUS_PENDING"},
    ],
}


def _curl(server_addr, method, body):
    assert shutil.which("curl"), "curl is needed (apt-get install curl)"
    out = subprocess.run(
        [
            "curl", "-s", "-w", "\n%{http_code}",
            "-d", json.dumps(body),
            "-H", "content-type: application/json",
            f"{server_addr}/cairn.v1.PlanService/{method}",
        ],
        check=True, capture_output=True, text=True,
    ).stdout
    text, status = out.rsplit("\n", 1)
    return int(status), json.loads(text)


def test_the_readme_example_answers_byte_for_byte(server_addr):
    # Before anything creates session "demo" on this server.
    readme = (ROOT / "README.md").read_text()
    shown = next(l for l in readme.splitlines() if l.startswith('{"code":"not_found"'))
    raw = subprocess.run(
        ["curl", "-s", "-d", '{"sessionId":"demo"}', "-H", "content-type: application/json",
         f"{server_addr}/cairn.v1.PlanService/GetPlan"],
        check=True, capture_output=True, text=True,
    ).stdout
    assert raw == shown


def test_unary_json_with_curl_and_an_error_with_its_details(server_addr):
    status, reply = _curl(server_addr, "UpdatePlan", PLAN)
    assert status == 200, reply
    assert reply["message"] == "Plan updated" and reply["stored"] is True
    # Canonical proto3 JSON: lowerCamel names, enum names, 64-bit as strings.
    assert reply["plan"][0] == {"id": 1, "step": "Write the code", "status": "STEP_STATUS_IN_PROGRESS"}
    revision = int(reply["revision"])

    status, got = _curl(server_addr, "GetPlan", {"sessionId": "demo"})
    assert status == 200
    assert got["plan"]["sessionId"] == "demo" and int(got["revision"]) >= revision
    assert got["plan"]["updateTime"].endswith("Z")  # RFC 3339

    two = json.loads(json.dumps(PLAN))
    two["plan"][1]["status"] = "STEP_STATUS_IN_PROGRESS"
    status, err = _curl(server_addr, "UpdatePlan", two)
    assert status == 400
    assert err["code"] == "invalid_argument"
    assert err["message"] == "At most one step can be in_progress at a time"
    info = next(d for d in err["details"] if d["type"] == "google.rpc.ErrorInfo")
    assert info["debug"]["reason"] == "MULTIPLE_IN_PROGRESS" and info["value"]

    status, err = _curl(server_addr, "GetPlan", {"sessionId": "nobody"})
    assert status == 404 and err["code"] == "not_found"
    status, err = _curl(server_addr, "GetPlan", {"sessionId": 7})
    assert status == 400 and err["code"] == "invalid_argument"


def test_binary_protobuf_works_too(server_addr):
    req = plan.GetPlanRequest(session_id="demo").SerializeToString()
    r = httpx2.post(
        f"{server_addr}/cairn.v1.PlanService/GetPlan",
        content=req,
        headers={"content-type": "application/proto"},
    )
    assert r.status_code == 200 and r.headers["content-type"] == "application/proto"
    reply = plan.GetPlanResponse.FromString(r.content)
    assert reply.plan.session_id == "demo" and len(reply.plan.items) == 4


def _envelopes(chunks):
    buf = b""
    for chunk in chunks:
        buf += chunk
        while len(buf) >= 5:
            flags, size = struct.unpack(">BI", buf[:5])
            if len(buf) < 5 + size:
                break
            yield flags, json.loads(buf[5 : 5 + size])
            buf = buf[5 + size :]


def _watch(server_addr, request):
    body = json.dumps(request).encode()
    return httpx2.stream(
        "POST",
        f"{server_addr}/cairn.v1.WatchService/Watch",
        content=struct.pack(">BI", 0, len(body)) + body,
        headers={"content-type": "application/connect+json"},
        timeout=20,
    )


def test_watch_is_a_connect_server_stream_that_resumes(server_addr):
    _curl(server_addr, "UpdatePlan", {**PLAN, "sessionId": "streamed"})
    seen = []
    with _watch(server_addr, {"sessionId": "streamed", "startRevision": "1"}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/connect+json"
        for flags, msg in _envelopes(r.iter_bytes()):
            assert flags == 0, msg
            seen.append(msg["event"])
            if len(seen) == 2:
                break
    assert [e["type"] for e in seen] == ["EVENT_TYPE_SESSION_CREATED", "EVENT_TYPE_PLAN_UPDATED"]
    last = int(seen[-1]["revision"])
    # Resume after the last revision seen: the next change, nothing again.
    _curl(server_addr, "UpdatePlan", {**PLAN, "sessionId": "streamed", "explanation": "again"})
    with _watch(server_addr, {"sessionId": "streamed", "startRevision": str(last + 1)}) as r:
        flags, msg = next(_envelopes(r.iter_bytes()))
    assert flags == 0 and msg["event"]["type"] == "EVENT_TYPE_PLAN_UPDATED"
    assert int(msg["event"]["revision"]) > last

    # An error ends the stream with an end-of-stream envelope carrying it.
    with _watch(server_addr, {"all": True, "startRevision": "999999"}) as r:
        flags, end = next(_envelopes(r.iter_bytes()))
    assert flags == 2
    assert end["error"]["code"] == "out_of_range"
    assert end["error"]["details"][0]["debug"]["reason"] == "REVISION_NOT_YET"
