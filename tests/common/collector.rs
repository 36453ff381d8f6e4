//! A webhook on 127.0.0.1 that keeps every JSON body it receives: the `[notify]` command of a
//! test posts to it (a confined hook cannot write the test's files).

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Collector {
    pub port: u16,
    pub bodies: Arc<Mutex<Vec<Value>>>,
}

impl Collector {
    pub fn start() -> Collector {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let b = Arc::clone(&bodies);
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0u8; len];
                if r.read_exact(&mut body).is_ok() {
                    if let Ok(v) = serde_json::from_slice(&body) {
                        b.lock().unwrap().push(v);
                    }
                }
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                );
            }
        });
        Collector { port, bodies }
    }

    /// The hook command that posts its stdin here.
    pub fn command(&self) -> String {
        format!(
            "curl -sS --fail -H 'Expect:' -H 'Content-Type: application/json' --data-binary @- http://127.0.0.1:{}/",
            self.port
        )
    }

    /// The bodies `keep` selects.
    pub fn matching(&self, keep: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|b| keep(b))
            .cloned()
            .collect()
    }

    /// Waits (30 s, scaled) until `n` bodies `keep` selects have arrived; they.
    pub fn wait_matching(&self, n: usize, what: &str, keep: impl Fn(&Value) -> bool) -> Vec<Value> {
        let t0 = Instant::now();
        loop {
            let got = self.matching(&keep);
            if got.len() >= n {
                return got;
            }
            assert!(
                t0.elapsed() < super::scaled(Duration::from_secs(30)),
                "{what}: {} of {n} notifications: {:?}",
                got.len(),
                self.bodies.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
