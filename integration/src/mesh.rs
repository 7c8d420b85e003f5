//! The shared parts of a mesh for the mesh-wide limit tests: a real Redis (Debian's
//! `redis-server`) and the rate limit service (`switchyard-ratelimit`, Limitador on that Redis),
//! each a process of its own on a free port, stopped by PID when dropped (and killable mid-run).

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::envoy::{repo_root, work_dir};

/// A port nothing listens on now (bound and released: the caller binds it next).
pub fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

fn wait_for_port(port: u16, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn stop(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// A Redis server with its own directory, no persistence.
pub struct Redis {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Redis {
    pub fn start(tag: &str) -> Result<Redis, String> {
        let mut r = Redis { port: free_port()?, dir: work_dir(&format!("redis-{tag}")), child: None };
        r.spawn()?;
        Ok(r)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let port = self.port.to_string();
        let dir = self.dir.display().to_string();
        let child = Command::new("redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1", "--dir", &dir, "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server (make mesh-tools installs it): {e}"))?;
        self.child = Some(child);
        if !wait_for_port(self.port, Duration::from_secs(10)) {
            stop(&mut self.child);
            return Err(format!("redis-server did not listen on {}", self.port));
        }
        Ok(())
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Stops it (its counters are lost, as a restart without persistence loses them).
    pub fn kill(&mut self) {
        stop(&mut self.child);
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        self.spawn()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// The rate limit service binary: `SWITCHYARD_RATELIMIT_BIN` (the bench's release build), else
/// the debug build, built on first use.
pub fn service_binary() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("SWITCHYARD_RATELIMIT_BIN") {
        return Ok(PathBuf::from(p));
    }
    let path = repo_root().join("target/debug/switchyard-ratelimit");
    if !path.exists() {
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "-q", "-p", "switchyard-ratelimit"])
            .current_dir(repo_root())
            .status()
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err("cargo build -p switchyard-ratelimit failed".into());
        }
    }
    Ok(path)
}

/// The rate limit service on a Redis, with the limits `config` (envoyproxy/ratelimit's format,
/// as `switchyard_deploy::ratelimit::service_config` renders it).
pub struct RateLimitService {
    pub addr: SocketAddr,
    config: PathBuf,
    redis_url: String,
    child: Option<Child>,
}

impl RateLimitService {
    pub fn start(tag: &str, redis_url: &str, config: &Value) -> Result<RateLimitService, String> {
        let dir = work_dir(&format!("ratelimit-{tag}"));
        let path = dir.join("ratelimit.json");
        std::fs::write(&path, serde_json::to_string_pretty(config).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let port = free_port()?;
        let mut s = RateLimitService {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            config: path,
            redis_url: redis_url.to_string(),
            child: None,
        };
        s.spawn()?;
        Ok(s)
    }

    fn spawn(&mut self) -> Result<(), String> {
        // Its errors go to a log beside its configuration (.work/ratelimit-<tag>-.../).
        let log = self.config.with_file_name("ratelimit.log");
        let stderr = std::fs::OpenOptions::new().create(true).append(true).open(&log).map_err(|e| e.to_string())?;
        let mut child = Command::new(service_binary()?)
            .args(["--listen", &self.addr.to_string(), "--redis", &self.redis_url, "--config"])
            .arg(&self.config)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("switchyard-ratelimit: {e}"))?;
        // It prints one line once it serves; read it on a thread so a stuck start times out.
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        self.child = Some(child);
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) if line.starts_with("listening on") => Ok(()),
            other => {
                stop(&mut self.child);
                Err(format!("switchyard-ratelimit did not start: {other:?}"))
            }
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Pauses it (SIGSTOP): its port still accepts connections, nothing answers, so calls time
    /// out (a hung service, not a dead one).
    /// Returns once every thread of it is stopped: SIGSTOP takes effect asynchronously, and a
    /// thread still running could answer a call sent right after.
    pub fn pause(&mut self) {
        self.signal(libc::SIGSTOP);
        let Some(pid) = self.pid() else { return };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !all_threads_stopped(pid) {
            assert!(std::time::Instant::now() < deadline, "switchyard-ratelimit {pid} did not stop within 5 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Lets a paused service run again (SIGCONT).
    pub fn resume(&mut self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(pid) = self.pid() {
            // SAFETY: a signal to our own child, by its PID (still ours: not yet waited for).
            unsafe {
                libc::kill(pid as libc::pid_t, sig);
            }
        }
    }

    /// Stops it (a crash, as far as Envoy can tell); a paused service is resumed first.
    pub fn kill(&mut self) {
        self.resume();
        stop(&mut self.child);
    }

    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        self.spawn()
    }
}

impl Drop for RateLimitService {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Every thread of `pid` is in the stopped state (`T` in `/proc/<pid>/task/<tid>/stat`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with(['T', 't'])))
            .unwrap_or(false)
    })
}
