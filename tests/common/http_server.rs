//! `python3 -m http.server` on 127.0.0.1, for the egress tests (no traffic beyond loopback).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `python3 -m http.server` on 127.0.0.1 serving `dir`, its request log in `log`.
pub struct Server {
    child: Child,
    pub port: u16,
    log: PathBuf,
}

impl Server {
    pub fn start(dir: &Path, log: PathBuf) -> Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("python3")
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "-d",
            ])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("CANNOT RUN HERE: python3 is needed for the local http server");
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the local server did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Server { child, port, log }
    }

    /// Request lines the server logged (the readiness probe sends none).
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"GET ") || l.contains("\"POST "))
            .map(String::from)
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
