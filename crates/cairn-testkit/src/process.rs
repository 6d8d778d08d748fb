//! The real `cairn serve` binary as a child process: for what only a
//! process shows (its memory, its exit, its log, signals, file damage).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::transport::Channel;

/// A running (or exited) `cairn serve`.
pub struct Proc {
    pub child: Child,
    /// The gRPC address it announced.
    pub addr: String,
    /// The dashboard address, when it serves one.
    pub web: Option<String>,
    /// The metrics address, when it serves one.
    pub metrics: Option<String>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    /// Starts `BIN serve --listen 127.0.0.1:0 --data-dir DIR ARGS…` and
    /// waits until it listens; panics with its log if it exits instead.
    pub fn start(bin: &str, data_dir: &std::path::Path, args: &[&str]) -> Proc {
        match Self::try_start(bin, data_dir, args) {
            Ok(p) => p,
            Err((status, log)) => panic!("cairn serve exited with {status}:\n{log}"),
        }
    }

    /// Like [`Proc::start`], but an early exit is returned with the log.
    pub fn try_start(
        bin: &str,
        data_dir: &std::path::Path,
        args: &[&str],
    ) -> Result<Proc, (ExitStatus, String)> {
        Self::spawn(
            Command::new(bin)
                .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
                .arg(data_dir)
                .args(args),
        )
    }

    /// Spawns a prepared `cairn serve` command.
    pub fn spawn(cmd: &mut Command) -> Result<Proc, (ExitStatus, String)> {
        let mut child = cmd
            .env(
                "CAIRN_LOG",
                std::env::var("CAIRN_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env_remove("RUST_BACKTRACE")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cairn serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let log = Arc::clone(&log);
            // Keep draining the pipe so the server never blocks on stderr.
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    for key in ["listen=", "web_listen=", "metrics_listen="] {
                        if let Some(rest) = line.split(&format!(" {key}")).nth(1) {
                            let addr = rest.split_whitespace().next().unwrap_or_default();
                            let _ = tx.send((key, addr.to_owned()));
                        }
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut addr = None;
        let mut web = None;
        let mut metrics = None;
        let wants_web = format!("{cmd:?}").contains("--web-listen");
        let wants_metrics = format!("{cmd:?}").contains("--metrics-listen");
        while Instant::now() < deadline {
            if let Ok((key, a)) = rx.recv_timeout(Duration::from_millis(50)) {
                match key {
                    "listen=" => addr = Some(a),
                    "web_listen=" => web = Some(a),
                    _ => metrics = Some(a),
                }
            }
            if addr.is_some()
                && (!wants_web || web.is_some())
                && (!wants_metrics || metrics.is_some())
            {
                return Ok(Proc {
                    child,
                    addr: addr.unwrap_or_default(),
                    web,
                    metrics,
                    log,
                });
            }
            if let Ok(Some(status)) = child.try_wait() {
                // Let the reader thread take the last lines.
                std::thread::sleep(Duration::from_millis(200));
                let text = log.lock().unwrap().join("\n");
                return Err((status, text));
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("cairn serve did not start in time");
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Whether `needle` shows up in the log within `within`: lines reach
    /// the pipe, and the reader thread, a little after the event.
    pub async fn logged(&self, needle: &str, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.log().contains(needle) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A field of `/proc/PID/status` in kB (`VmRSS`, `VmHWM`).
    pub fn status_kb(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc status"))
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .expect("connect")
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill -TERM")
            .success();
        assert!(ok, "kill -TERM failed");
    }

    /// Waits for the exit, at most `timeout`; `None` if it is still running.
    /// Async, so the test's own clients keep running meanwhile (they must
    /// answer the server's goodbye for it to close their connections).
    pub async fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// SIGTERM, then waits for a clean exit.
    pub async fn stop(mut self) {
        self.terminate();
        let status = self
            .wait_timeout(Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("no exit after SIGTERM:\n{}", self.log()));
        assert!(
            status.success(),
            "exit {status} after SIGTERM:\n{}",
            self.log()
        );
    }

    /// SIGKILL.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
