//! A real PostgreSQL for the fleet tests (issue 37): `initdb` + `postgres` in a temp dir, run as
//! uid 65534 when the tests run as root (the server refuses root), as the test's own user
//! otherwise; trust authentication on 127.0.0.1 only, a free port. The postmaster is started by
//! a keeper thread that lives as long as the test binary, with `setpriv --pdeathsig`: it ends
//! with the tests. [`shared`] is one cluster per test binary; a test that stops its registry
//! starts its own ([`Cluster::start`]).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const BIN_DIRS: &[&str] = &["/usr/local/bin", "/usr/lib/postgresql/15/bin"];

fn pg_bin(name: &str) -> PathBuf {
    for d in BIN_DIRS {
        let p = Path::new(d).join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!("CANNOT RUN HERE: no PostgreSQL {name} in {BIN_DIRS:?}");
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The prefix that runs a server program as the unprivileged user (and ends it with us).
fn as_server_user(pdeathsig: bool) -> Vec<String> {
    let mut v = vec!["setpriv".to_string()];
    if is_root() {
        v.extend(["--reuid=65534", "--regid=65534", "--clear-groups"].map(String::from));
    }
    if pdeathsig {
        v.push("--pdeathsig=KILL".into());
    }
    v
}

pub struct Cluster {
    pub port: u16,
    pub dir: PathBuf,
    child: Mutex<Option<u32>>,
    /// Extra `-c` settings of the server (e.g. TLS: [`Cluster::start_tls`]).
    extra: Vec<String>,
}

static SHARED: OnceLock<Cluster> = OnceLock::new();

/// Removes the temp dirs of earlier test binaries' clusters (the shared one is never dropped):
/// those older than ten minutes whose server is gone.
fn sweep() {
    let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(600));
        let named = p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("brainloop-pg"));
        if !named || !old {
            continue;
        }
        let alive = std::fs::read_to_string(p.join("data/postmaster.pid"))
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<u32>().ok()))
            .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            let _ = std::fs::remove_dir_all(&p);
        }
    }
}

