"""Formats bench/run.sh results (JSON lines) as one Markdown table with the
ratios the targets are stated in."""

import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
by = {r["label"].split(" (")[0]: r for r in rows}


def find(prefix):
    for label, r in by.items():
        if label.startswith(prefix):
            return r
    return None


print("| scenario | clients | ops/s | p50 ms | p99 ms | p99.9 ms | server CPU µs/op | server peak RSS MiB |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    if r["scenario"] == "WatchMemory":
        print(
            f"| {r['label']} | {r['concurrency']} | | | | | | {r['server_rss_kb'] / 1024:.0f} "
            f"(**{r['bytes_per_stream'] / 1024:.1f} KiB per stream**) |"
        )
        continue
    peak = r.get("server_peak_rss_kb")
    peak = f"{peak / 1024:.0f}" if peak else ""
    cpu = r.get("server_cpu_us_per_op")
    cpu = f"{cpu:.1f}" if cpu else ""
    print(
        f"| {r['label']} | {r['concurrency']} | {r['ops_per_sec']:,.0f} | {r['p50_us'] / 1000:.2f} | "
        f"{r['p99_us'] / 1000:.2f} | {r['p999_us'] / 1000:.2f} | {cpu} | {peak} |"
    )

health, upd, get = find("health"), find("UpdatePlan, group"), find("GetPlan")
single, put = find("UpdatePlan, --commit-batch 1"), find("etcd Put")
rng = find("etcd Range")
print()
print("| target | measured | met |")
print("|---|---:|:---:|")


def ratio(name, a, b, goal, fmt="{:.2f}"):
    if a and b and b["ops_per_sec"]:
        x = a["ops_per_sec"] / b["ops_per_sec"]
        if goal is None:
            print(f"| {name} (no target) | {fmt.format(x)} | |")
        else:
            print(f"| {name} ≥ {goal} | {fmt.format(x)} | {'yes' if x >= goal else 'no'} |")


ratio("UpdatePlan / health check", upd, health, 0.5)
ratio("UpdatePlan / --commit-batch 1", upd, single, 10)
ratio("UpdatePlan / etcd Put", upd, put, 2)
ratio("GetPlan / health check", get, health, 0.8)
ratio("GetPlan / etcd Range", get, rng, None)
if upd:
    print(f"| UpdatePlan p99 < 10 ms | {upd['p99_us'] / 1000:.2f} ms | {'yes' if upd['p99_us'] < 10000 else 'no'} |")
fan = find("watch fan-out")
if fan:
    print(f"| watch p99 commit-to-delivery < 20 ms | {fan['p99_us'] / 1000:.2f} ms | {'yes' if fan['p99_us'] < 20000 else 'no'} |")
mem = find("idle watch streams")
if mem:
    kib = mem["bytes_per_stream"] / 1024
    print(f"| memory per idle watch stream ≤ 20 KB | {kib:.1f} KiB | {'yes' if mem['bytes_per_stream'] <= 20000 else 'no'} |")
