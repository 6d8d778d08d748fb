//! `cairn-bench`: the load generator behind BENCHMARKS.md, which users can
//! run against their own server (and, for comparison, against etcd),
//! reporting throughput, latency percentiles and the server's memory.
//!
//! A workspace member of its own, not part of the product: the `cairn`
//! binary does not need it to build. `bench/run.sh` runs the whole
//! comparison and `bench/table.py` prints the table.
//!
//! Every scenario drives the same loop: `concurrency` tasks over a few
//! shared HTTP/2 connections, each sending one request, waiting for the
//! answer and recording its latency, for `duration` after a `warmup`. The
//! etcd scenarios speak etcd's v3 gRPC API through two hand-declared
//! messages, so comparing needs no etcd client dependency.

use std::time::{Duration, Instant};

use clap::ValueEnum;
use tonic::transport::Endpoint;

mod conn;
mod etcd;

use cairn_api as pb;
use cairn_api::plan_service_client::PlanServiceClient;
use cairn_api::session_service_client::SessionServiceClient;
use cairn_api::watch_service_client::WatchServiceClient;
use cairn_client::view::{micros, now_micros};
use cairn_core::duration::parse_duration;
use clap::Parser;
use conn::{Conn, connect};
use etcd::{EtcdPutRequest, EtcdRangeRequest, etcd_call};

/// What to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// `grpc.health.v1.Health/Check`: the transport ceiling of the server.
    Health,
    /// Durable `UpdatePlan`, one session per client.
    UpdatePlan,
    /// `GetPlan` of a stored plan.
    GetPlan,
    /// `SessionService.KeepAlive` of a random session among `sessions`,
    /// leased by `populate --leased`: a renewal, which writes nothing.
    KeepAlive,
    /// etcd `Put` of the same payload size.
    EtcdPut,
    /// etcd serializable `Range` of one key.
    EtcdRange,
    /// Watch fan-out: commit-to-delivery latency with `watchers` tree watchers.
    WatchFanout,
    /// Server memory per idle watch stream, with `watchers` streams open.
    WatchMemory,
    /// Writes a plan to each of `sessions` sessions once (filling a store
    /// for the growth rows) and reports the rate.
    Populate,
    /// Waits until the server answers a health check with SERVING (at
    /// most a minute) and reports how long that took: restart time.
    Ready,
}

/// What the watch fan-out watchers watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WatchTarget {
    /// One session tree each, spread over `trees` trees.
    Tree,
    /// Everything (`all`): every watcher gets every update.
    All,
}

