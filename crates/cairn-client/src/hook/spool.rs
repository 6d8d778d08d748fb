//! The hook's local spool: observations that could not be delivered yet,
//! in the order they happened, bounded, shared by every hook process of
//! the machine's user.
//!
//! `spool.jsonl` holds one observation a line; `spool.pos` how many bytes
//! of it are delivered. Appending takes `spool.lock` for a moment; only one
//! process delivers at a time (`deliver.lock`, never waited for by a hook),
//! so entries reach the server in order, each once.

use std::fs::{File, OpenOptions};
use std::io::{BufRead as _, BufReader, Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::map::Observation;

/// Most bytes the spool holds; past it a new observation is refused (and
/// said on stderr) rather than an old one dropped, which would reorder.
pub const MAX_SPOOL_BYTES: u64 = 16 * 1024 * 1024;

/// How long hooks spool without trying after the server failed one: a
/// hung server then costs the agent one hook's timeout every few seconds,
/// not one per event.
pub const BACK_OFF: Duration = Duration::from_secs(5);

/// The spool directory.
#[derive(Debug, Clone)]
pub struct Spool {
    dir: PathBuf,
}

/// The exclusive right to deliver, held while it lives.
pub struct Delivering {
    _lock: File,
}

impl Spool {
    /// The spool under `dir`, created (owner-only) if missing.
    pub fn open(dir: &Path) -> Result<Spool, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        }
        Ok(Spool {
            dir: dir.to_owned(),
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn file(&self, name: &str) -> Result<File, String> {
        let mut opts = OpenOptions::new();
        opts.read(true).append(true).create(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            opts.mode(0o600);
        }
        let path = self.path(name);
        opts.open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Runs `f` holding the spool's lock, waiting for it until `until`.
    fn locked<T>(
        &self,
        until: Instant,
        f: impl FnOnce(&Spool) -> Result<T, String>,
    ) -> Result<T, String> {
        let lock = self.file("spool.lock")?;
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(format!("the spool is locked: {e:?}")),
            }
        }
        let out = f(self);
        let _ = lock.unlock();
        out
    }

    /// Appends observations, in order.
    pub fn append(&self, items: &[Observation], until: Instant) -> Result<(), String> {
        if items.is_empty() {
            return Ok(());
        }
        let mut text = String::new();
        for o in items {
            text.push_str(&serde_json::to_string(o).map_err(|e| e.to_string())?);
            text.push('\n');
        }
        self.locked(until, |s| {
            let mut f = s.file("spool.jsonl")?;
            let len = f.metadata().map_err(|e| e.to_string())?.len();
            if len + text.len() as u64 > MAX_SPOOL_BYTES {
                return Err(format!(
                    "the spool is full ({} MiB undelivered): start the Cairn server and run `cairn hook flush`",
                    MAX_SPOOL_BYTES >> 20
                ));
            }
            f.write_all(text.as_bytes()).map_err(|e| e.to_string())
        })
    }

    /// The right to deliver, if no other process has it.
    pub fn try_deliver(&self) -> Result<Option<Delivering>, String> {
        let lock = self.file("deliver.lock")?;
        match lock.try_lock() {
            Ok(()) => Ok(Some(Delivering { _lock: lock })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(e.to_string()),
        }
    }

    /// The right to deliver, waiting for it (`cairn hook flush`).
    pub fn deliver(&self) -> Result<Delivering, String> {
        let lock = self.file("deliver.lock")?;
        lock.lock().map_err(|e| e.to_string())?;
        Ok(Delivering { _lock: lock })
    }

    /// The first undelivered observation and where the next one starts.
    /// A line that does not read as one is skipped (said on stderr).
    pub fn peek(
        &self,
        _: &Delivering,
        until: Instant,
    ) -> Result<Option<(Observation, u64)>, String> {
        self.locked(until, |s| {
            loop {
                let pos = s.pos()?;
                let mut f = s.file("spool.jsonl")?;
                f.seek(SeekFrom::Start(pos)).map_err(|e| e.to_string())?;
                let mut line = String::new();
                let n = BufReader::new(f)
                    .read_line(&mut line)
                    .map_err(|e| e.to_string())?;
                if n == 0 || !line.ends_with('\n') {
                    return Ok(None);
                }
                let next = pos + n as u64;
                match serde_json::from_str(line.trim_end()) {
                    Ok(o) => return Ok(Some((o, next))),
                    Err(e) => {
                        eprintln!("cairn hook: skipping an unreadable spool entry: {e}");
                        s.set_pos(next)?;
                    }
                }
            }
        })
    }

    /// Marks everything before `next` delivered; an emptied spool starts
    /// over at zero bytes.
    pub fn done(&self, _: &Delivering, next: u64, until: Instant) -> Result<(), String> {
        self.locked(until, |s| {
            let f = s.file("spool.jsonl")?;
            if next >= f.metadata().map_err(|e| e.to_string())?.len() {
                f.set_len(0).map_err(|e| e.to_string())?;
                return s.set_pos(0);
            }
            s.set_pos(next)
        })
    }

    /// Notes that the server just failed a delivery: hooks spool without
    /// trying for [`BACK_OFF`].
    pub fn back_off(&self) -> Result<(), String> {
        let until = std::time::SystemTime::now() + BACK_OFF;
        let secs = until
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        std::fs::write(self.path("backoff"), secs.to_string()).map_err(|e| e.to_string())
    }

    /// Forgets a failure: the server delivered.
    pub fn clear_back_off(&self) {
        let _ = std::fs::remove_file(self.path("backoff"));
    }

    /// Whether a recent failure says not to try now.
    pub fn backing_off(&self) -> Result<bool, String> {
        let Ok(text) = std::fs::read_to_string(self.path("backoff")) else {
            return Ok(false);
        };
        let until: u128 = text.trim().parse().unwrap_or(0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        Ok(now < until)
    }

    /// Undelivered bytes.
    pub fn pending(&self) -> Result<u64, String> {
        let len = self
            .file("spool.jsonl")?
            .metadata()
            .map_err(|e| e.to_string())?
            .len();
        Ok(len.saturating_sub(self.pos()?))
    }

    fn pos(&self) -> Result<u64, String> {
        let mut text = String::new();
        match File::open(self.path("spool.pos")) {
            Ok(mut f) => {
                f.read_to_string(&mut text).map_err(|e| e.to_string())?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e.to_string()),
        }
        Ok(text.trim().parse().unwrap_or(0))
    }

    fn set_pos(&self, pos: u64) -> Result<(), String> {
        // Written aside and renamed: a crash leaves the old or the new.
        let tmp = self.path("spool.pos.tmp");
        std::fs::write(&tmp, pos.to_string()).map_err(|e| e.to_string())?;
        std::fs::rename(&tmp, self.path("spool.pos")).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::map::{Change, Place};

    fn obs(n: u32) -> Observation {
        Observation {
            place: Place {
                session_id: "s".into(),
                parent_session_id: None,
                agent_id: "a".into(),
                root: None,
            },
            change: Change::Create {
                id: n,
                text: format!("t{n}"),
            },
        }
    }

    #[test]
    fn entries_come_out_in_order_once_and_the_spool_empties() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        spool.append(&[obs(1), obs(2)], until).unwrap();
        spool.append(&[obs(3)], until).unwrap();
        let d = spool.try_deliver().unwrap().unwrap();
        // Another process may not deliver meanwhile.
        assert!(spool.try_deliver().unwrap().is_none());
        let mut seen = Vec::new();
        while let Some((o, next)) = spool.peek(&d, until).unwrap() {
            if let Change::Create { id, .. } = o.change {
                seen.push(id);
            }
            spool.done(&d, next, until).unwrap();
        }
        assert_eq!(seen, [1, 2, 3]);
        assert_eq!(spool.pending().unwrap(), 0);
    }
}
