"""What unauthenticated work costs an authenticated caller.

Starts `cairn serve --auth token` (the binary given), then measures the
latency of an authenticated Connect GetPlan, one call at a time, first on
an idle server and then while FLOODERS clients post 4 MiB JSON bodies with
no token to the same port as fast as they can (the second hardening
round's item 4). Prints one JSON line per phase: p50, p99 and calls.

    python3 bench/flood.py target/release/cairn
    FLOODERS=8 SECONDS=10 python3 bench/flood.py /path/to/other/cairn

Only loopback traffic; every loop stops by itself after SECONDS.
"""

import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

FLOODERS = int(os.environ.get("FLOODERS", "8"))
SECONDS = float(os.environ.get("SECONDS", "10"))
TOKEN = "a-bootstrap-admin-token-0123456789"


def start(binary, data):
    token = os.path.join(data, "admin.token")
    with open(token, "w") as f:
        f.write(TOKEN)
    os.chmod(token, 0o600)
    proc = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(data, "d"),
         "--auth", "token", "--admin-token-file", token],
        stderr=subprocess.PIPE, text=True,
    )
    for line in proc.stderr:
        m = re.search(r"listen=(\S+)", line)
        if m and "serving" in line:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, m.group(1)
    raise SystemExit("the server did not start")


def call(addr, path, body, token=None):
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"content-type": "application/json", "host": addr}
    if token:
        headers["authorization"] = f"Bearer {token}"
    conn.request("POST", path, body=body, headers=headers)
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp.status


def probe(addr, seconds):
    lat = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.monotonic()
        call(addr, "/cairn.v1.PlanService/GetPlan", b'{"sessionId":"s"}', TOKEN)
        lat.append(time.monotonic() - t)
    lat.sort()
    return {
        "calls": len(lat),
        "p50_ms": round(lat[len(lat) // 2] * 1000, 2),
        "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 2),
    }


def flood(addr, stop):
    # Many small objects: what makes JSON expensive to decode.
    item = b'{"step":"abcdefgh"},'
    body = b'{"sessionId":"s","plan":[' + item * (4_000_000 // len(item)) + b'{"step":"z"}]}'
    while not stop.is_set():
        try:
            call(addr, "/cairn.v1.PlanService/UpdatePlan", body)
        except OSError:
            pass


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as data:
        proc, addr = start(binary, data)
        try:
            call(addr, "/cairn.v1.PlanService/UpdatePlan", json.dumps({
                "sessionId": "s",
                "plan": [{"step": f"step {i}", "status": "STEP_STATUS_PENDING"} for i in range(5)],
            }).encode(), TOKEN)
            idle = probe(addr, SECONDS / 2)
            print(json.dumps({"binary": binary, "phase": "idle", **idle}))
            stop = threading.Event()
            threads = [threading.Thread(target=flood, args=(addr, stop)) for _ in range(FLOODERS)]
            for t in threads:
                t.start()
            time.sleep(1)
            flooded = probe(addr, SECONDS)
            stop.set()
            for t in threads:
                t.join()
            print(json.dumps({"binary": binary, "phase": f"{FLOODERS} unauthenticated 4 MiB JSON flooders", **flooded}))
        finally:
            proc.terminate()
            proc.wait(timeout=20)


if __name__ == "__main__":
    main()