/// Load-test a running server (or etcd) and print one JSON line of figures.
#[derive(Debug, Clone, Parser)]
#[command(name = "cairn-bench", version, about)]
pub struct BenchArgs {
    /// Scenario to run.
    #[arg(long, value_enum)]
    pub scenario: Scenario,
    /// Server address (Cairn, or etcd for the etcd scenarios).
    #[arg(
        long,
        env = "CAIRN_BENCH_ADDR",
        default_value = "http://127.0.0.1:50051"
    )]
    pub addr: String,
    /// Concurrent clients, each with one request in flight.
    #[arg(long, env = "CAIRN_BENCH_CONCURRENCY", default_value_t = 64)]
    pub concurrency: usize,
    /// HTTP/2 connections the clients share.
    #[arg(long, env = "CAIRN_BENCH_CONNECTIONS", default_value_t = 8)]
    pub connections: usize,
    /// Measured time (e.g. `10s`).
    #[arg(long, env = "CAIRN_BENCH_DURATION", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Unmeasured time before it.
    #[arg(long, env = "CAIRN_BENCH_WARMUP", default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Bytes of payload per write (plan step text, or etcd value).
    #[arg(long, env = "CAIRN_BENCH_PAYLOAD", default_value_t = 256)]
    pub payload: usize,
    /// Steps per plan written; the payload is shared among them.
    #[arg(long, env = "CAIRN_BENCH_STEPS", default_value_t = 5)]
    pub steps: usize,
    /// Plans and reads go to random sessions among this many
    /// (`bench-0` …), already written by `populate`; 0: one session per
    /// client.
    #[arg(long, env = "CAIRN_BENCH_SESSIONS", default_value_t = 0)]
    pub sessions: usize,
    /// Session ids are `PREFIX-N`: two load generators on one store (one
    /// per replica) keep to their own sessions with different prefixes.
    #[arg(long, env = "CAIRN_BENCH_SESSION_PREFIX", default_value = "bench")]
    pub session_prefix: String,
    /// Watch scenarios: watch streams to open.
    #[arg(long, env = "CAIRN_BENCH_WATCHERS", default_value_t = 1000)]
    pub watchers: usize,
    /// Watch fan-out: session trees the watchers are spread over (each
    /// update reaches the watchers of one tree).
    #[arg(long, env = "CAIRN_BENCH_TREES", default_value_t = 1000)]
    pub trees: usize,
    /// Watch fan-out: plan updates per second.
    #[arg(long, env = "CAIRN_BENCH_RATE", default_value_t = 1000)]
    pub rate: u64,
    /// Populate: also take each session's lease (a first keep-alive).
    #[arg(long)]
    pub leased: bool,
    /// KeepAlive: renew the sessions in turn, leaving out every N-th
    /// (`PREFIX-0`, `PREFIX-N`, …), which then stall and are lost: 100
    /// leaves 1% silent. 0: random sessions, none left out.
    #[arg(long, default_value_t = 0)]
    pub silent_every: usize,
    /// Watch fan-out: what each watcher watches.
    #[arg(long, value_enum, default_value_t = WatchTarget::Tree)]
    pub watch: WatchTarget,
    /// Writes the scenario's request, framed for gRPC (a 5-byte prefix,
    /// then the message), to this file and exits: the body for h2load.
    #[arg(long)]
    pub write_body: Option<std::path::PathBuf>,
    /// Server process id, to report its memory from /proc.
    #[arg(long, env = "CAIRN_BENCH_SERVER_PID")]
    pub server_pid: Option<u32>,
    /// A label for the result line.
    #[arg(long, default_value = "")]
    pub label: String,
    /// Bearer token to send (servers with `--auth token`): its principal
    /// needs the rights of the scenario (orchestrator for the writes and
    /// watches).
    #[arg(long, env = "CAIRN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// One scenario's figures, printed as one JSON line.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Report {
    pub label: String,
    pub scenario: String,
    pub concurrency: usize,
    pub payload: usize,
    pub ops: u64,
    pub errors: u64,
    pub seconds: f64,
    pub ops_per_sec: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub server_rss_kb: Option<u64>,
    pub server_peak_rss_kb: Option<u64>,
    /// Watch memory: server bytes per open idle stream.
    pub bytes_per_stream: Option<u64>,
    /// Server CPU time (user + system) per operation while measuring.
    pub server_cpu_us_per_op: Option<f64>,
}

/// CPU time a process has used so far, in microseconds, from /proc.
pub fn server_cpu_us(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // Linux reports in clock ticks of 1/100 s on every common configuration.
    Some((utime + stime) * 10_000)
}

/// Runs a scenario and prints its report as JSON.
pub async fn run(args: BenchArgs) -> Result<Report, BoxError> {
    let report = match args.scenario {
        Scenario::WatchFanout => watch_fanout(&args).await?,
        Scenario::WatchMemory => watch_memory(&args).await?,
        Scenario::Populate => populate(&args).await?,
        Scenario::Ready => ready(&args).await?,
        _ => request_loop(&args).await?,
    };
    Ok(report)
}

/// The etcd key a request of client `i` goes to: its own, or with
/// `--sessions N` one of N shared keys (`--sessions 1`: one hot key).
fn etcd_key(args: &BenchArgs, i: usize) -> Vec<u8> {
    let k = if args.sessions > 0 {
        fastrand::usize(..args.sessions)
    } else {
        i
    };
    format!("bench/{k}").into_bytes()
}

/// The session a request of client `i` goes to.
fn session_for(args: &BenchArgs, i: usize) -> String {
    if args.sessions > 0 {
        format!(
            "{}-{}",
            args.session_prefix,
            fastrand::usize(..args.sessions)
        )
    } else {
        format!("{}-{i}", args.session_prefix)
    }
}

/// The session keep-alive `round` of client `i` renews: random, or with
/// `silent_every`, every session in turn but the silent ones (each client
/// walks its own share, so every renewing session is renewed as often).
fn renewed_session(args: &BenchArgs, i: usize, round: u64) -> String {
    let n = args.silent_every;
    if n < 2 || args.sessions == 0 {
        return session_for(args, i);
    }
    // The k-th renewing session overall is k + k / (n - 1) + 1 among all.
    let renewing = args.sessions - args.sessions.div_ceil(n);
    let c = args.concurrency.max(1);
    let turn = usize::try_from(round).unwrap_or(0);
    let k = (i + turn.wrapping_mul(c)) % renewing.max(1);
    format!("{}-{}", args.session_prefix, k + k / (n - 1) + 1)
}

