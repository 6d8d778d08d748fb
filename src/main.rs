//! The `cairn` binary: parse the command line, set up tracing, run the
//! server (`cairn-server`) or a client (`cairn-client`).
//!
//! It is the only place that knows the command line: [`config`] maps flags
//! onto each crate's own configuration types.

mod config;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use config::{Cli, Command, LogFormat};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format, &cli.log);
    match cli.command {
        Command::Serve(args) => {
            let listener = match tokio::net::TcpListener::bind(args.listen).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(addr = %args.listen, error = %e, "cannot listen");
                    return ExitCode::FAILURE;
                }
            };
            match cairn_server::serve(listener, args.server_config(), shutdown_signal()).await {
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
        Command::Principal { cmd, client } => {
            finish(cairn_client::cli::principal(&client, cmd).await)
        }
        Command::Watch { args, client } => finish(cairn_client::cli::watch(&client, args).await),
        Command::Wait { args, client } => finish(cairn_client::cli::wait(&client, args).await),
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

fn init_tracing(format: LogFormat, filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour only for a person at a terminal, never in files or collectors.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down: finishing in-flight requests");
}