/// The test binary's cluster.
pub fn shared() -> &'static Cluster {
    SHARED.get_or_init(Cluster::start)
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Cluster {
    /// A new cluster (initdb, then the server), ready to accept connections.
    pub fn start() -> Cluster {
        Cluster::start_with(&[], Vec::new())
    }

    /// A new cluster with `ssl=on`, serving `cert_pem` (its chain) with `key_pem`: written into
    /// the data dir, the server user's, mode 600.
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> Cluster {
        Cluster::start_with(
            &[("server.crt", cert_pem), ("server.key", key_pem)],
            [
                "ssl=on",
                "ssl_cert_file=server.crt",
                "ssl_key_file=server.key",
            ]
            .map(String::from)
            .to_vec(),
        )
    }

    /// [`Cluster::start_tls`], and login role `user` must present a client certificate signed
    /// by `client_ca_pem` (pg_hba `cert`, the certificate's CN = the role) over TCP.
    pub fn start_tls_cert_auth(
        cert_pem: &str,
        key_pem: &str,
        client_ca_pem: &str,
        user: &str,
    ) -> Cluster {
        let hba = format!(
            "hostssl all {user} 127.0.0.1/32 cert\nhost all {user} 127.0.0.1/32 reject\nhost all all 127.0.0.1/32 trust\n"
        );
        Cluster::start_with(
            &[
                ("server.crt", cert_pem),
                ("server.key", key_pem),
                ("root.crt", client_ca_pem),
                ("pg_hba.conf", &hba),
            ],
            [
                "ssl=on",
                "ssl_cert_file=server.crt",
                "ssl_key_file=server.key",
                "ssl_ca_file=root.crt",
            ]
            .map(String::from)
            .to_vec(),
        )
    }

    fn start_with(files: &[(&str, &str)], extra: Vec<String>) -> Cluster {
        sweep();
        let root = tempfile::Builder::new()
            .prefix("brainloop-pg")
            .tempdir()
            .unwrap()
            .keep();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = root.join("data");
        std::fs::create_dir(&dir).unwrap();
        if is_root() {
            nix::unistd::chown(
                &dir,
                Some(nix::unistd::Uid::from_raw(65534)),
                Some(nix::unistd::Gid::from_raw(65534)),
            )
            .unwrap();
        }
        let pre = as_server_user(false);
        let out = Command::new(&pre[0])
            .args(&pre[1..])
            .arg(pg_bin("initdb"))
            .args(["-D"])
            .arg(&dir)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        for (name, text) in files {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
            if is_root() {
                nix::unistd::chown(
                    &p,
                    Some(nix::unistd::Uid::from_raw(65534)),
                    Some(nix::unistd::Gid::from_raw(65534)),
                )
                .unwrap();
            }
        }
        let c = Cluster {
            port: free_port(),
            dir,
            child: Mutex::new(None),
            extra,
        };
        c.resume();
        c
    }

    /// Starts the server (again) on the same port and data, and waits until it accepts.
    pub fn resume(&self) {
        let (tx, rx) = mpsc::channel();
        let (dir, port) = (self.dir.clone(), self.port);
        let extra = self.extra.clone();
        let log = self.dir.parent().unwrap().join("server.log");
        // The keeper thread spawns the server and waits for it: PDEATHSIG fires when the thread
        // that spawned the child exits, i.e. when the test binary does.
        std::thread::spawn(move || {
            let pre = as_server_user(true);
            let logf = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .unwrap();
            let mut child: Child = Command::new(&pre[0])
                .args(&pre[1..])
                .arg(pg_bin("postgres"))
                .arg("-D")
                .arg(&dir)
                .args(["-p", &port.to_string()])
                .args(["-c", "listen_addresses=127.0.0.1"])
                .args(["-c", "unix_socket_directories="])
                .args(["-c", "fsync=off", "-c", "max_connections=200"])
                .args(extra.iter().flat_map(|e| ["-c", e.as_str()]))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(logf)
                .spawn()
                .expect("start postgres");
            tx.send(child.id()).unwrap();
            // Reaped here when it stops ([`Cluster::stop`]); until then this thread lives.
            let _ = child.wait();
        });
        let pid = rx.recv().unwrap();
        *self.child.lock().unwrap() = Some(pid);
        let t0 = Instant::now();
        loop {
            if postgres::Client::connect(&self.admin_url("postgres"), postgres::NoTls).is_ok() {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "postgres did not start: {}",
                std::fs::read_to_string(self.dir.parent().unwrap().join("server.log"))
                    .unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the server (fast shutdown: clients are disconnected) and waits until it is gone.
    pub fn stop(&self) {
        let Some(pid) = self.child.lock().unwrap().take() else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(pid as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let t0 = Instant::now();
        while nix::sys::signal::kill(pid, None).is_ok() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "postgres did not stop"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn root(&self) -> &Path {
        self.dir.parent().unwrap()
    }

    /// The superuser's URL for database `db`.
    pub fn admin_url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// A login role's URL for database `db`.
    pub fn url_as(&self, role: &str, db: &str) -> String {
        format!("postgres://{role}@127.0.0.1:{}/{db}", self.port)
    }

    /// A fresh database named `db` (the test's own: tests of one binary run in parallel).
    pub fn create_db(&self, db: &str) {
        let mut c =
            postgres::Client::connect(&self.admin_url("postgres"), postgres::NoTls).unwrap();
        c.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    }

    /// `pg_dump -Fc` of database `db` into `file` (the superuser's).
    pub fn dump(&self, db: &str, file: &Path) {
        let out = Command::new(pg_bin("pg_dump"))
            .args(["-Fc", "-h", "127.0.0.1", "-U", "postgres", "-p"])
            .arg(self.port.to_string())
            .args(["-d", db, "-f"])
            .arg(file)
            .output()
            .expect("run pg_dump");
        assert!(
            out.status.success(),
            "pg_dump: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Drops database `db` (its connections ended) and recreates it from `file` with
    /// `pg_restore`: a registry restored from a backup.
    pub fn restore(&self, db: &str, file: &Path) {
        let mut c =
            postgres::Client::connect(&self.admin_url("postgres"), postgres::NoTls).unwrap();
        c.batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)"))
            .unwrap();
        c.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
        let out = Command::new(pg_bin("pg_restore"))
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "--single-transaction",
                "-p",
            ])
            .arg(self.port.to_string())
            .args(["-d", db])
            .arg(file)
            .output()
            .expect("run pg_restore");
        assert!(
            out.status.success(),
            "pg_restore: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The server's processes: the postmaster and its children (to SIGSTOP the whole server).
    pub fn pids(&self) -> Vec<i32> {
        let Some(pm) = *self.child.lock().unwrap() else {
            return Vec::new();
        };
        // The keeper spawns setpriv, which execs postgres: the pid is the postmaster's.
        let mut out = vec![pm as i32];
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid …: the fields after the last ')'.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(pm) {
                out.push(pid);
            }
        }
        out
    }

    pub fn connect(&self, role: &str, db: &str) -> postgres::Client {
        postgres::Client::connect(&self.url_as(role, db), postgres::NoTls).unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(self.root());
    }
}