/// The gRPC-framed body of one request of the scenario (session
/// `bench-0`), for load generators that replay a fixed body.
pub fn framed_body(args: &BenchArgs) -> Result<Vec<u8>, BoxError> {
    use prost::Message as _;
    let message = match args.scenario {
        Scenario::Health => tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        }
        .encode_to_vec(),
        Scenario::UpdatePlan => pb::UpdatePlanRequest {
            session_id: "bench-0".into(),
            explanation: "bench".into(),
            plan: plan_items(args, 1),
            expected_revision: None,
            ..pb::UpdatePlanRequest::default()
        }
        .encode_to_vec(),
        Scenario::GetPlan => pb::GetPlanRequest {
            session_id: "bench-0".into(),
        }
        .encode_to_vec(),
        Scenario::EtcdPut => EtcdPutRequest {
            key: b"bench/0".to_vec(),
            value: vec![b'x'; args.payload],
        }
        .encode_to_vec(),
        other => return Err(format!("no fixed body for {other:?}").into()),
    };
    let len = u32::try_from(message.len()).map_err(|_| "request too large")?;
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&message);
    Ok(out)
}

/// Polls the health check until it says SERVING.
async fn ready(args: &BenchArgs) -> Result<Report, BoxError> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(60);
    loop {
        let serving = async {
            let channel = Endpoint::from_shared(args.addr.clone())?
                .connect_timeout(Duration::from_millis(200))
                .connect()
                .await?;
            let status = tonic_health::pb::health_client::HealthClient::new(channel)
                .check(tonic_health::pb::HealthCheckRequest {
                    service: String::new(),
                })
                .await?
                .into_inner()
                .status;
            Ok::<_, BoxError>(
                status
                    == i32::from(tonic_health::pb::health_check_response::ServingStatus::Serving),
            )
        };
        if matches!(serving.await, Ok(true)) {
            let mut report = summarise(args, Vec::new(), 0, start.elapsed().as_secs_f64());
            report.scenario = "Ready".into();
            return Ok(report);
        }
        if Instant::now() > deadline {
            return Err("the server was not ready within a minute".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Writes one plan to each of `sessions` sessions, `concurrency` at a time.
async fn populate(args: &BenchArgs) -> Result<Report, BoxError> {
    let channels = connect(
        &args.addr,
        args.token.as_deref(),
        args.connections.min(args.concurrency),
    )
    .await?;
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(args.concurrency);
    for i in 0..args.concurrency.max(1) {
        let client_channel = channels[i % channels.len()].clone();
        let mut client = PlanServiceClient::new(client_channel.clone());
        let next = std::sync::Arc::clone(&next);
        let args = args.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= args.sessions {
                    return Ok::<_, tonic::Status>(latencies);
                }
                let sent = Instant::now();
                client
                    .update_plan(pb::UpdatePlanRequest {
                        session_id: format!("{}-{n}", args.session_prefix),
                        explanation: "bench".into(),
                        plan: plan_items(&args, 0),
                        expected_revision: None,
                        ..pb::UpdatePlanRequest::default()
                    })
                    .await?;
                if args.leased {
                    SessionServiceClient::new(client_channel.clone())
                        .keep_alive(pb::KeepAliveRequest {
                            session_id: format!("{}-{n}", args.session_prefix),
                            ..pb::KeepAliveRequest::default()
                        })
                        .await?;
                }
                latencies.push(u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX));
            }
        }));
    }
    let mut all = Vec::with_capacity(args.sessions);
    for t in tasks {
        all.extend(t.await??);
    }
    Ok(summarise(args, all, 0, start.elapsed().as_secs_f64()))
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn plan_items(args: &BenchArgs, round: u64) -> Vec<pb::PlanItem> {
    // `steps` steps sharing the payload; the round number keeps every
    // write a real change.
    let steps = args.steps.max(1);
    let each = (args.payload / steps).max(8);
    (0..steps)
        .map(|i| {
            let mut step = format!("step {i} round {round} ");
            step.extend(std::iter::repeat_n('x', each.saturating_sub(step.len())));
            pb::PlanItem {
                id: 0,
                step,
                status: if i == 0 {
                    pb::StepStatus::InProgress.into()
                } else {
                    pb::StepStatus::Pending.into()
                },
                blocked_by: Vec::new(),
            }
        })
        .collect()
}

