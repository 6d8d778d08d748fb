//! A real etcd cluster on loopback for a test: `etcd` processes (Debian's
//! `etcd-server`), ports chosen at run time, data in a temp dir, killed
//! when the cluster is dropped. Members can be SIGKILLed, SIGSTOPped and
//! continued, and the leader found, for fault tests.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_etcd::pb::etcdserverpb::maintenance_client::MaintenanceClient;
use cairn_etcd::pb::etcdserverpb::{RangeRequest, StatusRequest, kv_client::KvClient};

/// One member's addresses and process.
struct Member {
    name: String,
    client_url: String,
    peer_url: String,
    child: Option<Child>,
}

/// A running cluster.
pub struct EtcdCluster {
    members: Vec<Member>,
    dir: tempfile::TempDir,
    initial: String,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl EtcdCluster {
    /// Starts `n` members and waits until the cluster answers a
    /// linearizable read. Ports are picked free and then released, so
    /// another process (a parallel test's server) may take one first: a
    /// cluster that does not form is started again on new ports.
    pub async fn start(n: usize) -> EtcdCluster {
        let mut last = String::new();
        for _ in 0..3 {
            let cluster = Self::spawn_all(n);
            if cluster.ready(Duration::from_secs(20)).await {
                return cluster;
            }
            last = cluster.logs();
        }
        panic!("etcd did not become ready in three tries:\n{last}");
    }

    fn spawn_all(n: usize) -> EtcdCluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_url: format!("http://127.0.0.1:{}", free_port()),
                peer_url: format!("http://127.0.0.1:{}", free_port()),
                child: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            members,
            dir,
            initial,
        };
        for i in 0..n {
            cluster.spawn(i);
        }
        cluster
    }

    fn spawn(&mut self, i: usize) {
        let data = self.dir.path().join(&self.members[i].name);
        let m = &mut self.members[i];
        let log = std::fs::File::create(self.dir.path().join(format!("{}.log", m.name)))
            .expect("etcd log file");
        let child = Command::new("etcd")
            .arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &m.client_url])
            .args(["--advertise-client-urls", &m.client_url])
            .args(["--listen-peer-urls", &m.peer_url])
            .args(["--initial-advertise-peer-urls", &m.peer_url])
            .args(["--initial-cluster", &self.initial])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "cairn-test"])
            // Quick elections: the fault tests wait for them.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--log-level", "warn"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn etcd (Debian: apt-get install etcd-server)");
        m.child = Some(child);
    }

    /// Client URLs of every member, for `--etcd-endpoints`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// Client URL of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        self.members[i].client_url.clone()
    }

    /// The members' logs, for a failing test's message.
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let text = std::fs::read_to_string(self.dir.path().join(format!("{}.log", m.name)))
                    .unwrap_or_default();
                format!("== {}\n{text}", m.name)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn answers(url: &str) -> bool {
        let Ok(endpoint) = tonic::transport::Endpoint::from_shared(url.to_owned()) else {
            return false;
        };
        let Ok(channel) = endpoint
            .connect_timeout(Duration::from_millis(300))
            .connect()
            .await
        else {
            return false;
        };
        let mut kv = KvClient::new(channel);
        let read = kv.range(RangeRequest {
            key: b"ready".to_vec(),
            ..RangeRequest::default()
        });
        matches!(
            tokio::time::timeout(Duration::from_secs(2), read).await,
            Ok(Ok(_))
        )
    }

    /// Waits until every running member answers a linearizable read.
    pub async fn wait_ready(&self, within: Duration) {
        assert!(
            self.ready(within).await,
            "etcd did not become ready:\n{}",
            self.logs()
        );
    }

    /// Whether every running member answers a linearizable read within
    /// `within`.
    async fn ready(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        for m in &self.members {
            if m.child.is_none() {
                continue;
            }
            while !Self::answers(&m.client_url).await {
                if Instant::now() >= deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        true
    }

    /// The index of the current leader, asked of any running member.
    pub async fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            for m in self.members.iter().filter(|m| m.child.is_some()) {
                let Ok(channel) = tonic::transport::Endpoint::from_shared(m.client_url.clone())
                    .expect("url")
                    .connect_timeout(Duration::from_millis(300))
                    .connect()
                    .await
                else {
                    continue;
                };
                let status = tokio::time::timeout(
                    Duration::from_secs(2),
                    MaintenanceClient::new(channel).status(StatusRequest {}),
                )
                .await;
                if let Ok(Ok(s)) = status {
                    let s = s.into_inner();
                    if s.leader != 0 {
                        // The member whose own id is the leader's.
                        for (i, other) in self.members.iter().enumerate() {
                            if other.child.is_none() {
                                continue;
                            }
                            let Ok(ch) =
                                tonic::transport::Endpoint::from_shared(other.client_url.clone())
                                    .expect("url")
                                    .connect_timeout(Duration::from_millis(300))
                                    .connect()
                                    .await
                            else {
                                continue;
                            };
                            if let Ok(Ok(o)) = tokio::time::timeout(
                                Duration::from_secs(2),
                                MaintenanceClient::new(ch).status(StatusRequest {}),
                            )
                            .await
                                && o.into_inner()
                                    .header
                                    .is_some_and(|h| h.member_id == s.leader)
                            {
                                return i;
                            }
                        }
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "no etcd leader:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn signal(&self, i: usize, sig: &str) {
        let pid = self.members[i].child.as_ref().expect("running").id();
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill {sig} {pid}");
    }

    /// SIGKILL member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again on its data (after [`EtcdCluster::kill`]).
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].child.is_none(), "member {i} is running");
        // An existing data dir makes etcd rejoin rather than bootstrap.
        self.spawn(i);
    }

    /// SIGSTOP member `i` (it holds its connections but answers nothing).
    pub fn pause(&self, i: usize) {
        self.signal(i, "-STOP");
    }

    /// SIGCONT member `i`.
    pub fn resume(&self, i: usize) {
        self.signal(i, "-CONT");
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut c) = m.child.take() {
                // A stopped process must be continued to die cleanly.
                let _ = Command::new("kill")
                    .args(["-CONT", &c.id().to_string()])
                    .status();
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}
