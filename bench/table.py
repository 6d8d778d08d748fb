"""Formats bench/run.sh results (JSON lines) as Markdown tables, with the
ratios the targets are stated in."""

import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]


def find(prefix):
    for r in rows:
        if r["label"].startswith(prefix):
            return r
    return None


def ms(us):
    return f"{us / 1000:.2f}" if us else ""


def num(x, fmt="{:,.0f}"):
    return fmt.format(x) if x is not None else ""


print("| scenario | clients | ops/s | p50 ms | p99 ms | p99.9 ms | server CPU µs/op | server RSS MiB |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    kind = r["scenario"]
    if kind in ("FileSize", "Restart", "Examined"):
        continue
    rss = r.get("server_rss_kb")
    rss = f"{rss / 1024:.0f}" if rss else ""
    if kind == "WatchMemory":
        print(
            f"| {r['label']} | {r['concurrency']} | | | | | | {rss} "
            f"(**{r['bytes_per_stream'] / 1024:.1f} KiB per stream**) |"
        )
        continue
    cpu = num(r.get("server_cpu_us_per_op"), "{:.1f}")
    if kind == "h2load":
        print(
            f"| {r['label']} | {r['concurrency']} | {r['ops_per_sec']:,.0f} | mean {ms(r['mean_us'])} | | | {cpu} | {rss} |"
        )
        continue
    print(
        f"| {r['label']} | {r['concurrency']} | {r['ops_per_sec']:,.0f} | {ms(r['p50_us'])} | "
        f"{ms(r['p99_us'])} | {ms(r['p999_us'])} | {cpu} | {rss} |"
    )

sizes = [r for r in rows if r["scenario"] == "FileSize"]
restarts = {r["sessions"]: r for r in rows if r["scenario"] == "Restart"}
if sizes:
    print()
    print("| store | file on disk | bytes per session | restart to serving | RSS after restart MiB |")
    print("|---|---:|---:|---:|---:|")
    for s in sizes:
        r = restarts.get(s["sessions"], {})
        print(
            f"| {s['sessions']:,} sessions | {s['bytes'] / 2**20:,.0f} MiB | {s['bytes'] / s['sessions']:,.0f} | "
            f"{r.get('seconds', 0):.2f} s | {r.get('server_rss_kb', 0) / 1024:.0f} |"
        )

examined = [r for r in rows if r["scenario"] == "Examined"]
if examined:
    print()
    print("| KeepAlive row | leased sessions | lease deadlines looked at | went STALLED | went LOST |")
    print("|---|---:|---:|---:|---:|")
    for r in examined:
        print(
            f"| {r['label']} | {r['sessions']:,} | {r['examined']:,} | "
            f"{r.get('stalled', 0):,} | {r.get('lost', 0):,} |"
        )

print()
print("| target | measured | met |")
print("|---|---:|:---:|")


def ratio(name, a, b, goal):
    a, b = find(a), find(b)
    if not (a and b and b["ops_per_sec"]):
        return
    x = a["ops_per_sec"] / b["ops_per_sec"]
    if goal is None:
        print(f"| {name} (no target) | {x:.2f} | |")
    else:
        print(f"| {name} ≥ {goal} | {x:.2f} | {'yes' if x >= goal else 'no'} |")


ratio("UpdatePlan / health check (cairn-bench)", "UpdatePlan, group", "health check", 0.5)
ratio("UpdatePlan / health check (h2load)", "h2load: UpdatePlan", "h2load: health", 0.5)
ratio("UpdatePlan / etcd Put (cairn-bench)", "UpdatePlan, group", "etcd Put", 2)
ratio("UpdatePlan / etcd Put (h2load)", "h2load: UpdatePlan", "h2load: etcd Put", 2)
ratio("GetPlan / health check (cairn-bench)", "GetPlan", "health check", 0.8)
ratio("GetPlan / health check (h2load)", "h2load: GetPlan", "h2load: health", 0.8)
ratio("UpdatePlan / --commit-batch 1", "UpdatePlan, group", "UpdatePlan, --commit-batch 1", None)
ratio("GetPlan / etcd Range", "GetPlan", "etcd Range", None)
ratio("etcd backend UpdatePlan, 1 replica / redb", "etcd backend, 1 replica: UpdatePlan", "UpdatePlan, group", None)
ratio("etcd backend UpdatePlan, 1 replica / raw etcd Put", "etcd backend, 1 replica: UpdatePlan", "etcd Put", None)
ratio("etcd backend UpdatePlan, 2 replicas / 1", "etcd backend, 2 replicas: UpdatePlan", "etcd backend, 1 replica: UpdatePlan", None)
ratio("etcd backend GetPlan, 1 replica / redb", "etcd backend, 1 replica: GetPlan", "GetPlan", None)
ratio("etcd backend GetPlan, 2 replicas / 1", "etcd backend, 2 replicas: GetPlan", "etcd backend, 1 replica: GetPlan", None)
upd = find("UpdatePlan, group")
if upd:
    print(f"| UpdatePlan p99 < 10 ms | {ms(upd['p99_us'])} ms | {'yes' if upd['p99_us'] < 10000 else 'no'} |")
big = max((s["sessions"] for s in sizes), default=None)
if big:
    ratio(f"UpdatePlan, random of {big:,} / of 1,000", f"UpdatePlan, random of {big} sessions", "UpdatePlan, random of 1000 ", 0.8)
    ratio(f"GetPlan, random of {big:,} / of 1,000", f"GetPlan, random of {big} sessions", "GetPlan, random of 1000 ", 0.8)
    ratio(
        f"UpdatePlan, random of {big:,}, caches sized / of 1,000",
        f"UpdatePlan, random of {big} sessions, caches",
        "UpdatePlan, random of 1000 ",
        0.8,
    )
    ratio(
        f"GetPlan, random of {big:,}, caches sized / of 1,000",
        f"GetPlan, random of {big} sessions, caches",
        "GetPlan, random of 1000 ",
        0.8,
    )
    r = restarts.get(big)
    if r:
        print(f"| restart with {big:,} sessions < 5 s | {r['seconds']:.2f} s | {'yes' if r['seconds'] < 5 else 'no'} |")
for steps in (50, 200):
    a, b = find(f"UpdatePlan, {steps} steps"), find("UpdatePlan, 5 steps")
    if a and b and a.get("server_cpu_us_per_op") and b.get("server_cpu_us_per_op"):
        cost = a["server_cpu_us_per_op"] / b["server_cpu_us_per_op"]
        grow = steps / 5
        print(
            f"| UpdatePlan CPU, {steps} vs 5 steps, grows no faster than bytes ({grow:.0f}×) | "
            f"{cost:.1f}× | {'yes' if cost <= grow else 'no'} |"
        )
for fan in [r for r in rows if r["label"].startswith("watch fan-out")]:
    print(f"| {fan['label']}: p99 commit-to-delivery < 20 ms | {ms(fan['p99_us'])} ms | {'yes' if fan['p99_us'] < 20000 else 'no'} |")
mem = find("idle watch streams")
if mem:
    kib = mem["bytes_per_stream"] / 1024
    print(f"| memory per idle watch stream ≤ 20 KB | {kib:.1f} KiB | {'yes' if mem['bytes_per_stream'] <= 20000 else 'no'} |")
