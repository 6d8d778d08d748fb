"""One h2load row for bench/run.sh: drives a gRPC method with a fixed,
framed request body, checks first that the server answers it with
grpc-status 0, and prints one JSON line shaped like cairn-bench's reports
(h2load reports a mean latency, not percentiles).

  h2load.py LABEL URL BODY_FILE SERVER_PID DURATION_S CONNECTIONS STREAMS
"""

import json
import re
import subprocess
import sys

label, url, body, pid, duration, conns, streams = sys.argv[1:8]
headers = ["--header=content-type:application/grpc", "--header=te:trailers"]


def cpu_us(pid):
    # utime + stime, in clock ticks of 1/100 s.
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 10_000


def status_kb(pid, field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


# A few requests, verbose: h2load itself only sees HTTP 200, so make sure
# none is a gRPC error. An error comes in the response headers
# ("trailers-only"); a success's status is in trailers, which -v does not
# print, so its headers carry none.
probe = subprocess.run(
    ["h2load", "-n", "4", "-c", "1", "-v", *headers, "-d", body, url],
    capture_output=True, text=True, check=True,
).stdout
answered = len(re.findall(r":status: 200", probe))
errors = [c for c in re.findall(r"grpc-status: (\d+)", probe) if c != "0"]
if answered != 4 or errors:
    sys.exit(f"{label}: not every request succeeded (grpc-status {errors}):\n{probe}")

before = cpu_us(pid)
out = subprocess.run(
    ["h2load", "-D", duration, "-c", conns, "-m", streams, *headers, "-d", body, url],
    capture_output=True, text=True, check=True,
).stdout
after = cpu_us(pid)
done = int(re.search(r"(\d+) succeeded", out).group(1))
failed = int(re.search(r"(\d+) failed", out).group(1)) + int(re.search(r"(\d+) errored", out).group(1))
rate = float(re.search(r"([\d.]+) req/s", out).group(1))
mean = re.search(r"time for request:\s+\S+\s+\S+\s+(\S+)", out).group(1)
scale = {"us": 1, "ms": 1000, "s": 1_000_000}
mean_us = float(re.match(r"[\d.]+", mean).group(0)) * scale[re.search(r"[a-z]+$", mean).group(0)]
print(json.dumps({
    "label": label,
    "scenario": "h2load",
    "concurrency": int(conns) * int(streams),
    "ops": done,
    "errors": failed,
    "seconds": float(duration),
    "ops_per_sec": rate,
    "mean_us": mean_us,
    "server_cpu_us_per_op": (after - before) / done if done else None,
    "server_rss_kb": status_kb(pid, "VmRSS"),
    "server_peak_rss_kb": status_kb(pid, "VmHWM"),
}))
