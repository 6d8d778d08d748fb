//! The `cairn` binary: parse the command line, set up tracing, run the
//! server (`cairn-server`) or a client (`cairn-client`).
//!
//! It is the only place that knows the command line: [`config`] maps flags
//! onto each crate's own configuration types.

mod config;
mod engine;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use config::{Cli, Command, LogFormat};
use tracing_subscriber::EnvFilter;

// mimalloc rather than glibc's malloc: with millions of sessions cached the
// server holds millions of small live allocations, where glibc spent a sixth
// of the writer's time unlinking free chunks. Measured in BENCHMARKS.md
// (about +20% on random reads and writes over 1M sessions, a quarter less
// RSS, even at 1,000 sessions).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let exporter = init_tracing(cli.log_format, &cli.log, cli.otlp_endpoint.as_deref());
    let traced = exporter.is_some();
    let code = run(cli, traced).await;
    if let Some(provider) = exporter {
        // Spans still batched go out before the process ends.
        let _ = provider.shutdown();
    }
    code
}

async fn run(cli: Cli, traced: bool) -> ExitCode {
    match cli.command {
        Command::Serve(args) => {
            if let Err(e) = args.check_leases() {
                tracing::error!(error = %e, "bad configuration");
                return ExitCode::FAILURE;
            }
            let listener = match tokio::net::TcpListener::bind(args.listen).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(addr = %args.listen, error = %e, "cannot listen");
                    return ExitCode::FAILURE;
                }
            };
            let mut config = args.server_config();
            config.web_extra = mcp_over_http(&args, &listener);
            config.trace_context = traced;
            let store = args.engine().open();
            match cairn_server::serve(listener, config, store, shutdown_signal()).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "server failed");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Session { cmd, client } => finish(cairn_client::cli::session(&client, cmd).await),
        Command::Plan { cmd, client } => finish(cairn_client::cli::plan(&client, cmd).await),
        Command::Todo { cmd, client } => finish(cairn_client::cli::todo(&client, cmd).await),
        Command::Admin { cmd, client } => finish(cairn_client::cli::admin(&client, cmd).await),
        Command::Principal { cmd, client } => {
            finish(cairn_client::cli::principal(&client, cmd).await)
        }
        Command::Watch { args, client } => finish(cairn_client::cli::watch(&client, args).await),
        Command::Wait { args, client } => finish(cairn_client::cli::wait(&client, args).await),
        Command::Inbox { args, client } => finish(cairn_client::cli::inbox(&client, args).await),
        Command::Hook { cmd } => match cairn_client::hook::run(cmd).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cairn hook: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Mcp(args) => match cairn_client::mcp::run(args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "mcp server failed");
                ExitCode::FAILURE
            }
        },
    }
}

/// A client command's exit: errors go to stderr as the server said them.
fn finish(result: Result<(), Box<dyn std::error::Error + Send + Sync>>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let text = match e.downcast_ref::<tonic::Status>() {
                Some(status) => format!("{:?}: {}", status.code(), status.message()),
                None => e.to_string(),
            };
            #[allow(clippy::print_stderr)] // the command's own error output
            {
                eprintln!("error: {text}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, and, with an OTLP endpoint, spans to the collector.
/// Returns the trace pipeline to flush at exit.
fn init_tracing(
    format: LogFormat,
    filter: &str,
    otlp: Option<&str>,
) -> Option<opentelemetry_sdk::trace::SdkTracerProvider> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour only for a person at a terminal, never in files or collectors.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    let (otel, provider) = match otlp.map(trace_pipeline) {
        Some(Ok(provider)) => {
            use opentelemetry::trace::TracerProvider as _;
            let tracer = provider.tracer("cairn");
            (
                Some(tracing_opentelemetry::layer().with_tracer(tracer)),
                Some(provider),
            )
        }
        Some(Err(e)) => {
            eprintln!("OTLP exporter not started: {e}");
            (None, None)
        }
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .init();
    if provider.is_some() {
        // An incoming `traceparent` continues the caller's trace.
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
    }
    provider
}

/// Spans in batches over OTLP/gRPC to `endpoint`.
fn trace_pipeline(
    endpoint: &str,
) -> Result<opentelemetry_sdk::trace::SdkTracerProvider, Box<dyn std::error::Error>> {
    use opentelemetry_otlp::WithExportConfig as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("cairn")
        .build();
    Ok(opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// Completes on SIGINT or SIGTERM.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    // Registered now, before serving starts, so that a SIGTERM that comes
    // early still drains instead of killing the process.
    let listen = |kind: SignalKind, name: &'static str| match signal(kind) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for {name}");
            None
        }
    };
    let mut int = listen(SignalKind::interrupt(), "SIGINT");
    let mut term = listen(SignalKind::terminate(), "SIGTERM");
    async move {
        tokio::select! {
            () = received(int.as_mut()) => {},
            () = received(term.as_mut()) => {},
        }
        tracing::info!("shutting down: finishing in-flight requests");
    }
}

/// Completes when the signal comes; never, for one not listened to.
async fn received(signal: Option<&mut tokio::signal::unix::Signal>) {
    match signal {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// `/mcp` on the web listener: the MCP tools for remote agents, calling
/// this server's own gRPC listener on loopback with each agent's token.
fn mcp_over_http(
    args: &config::ServeArgs,
    listener: &tokio::net::TcpListener,
) -> Option<cairn_server::WebRoutes> {
    let web = args.web_listen?;
    if args.tls_cert.is_some() {
        // The tools would call the gRPC port over TLS on loopback, where the
        // server's certificate does not name 127.0.0.1 in general.
        tracing::warn!(
            "MCP over HTTP (/mcp) is not served with --tls-cert: run `cairn mcp` (stdio) next to the agent instead"
        );
        return None;
    }
    let port = listener.local_addr().ok()?.port();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .ok()?
        .connect_lazy();
    let authority = |origin: &str| {
        origin
            .split_once("://")
            .map_or(origin, |(_, rest)| rest)
            .trim_end_matches('/')
            .to_owned()
    };
    let mut allowed_hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    let mut allowed_origins = vec![format!("http://{web}")];
    if web.ip().is_loopback() || web.ip().is_unspecified() {
        // A page of this listener under any loopback name (the MCP
        // conformance suite and browsers say `localhost`). With an
        // ephemeral port (0) the bound port is not known here: any
        // loopback port then, still never a foreign name.
        let port = if web.port() == 0 {
            "*".to_owned()
        } else {
            web.port().to_string()
        };
        for name in ["localhost", "127.0.0.1", "[::1]"] {
            allowed_origins.push(format!("http://{name}:{port}"));
        }
    }
    if !web.ip().is_unspecified() {
        allowed_hosts.push(web.ip().to_string());
        allowed_hosts.push(web.to_string());
    }
    for origin in &args.web_origin {
        let host = authority(origin);
        allowed_hosts.push(host.split(':').next().unwrap_or_default().to_owned());
        allowed_hosts.push(host);
        allowed_origins.push(origin.trim_end_matches('/').to_owned());
    }
    Some(cairn_server::WebRoutes(cairn_client::mcp::http::router(
        cairn_client::mcp::http::McpHttp {
            channel,
            auth: args.auth == config::AuthArg::Token,
            call_timeout: std::time::Duration::from_secs(30),
            allowed_hosts,
            allowed_origins,
        },
    )))
}