/// Sends one request of the scenario for client `i`.
async fn one(args: &BenchArgs, channel: Conn, i: usize, round: u64) -> Result<(), tonic::Status> {
    match args.scenario {
        Scenario::Health => {
            let mut c = tonic_health::pb::health_client::HealthClient::new(channel);
            c.check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .map(|_| ())
        }
        Scenario::UpdatePlan => PlanServiceClient::new(channel)
            .update_plan(pb::UpdatePlanRequest {
                session_id: session_for(args, i),
                explanation: "bench".into(),
                plan: plan_items(args, round),
                expected_revision: None,
                ..pb::UpdatePlanRequest::default()
            })
            .await
            .map(|_| ()),
        Scenario::GetPlan => PlanServiceClient::new(channel)
            .get_plan(pb::GetPlanRequest {
                session_id: session_for(args, i),
            })
            .await
            .map(|_| ()),
        Scenario::KeepAlive => SessionServiceClient::new(channel)
            .keep_alive(pb::KeepAliveRequest {
                session_id: renewed_session(args, i, round),
                ..pb::KeepAliveRequest::default()
            })
            .await
            .map(|_| ()),
        Scenario::EtcdPut => {
            let req = EtcdPutRequest {
                key: etcd_key(args, i),
                value: vec![b'x'; args.payload],
            };
            etcd_call(channel, "/etcdserverpb.KV/Put", req).await
        }
        Scenario::EtcdRange => {
            let req = EtcdRangeRequest {
                key: etcd_key(args, i),
                serializable: true,
            };
            etcd_call(channel, "/etcdserverpb.KV/Range", req).await
        }
        Scenario::WatchFanout | Scenario::WatchMemory | Scenario::Populate | Scenario::Ready => {
            Ok(())
        }
    }
}

async fn request_loop(args: &BenchArgs) -> Result<Report, BoxError> {
    let channels = connect(
        &args.addr,
        args.token.as_deref(),
        args.connections.min(args.concurrency),
    )
    .await?;
    // Reads need something to read: one write per client first (unless a
    // populated store is read).
    let seed = match args.scenario {
        Scenario::GetPlan if args.sessions == 0 => Some(Scenario::UpdatePlan),
        Scenario::EtcdRange => Some(Scenario::EtcdPut),
        _ => None,
    };
    if let Some(seed) = seed {
        let writer = BenchArgs {
            scenario: seed,
            ..args.clone()
        };
        for i in 0..args.concurrency {
            one(&writer, channels[i % channels.len()].clone(), i, 0).await?;
        }
    }
    let start = Instant::now();
    let measure_from = start + args.warmup;
    let end = measure_from + args.duration;
    let cpu_probe = args.server_pid.map(|pid| {
        tokio::spawn(async move {
            tokio::time::sleep_until(measure_from.into()).await;
            let before = server_cpu_us(pid);
            tokio::time::sleep_until(end.into()).await;
            before
                .zip(server_cpu_us(pid))
                .map(|(b, a)| a.saturating_sub(b))
        })
    });
    let mut tasks = Vec::with_capacity(args.concurrency);
    for i in 0..args.concurrency {
        let channel = channels[i % channels.len()].clone();
        let args = args.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies: Vec<u32> = Vec::with_capacity(1 << 16);
            let mut errors = 0u64;
            let mut round = 1u64;
            loop {
                let sent = Instant::now();
                if sent >= end {
                    break;
                }
                let result = one(&args, channel.clone(), i, round).await;
                round += 1;
                if sent >= measure_from {
                    match result {
                        Ok(()) => latencies
                            .push(u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX)),
                        Err(_) => errors += 1,
                    }
                }
            }
            (latencies, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await?;
        all.extend(l);
        errors += e;
    }
    let seconds = args.duration.as_secs_f64();
    let mut report = summarise(args, all, errors, seconds);
    if let Some(probe) = cpu_probe
        && let Some(cpu) = probe.await?
        && report.ops > 0
    {
        #[allow(clippy::cast_precision_loss)]
        let per_op = cpu as f64 / report.ops as f64;
        report.server_cpu_us_per_op = Some(per_op);
    }
    Ok(report)
}

