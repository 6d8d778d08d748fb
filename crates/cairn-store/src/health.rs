//! Whether the store can serve, and how its failures are classified.
//!
//! A corrupt page, a full disk or a panic inside the storage engine must
//! never look like "the server is shutting down", and must never silently
//! take a worker away. Every read and write runs under [`guard`]: a panic is
//! caught and turned into an error for that one caller, and every storage
//! error passes through [`Health::observe`], which names the database file
//! and moves the store's [`Readiness`], which health checks report.

use std::any::Any;
use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

use tokio::sync::watch;

use cairn_core::error::{Error, Result};

/// What health checks should say about the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Reads and writes work.
    Serving,
    /// Reads and writes work, with less redundancy than configured (an
    /// etcd member is out): health still says SERVING, and the
    /// `cairn.store.redundancy` health service says NOT_SERVING.
    Degraded,
    /// Writes fail (disk full, I/O error); the store reopens the database as
    /// soon as a write can succeed again.
    Recovering,
    /// The database file is corrupt. Sticky until a restart, where the
    /// integrity check refuses the file or repairs it.
    Corrupt,
}

/// The store's condition, shared by its workers.
#[derive(Debug)]
pub struct Health {
    condition: watch::Sender<Readiness>,
    file: String,
    /// Redundancy is reduced: `Serving` is reported as `Degraded`.
    degraded: std::sync::atomic::AtomicBool,
}

impl Health {
    /// A healthy store on `file`.
    pub fn new(file: String) -> Self {
        Health {
            condition: watch::Sender::new(Readiness::Serving),
            file,
            degraded: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Follows the condition.
    pub fn subscribe(&self) -> watch::Receiver<Readiness> {
        self.condition.subscribe()
    }

    /// The condition now.
    pub fn condition(&self) -> Readiness {
        *self.condition.borrow()
    }

    /// Notes whether redundancy is reduced (an etcd member out): a serving
    /// store then reports `Degraded`.
    pub fn set_degraded(&self, degraded: bool) {
        self.degraded
            .store(degraded, std::sync::atomic::Ordering::Relaxed);
        let now = self.condition();
        if matches!(now, Readiness::Serving | Readiness::Degraded) {
            self.set(Readiness::Serving);
        }
    }

    /// Moves to `to`, except that nothing leaves `Corrupt`.
    pub fn set(&self, to: Readiness) {
        let to = if to == Readiness::Serving
            && self.degraded.load(std::sync::atomic::Ordering::Relaxed)
        {
            Readiness::Degraded
        } else {
            to
        };
        self.condition.send_if_modified(|c| {
            if *c == to || *c == Readiness::Corrupt {
                return false;
            }
            match to {
                Readiness::Corrupt => {
                    tracing::error!(file = %self.file, "the database file is corrupt: health is NOT_SERVING until it is restored or repaired");
                }
                Readiness::Recovering => {
                    tracing::error!(file = %self.file, "writes are failing: health is NOT_SERVING until the database can be reopened");
                }
                Readiness::Serving => {
                    tracing::info!(file = %self.file, "the store serves with full redundancy: health is SERVING");
                }
                Readiness::Degraded => {
                    tracing::warn!(file = %self.file, "the store serves with reduced redundancy: health is SERVING, cairn.store.redundancy is NOT_SERVING");
                }
            }
            *c = to;
            true
        });
    }

    /// Names the file in a storage error and notes what it says about the
    /// store (corruption is sticky).
    pub fn observe(&self, e: Error) -> Error {
        match e {
            Error::DataLoss { detail, .. } => {
                self.set(Readiness::Corrupt);
                Error::DataLoss {
                    file: self.file.clone(),
                    detail,
                }
            }
            Error::DiskFull { detail, .. } => Error::DiskFull {
                file: self.file.clone(),
                detail,
            },
            other => other,
        }
    }
}

/// Whether a failed write means the database must be closed and reopened
/// before it can write again (redb latches I/O errors).
pub fn needs_reopen(e: &Error) -> bool {
    matches!(e, Error::DiskFull { .. } | Error::Unavailable(_))
}

thread_local! {
    /// Where the last panic on this thread happened, set by the hook.
    static LAST_PANIC: RefCell<Option<(String, u32)>> = const { RefCell::new(None) };
}

/// Installs (once per process) a panic hook that logs one line instead of
/// a backtrace (unless `RUST_BACKTRACE` asks for it) and remembers where
/// the panic happened, so [`guard`] can tell a corrupt file from a bug.
pub fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        let backtraces = std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0");
        std::panic::set_hook(Box::new(move |info| {
            let location = info.location().map(|l| (l.file().to_owned(), l.line()));
            LAST_PANIC.with(|p| p.borrow_mut().clone_from(&location));
            let message = payload_text(info.payload());
            let (file, line) = location.unwrap_or_default();
            tracing::error!(panic.file = %file, panic.line = line, message = %message, "a worker panicked; the request fails, the worker carries on");
            if backtraces {
                previous(info);
            }
        }));
    });
}

fn payload_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-text panic".to_owned()
    }
}

/// Runs `f`, turning a panic into an error: [`Error::DataLoss`] when it
/// happened inside the storage engine (a corrupt page), otherwise
/// [`Error::Internal`] (a bug in Cairn).
pub fn guard<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    LAST_PANIC.with(|p| p.borrow_mut().take());
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(out) => out,
        Err(payload) => {
            let message = payload_text(payload.as_ref());
            let location = LAST_PANIC.with(|p| p.borrow_mut().take());
            let in_engine = location
                .as_ref()
                .is_some_and(|(file, _)| in_redb_crate(file));
            if in_engine {
                Err(Error::DataLoss {
                    file: String::new(),
                    detail: format!("the storage engine failed reading it ({message})"),
                })
            } else {
                let at = location.map_or_else(String::new, |(f, l)| format!(" at {f}:{l}"));
                Err(Error::Internal(format!(
                    "a request panicked{at}: {message}"
                )))
            }
        }
    }
}

/// Whether a panic's file is a source of the redb crate itself (a
/// registry path such as `.../redb-4.6.0/src/tree_store/page_store.rs`),
/// not of Cairn's own engine crate, whose name also holds "redb".
fn in_redb_crate(file: &str) -> bool {
    file.split(['/', '\\']).any(|part| {
        part.strip_prefix("redb-")
            .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_redb_crate_is_the_engine() {
        assert!(in_redb_crate(
            "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/redb-4.6.0/src/tree_store/btree.rs"
        ));
        assert!(!in_redb_crate("crates/cairn-redb/src/lib.rs"));
        assert!(!in_redb_crate("crates/cairn-store/src/ops.rs"));
    }

    #[test]
    fn panics_become_errors_and_corruption_is_sticky() {
        install_panic_hook();
        let out: Result<()> = guard(|| panic!("boom"));
        assert!(matches!(out, Err(Error::Internal(m)) if m.contains("boom")));
        let health = Health::new("/data/cairn.redb".into());
        let e = health.observe(Error::DataLoss {
            file: String::new(),
            detail: "bad page".into(),
        });
        assert_eq!(
            e.to_string(),
            "the database file /data/cairn.redb is corrupt: bad page"
        );
        assert_eq!(health.condition(), Readiness::Corrupt);
        health.set(Readiness::Serving);
        assert_eq!(health.condition(), Readiness::Corrupt);
    }
}
