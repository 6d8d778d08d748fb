"""Merges the result lines of load generators run side by side (one per
replica) into one row: rates and operations add up, latencies are the
worst of the parts."""

import json
import sys

parts = [json.loads(open(path).read()) for path in sys.argv[1:]]
row = dict(parts[0])
for key in ("concurrency", "ops", "errors", "ops_per_sec"):
    row[key] = sum(p[key] for p in parts)
for key in ("p50_us", "p99_us", "p999_us"):
    row[key] = max(p[key] for p in parts)
# Per-server figures do not add up across processes: left out.
for key in ("server_cpu_us_per_op", "server_rss_kb", "server_peak_rss_kb"):
    row[key] = None
print(json.dumps(row))