fn summarise(args: &BenchArgs, mut latencies: Vec<u32>, errors: u64, seconds: f64) -> Report {
    latencies.sort_unstable();
    let pct = |p: f64| -> u64 {
        if latencies.is_empty() {
            return 0;
        }
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let idx = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        u64::from(latencies[idx])
    };
    let (rss, peak) = args.server_pid.map_or((None, None), server_memory);
    let ops = latencies.len() as u64;
    #[allow(clippy::cast_precision_loss)]
    let ops_per_sec = ops as f64 / seconds;
    Report {
        label: args.label.clone(),
        scenario: format!("{:?}", args.scenario),
        concurrency: args.concurrency,
        payload: args.payload,
        ops,
        errors,
        seconds,
        ops_per_sec,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        p999_us: pct(0.999),
        server_rss_kb: rss,
        server_peak_rss_kb: peak,
        bytes_per_stream: None,
        server_cpu_us_per_op: None,
    }
}

/// Current and peak resident memory of a process, in KiB, from /proc.
pub fn server_memory(pid: u32) -> (Option<u64>, Option<u64>) {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return (None, None);
    };
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    (field("VmRSS:"), field("VmHWM:"))
}

async fn setup_trees(args: &BenchArgs, channel: Conn) -> Result<Vec<String>, tonic::Status> {
    let mut sessions = pb::session_service_client::SessionServiceClient::new(channel);
    let mut subs = Vec::with_capacity(args.trees);
    for t in 0..args.trees.max(1) {
        let root = format!("fan-{t}");
        let sub = format!("fan-{t}:sub");
        for (id, parent) in [(&root, String::new()), (&sub, root.clone())] {
            let r = sessions
                .create_session(pb::CreateSessionRequest {
                    session: Some(pb::Session {
                        session_id: id.clone(),
                        parent_session_id: parent,
                        ..pb::Session::default()
                    }),
                })
                .await;
            match r {
                Ok(_) => {}
                Err(e) if e.code() == tonic::Code::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        subs.push(sub);
    }
    Ok(subs)
}

/// Opens a watch and waits for `synced`, so the stream is established.
async fn open_watch(
    channel: Conn,
    target: pb::watch_request::Target,
) -> Result<tonic::Streaming<pb::WatchResponse>, tonic::Status> {
    let mut stream = WatchServiceClient::new(channel)
        .watch(pb::WatchRequest {
            target: Some(target),
            start_revision: None,
            send_initial_state: true,
            progress_interval: Some(prost_types::Duration {
                seconds: 3600,
                nanos: 0,
            }),
        })
        .await?
        .into_inner();
    while let Some(msg) = stream.message().await? {
        if matches!(msg.kind, Some(pb::watch_response::Kind::Synced(_))) {
            return Ok(stream);
        }
    }
    Err(tonic::Status::unavailable("watch ended before synced"))
}

async fn watch_fanout(args: &BenchArgs) -> Result<Report, BoxError> {
    let connections = connect(
        &args.addr,
        args.token.as_deref(),
        (args.watchers / 100).max(1),
    )
    .await?;
    let subs = setup_trees(args, connections[0].clone()).await?;
    let start = Instant::now();
    let measure_from = start + args.warmup;
    let end = measure_from + args.duration;
    let mut watchers = Vec::with_capacity(args.watchers);
    for w in 0..args.watchers {
        let target = match args.watch {
            WatchTarget::Tree => {
                pb::watch_request::Target::SessionTree(format!("fan-{}", w % subs.len()))
            }
            WatchTarget::All => pb::watch_request::Target::All(true),
        };
        let mut stream = open_watch(connections[w % connections.len()].clone(), target).await?;
        watchers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            // Delivery latency: receive time minus the commit batch's time
            // recorded in the plan (same clock: same machine).
            while let Ok(Ok(Some(msg))) =
                tokio::time::timeout_at(end.into(), stream.message()).await
            {
                if let Some(pb::watch_response::Kind::Event(e)) = msg.kind
                    && let Some(pb::event::Object::Plan(p)) = e.object
                    && let Some(t) = p.update_time
                    && Instant::now() >= measure_from
                {
                    let lat = (now_micros() - micros(Some(&t))).max(0);
                    latencies.push(u32::try_from(lat).unwrap_or(u32::MAX));
                }
            }
            latencies
        }));
    }
    // A steady stream of updates at `rate` per second, spread over the trees.
    let writer_channel = connections[0].clone();
    let rate = args.rate.max(1);
    let subs_for_writer = subs.clone();
    let plan_args = args.clone();
    let writer = tokio::spawn(async move {
        let period =
            Duration::from_secs_f64(1.0 / f64::from(u32::try_from(rate).unwrap_or(u32::MAX)));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut n = 0u64;
        let mut inflight = tokio::task::JoinSet::new();
        while Instant::now() < end {
            tick.tick().await;
            let mut client = PlanServiceClient::new(writer_channel.clone());
            let sub =
                subs_for_writer[usize::try_from(n).unwrap_or(0) % subs_for_writer.len()].clone();
            n += 1;
            let items = plan_items(&plan_args, n);
            inflight.spawn(async move {
                let _ = client
                    .update_plan(pb::UpdatePlanRequest {
                        session_id: sub,
                        explanation: String::new(),
                        plan: items,
                        expected_revision: None,
                        ..pb::UpdatePlanRequest::default()
                    })
                    .await;
            });
            while inflight.try_join_next().is_some() {}
        }
        while inflight.join_next().await.is_some() {}
        n
    });
    let written = writer.await?;
    let mut all = Vec::new();
    for w in watchers {
        all.extend(w.await?);
    }
    let mut report = summarise(args, all, 0, args.duration.as_secs_f64());
    report.concurrency = args.watchers;
    report.label = format!(
        "{} ({} updates sent, {} trees)",
        args.label,
        written,
        subs.len()
    )
    .trim()
    .to_string();
    Ok(report)
}

async fn watch_memory(args: &BenchArgs) -> Result<Report, BoxError> {
    let pid = args.server_pid.ok_or("watch-memory needs --server-pid")?;
    let connections = connect(
        &args.addr,
        args.token.as_deref(),
        (args.watchers / 100).max(1),
    )
    .await?;
    let subs = setup_trees(
        &BenchArgs {
            trees: args.trees.min(args.watchers).max(1),
            ..args.clone()
        },
        connections[0].clone(),
    )
    .await?;
    // Let allocator pools settle, then measure before and after.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = server_memory(pid).0.ok_or("cannot read server memory")?;
    let mut streams = Vec::with_capacity(args.watchers);
    for w in 0..args.watchers {
        let root = format!("fan-{}", w % subs.len());
        let target = pb::watch_request::Target::SessionTree(root);
        streams.push(open_watch(connections[w % connections.len()].clone(), target).await?);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (after, peak) = server_memory(pid);
    let after = after.ok_or("cannot read server memory")?;
    let per_stream =
        after.saturating_sub(before) * 1024 / u64::try_from(args.watchers.max(1)).unwrap_or(1);
    drop(streams);
    Ok(Report {
        label: args.label.clone(),
        scenario: "WatchMemory".into(),
        concurrency: args.watchers,
        server_rss_kb: Some(after),
        server_peak_rss_kb: peak,
        bytes_per_stream: Some(per_stream),
        ..Report::default()
    })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = BenchArgs::parse();
    if let Some(path) = &args.write_body {
        return match framed_body(&args).and_then(|b| Ok(std::fs::write(path, b)?)) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cannot write the body: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    match run(args).await {
        Ok(report) => match serde_json::to_string(&report) {
            Ok(line) => {
                #[allow(clippy::print_stdout)] // the report is the command's output
                {
                    println!("{line}");
                }
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("cannot encode the report: {e}");
                std::process::ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("benchmark failed: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewals_in_turn_cover_every_session_but_the_silent_ones() {
        let mut args = BenchArgs::parse_from(["cairn-bench", "--scenario", "keep-alive"]);
        args.sessions = 1_000;
        args.silent_every = 100;
        args.concurrency = 7;
        let mut seen = std::collections::BTreeSet::new();
        for round in 0..200 {
            for i in 0..7 {
                seen.insert(renewed_session(&args, i, round));
            }
        }
        let want: std::collections::BTreeSet<_> = (0..1_000)
            .filter(|k| k % 100 != 0)
            .map(|k| format!("bench-{k}"))
            .collect();
        assert_eq!(seen, want);
    }
}
