//! A real Prometheus (Debian's `prometheus`) for the dashboard and alert tests: its own
//! directory under `.work/` and a free port, scraping the given targets (an Envoy admin's
//! `/stats/prometheus`), optionally evaluating rule files, stopped by PID when dropped. Queries
//! go through its HTTP API, so an expression that does not parse fails as it would in Grafana.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::envoy::{http_get, work_dir};
use crate::mesh::free_port;

/// How long `start` waits for `/-/ready` (Debian's 2.42 is ready in well under a second).
const READY_WITHIN: Duration = Duration::from_secs(30);

/// `prometheus` and `promtool` are on the PATH (`make observability-tools` installs them).
pub fn binaries_present() -> bool {
    ["prometheus", "promtool"].iter().all(|b| {
        Command::new(b).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    })
}

/// `promtool check rules <path>`: its stdout on success, its stdout and stderr otherwise.
pub fn promtool_check_rules(path: &Path) -> Result<String, String> {
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(path)
        .output()
        .map_err(|e| format!("promtool (make observability-tools installs it): {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(stdout + &String::from_utf8_lossy(&out.stderr))
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters (for a query parameter).
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The number of series in a query's `data`: a vector's or matrix's results, 1 for a scalar
/// (or string), 0 for anything else.
pub fn series_count(data: &Value) -> usize {
    match data["resultType"].as_str() {
        Some("vector") | Some("matrix") => data["result"].as_array().map_or(0, Vec::len),
        Some("scalar") | Some("string") => 1,
        _ => 0,
    }
}

/// A Prometheus duration for `ms` milliseconds ("1s", "500ms").
fn duration(ms: u64) -> String {
    if ms > 0 && ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// A YAML scalar for any string (a JSON string is a YAML double-quoted scalar).
fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// A PromQL string literal's content for `s` (a label value in a matcher).
fn promql_str(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The prometheus.yml for `targets` (job, address, metrics path), scraped and evaluated every
/// `interval_ms`, loading `rules`.
fn config(targets: &[(String, SocketAddr, String)], interval_ms: u64, rules: &[PathBuf]) -> String {
    let interval = duration(interval_ms);
    let mut out = format!("global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\n");
    if !rules.is_empty() {
        out.push_str("rule_files:\n");
        for r in rules {
            // Relative rule paths would resolve against the config's directory: make them absolute.
            let r = std::path::absolute(r).unwrap_or_else(|_| r.clone());
            out.push_str(&format!("  - {}\n", yaml_str(&r.display().to_string())));
        }
    }
    out.push_str("scrape_configs:\n");
    for (job, target, path) in targets {
        out.push_str(&format!(
            "  - job_name: {}\n    metrics_path: {}\n    static_configs:\n      - targets: [{}]\n",
            yaml_str(job),
            yaml_str(path),
            yaml_str(&target.to_string())
        ));
    }
    out
}

/// A Prometheus server scraping its targets; killed (by its PID) when dropped.
pub struct Prometheus {
    addr: SocketAddr,
    dir: PathBuf,
    pid: u32,
    interval: Duration,
    child: Option<Child>,
}

impl Prometheus {
    /// Starts one scraping each (job, target address, metrics path) every `interval_ms`, and
    /// waits until it is ready.
    pub fn start(tag: &str, targets: &[(String, SocketAddr, String)], interval_ms: u64) -> Result<Prometheus, String> {
        Prometheus::start_with_rules(tag, targets, interval_ms, &[])
    }

    /// As [`Prometheus::start`], also evaluating the rule files every `interval_ms`. A rule
    /// file that does not load makes Prometheus exit: the error carries its log's tail.
    pub fn start_with_rules(
        tag: &str,
        targets: &[(String, SocketAddr, String)],
        interval_ms: u64,
        rules: &[PathBuf],
    ) -> Result<Prometheus, String> {
        let dir = work_dir(&format!("prometheus-{tag}"));
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config(targets, interval_ms, rules)).map_err(|e| e.to_string())?;
        let port = free_port()?;
        let log = std::fs::File::create(dir.join("prometheus.log")).map_err(|e| e.to_string())?;
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--web.enable-lifecycle")
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("prometheus (make observability-tools installs it): {e}"))?;
        let mut p = Prometheus {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            dir,
            pid: child.id(),
            interval: Duration::from_millis(interval_ms.max(1)),
            child: Some(child),
        };
        // On any error below, dropping `p` stops the process.
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if let Some(Ok(Some(status))) = p.child.as_mut().map(Child::try_wait) {
                p.child = None;
                return Err(format!("prometheus exited ({status}):\n{}", p.log_tail()));
            }
            if http_get(p.addr, "/-/ready").is_ok_and(|(s, _)| s == 200) {
                return Ok(p);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!("prometheus was not ready within {READY_WITHIN:?}:\n{}", p.log_tail()))
    }

    /// Where its HTTP API listens (127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its process id (the one `Drop` stops).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its directory: prometheus.yml, prometheus.log and the TSDB (`data/`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last lines of its log.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// GET an API path: `data` on success, else Prometheus's `errorType: error`.
    fn api(&self, path: &str) -> Result<Value, String> {
        let (status, body) = http_get(self.addr, path)?;
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("{path}: {status}: {e}: {body}"))?;
        if v["status"] == "success" {
            Ok(v["data"].clone())
        } else {
            Err(format!("{}: {}", v["errorType"].as_str().unwrap_or("error"), v["error"].as_str().unwrap_or(&body)))
        }
    }

    /// An instant query's `data` (`resultType`, `result`); an expression that does not parse
    /// is an error naming the parse error (`bad_data: invalid parameter "query": 1:5: parse error: ...`).
    pub fn query(&self, expr: &str) -> Result<Value, String> {
        self.api(&format!("/api/v1/query?query={}", url_encode(expr)))
    }

    /// A range query's `data` over the last `seconds`, one point every `step_s` seconds.
    pub fn query_range(&self, expr: &str, seconds: u64, step_s: u64) -> Result<Value, String> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        self.api(&format!(
            "/api/v1/query_range?query={}&start={}&end={now}&step={}",
            url_encode(expr),
            now.saturating_sub(seconds),
            step_s.max(1)
        ))
    }

    /// The loaded rule groups, each rule with its health and state (`/api/v1/rules` data).
    pub fn rules(&self) -> Result<Value, String> {
        self.api("/api/v1/rules")
    }

    /// The pending and firing alerts (`/api/v1/alerts` data).
    pub fn alerts(&self) -> Result<Value, String> {
        self.api("/api/v1/alerts")
    }

    /// Waits (at most `timeout`) until the job's target is up and has been scraped
    /// successfully `n` times (`sum_over_time(up[10m])`, so failed scrapes do not count).
    pub fn wait_for_scrapes(&self, job: &str, n: u64, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let expr = format!("sum(sum_over_time(up{{job=\"{}\"}}[10m]))", promql_str(job));
        let mut last = String::from("no answer yet");
        while Instant::now() < deadline {
            match self.api("/api/v1/targets?state=active") {
                Ok(t) => {
                    let target = t["activeTargets"].as_array().and_then(|ts| {
                        ts.iter().find(|t| t["labels"]["job"] == job || t["scrapePool"] == job).cloned()
                    });
                    match target {
                        Some(t) if t["health"] == "up" => {
                            let scraped = self
                                .query(&expr)
                                .ok()
                                .and_then(|d| d["result"][0]["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()));
                            if scraped.is_some_and(|s| s >= n as f64) {
                                return Ok(());
                            }
                            last = format!("up, {} successful scrapes", scraped.unwrap_or(0.0));
                        }
                        Some(t) => last = format!("health {}, last error {}", t["health"], t["lastError"]),
                        None => last = "no such target".into(),
                    }
                }
                Err(e) => last = e,
            }
            std::thread::sleep(self.interval.min(Duration::from_millis(200)));
        }
        Err(format!("job {job}: not scraped successfully {n} times within {timeout:?} ({last})"))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let Some(mut c) = self.child.take() else { return };
        // SIGTERM first (a clean shutdown), SIGKILL if it lingers. Only this PID, and only
        // while it is still our unreaped child (so the PID cannot have been reused).
        if let Ok(None) = c.try_wait() {
            // SAFETY: kill(2) on our own child's PID; no memory is involved.
            unsafe {
                libc::kill(self.pid as libc::pid_t, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A target serving a fixed exposition at every path.
    fn serve(text: &'static str) -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                    text.len()
                );
            }
        });
        addr
    }

    /// The self-tests need both binaries: without them they fail (a skipped self-test passes
    /// without checking anything; `make integration` installs them first).
    fn require_binaries() {
        assert!(binaries_present(), "prometheus and promtool are not installed: run `make observability-tools`");
    }

    fn rule_file(dir: &Path, name: &str, expr: &str) -> PathBuf {
        let path = dir.join(name);
        let text =
            format!("groups:\n  - name: selftest\n    rules:\n      - alert: DemoRequests\n        expr: {expr}\n");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn gone(pid: u32) -> bool {
        // SAFETY: signal 0 only checks that the process exists.
        unsafe { libc::kill(pid as libc::pid_t, 0) != 0 }
    }

    #[test]
    fn url_encoding_keeps_only_unreserved_characters() {
        assert_eq!(url_encode("sum(rate(x{a=\"b c\"}[5m]))"), "sum%28rate%28x%7Ba%3D%22b%20c%22%7D%5B5m%5D%29%29");
        assert_eq!(url_encode("a-b_c.d~é"), "a-b_c.d~%C3%A9");
        assert_eq!(duration(1000), "1s");
        assert_eq!(duration(500), "500ms");
    }

    #[test]
    fn scrapes_a_target_answers_queries_evaluates_rules_and_refuses_a_broken_query() {
        require_binaries();
        let target = serve("# TYPE demo_requests_total counter\ndemo_requests_total{team=\"a\"} 5\n");
        let rules = rule_file(&work_dir("prometheus-rules-selftest"), "rules.yaml", "demo_requests_total > 1");
        let p =
            Prometheus::start_with_rules("selftest", &[("demo".into(), target, "/metrics".into())], 1_000, &[rules])
                .unwrap();
        let pid = p.pid();
        p.wait_for_scrapes("demo", 2, Duration::from_secs(30)).unwrap();

        let data = p.query("demo_requests_total").unwrap();
        assert_eq!(data["resultType"], "vector", "{data}");
        assert_eq!(series_count(&data), 1, "{data}");
        assert_eq!(data["result"][0]["value"][1], "5", "{data}");
        assert_eq!(data["result"][0]["metric"]["team"], "a", "{data}");
        assert_eq!(series_count(&p.query("1 + 1").unwrap()), 1);
        assert_eq!(series_count(&p.query("demo_requests_total{team=\"nobody\"}").unwrap()), 0);
        let range = p.query_range("demo_requests_total", 10, 1).unwrap();
        assert_eq!(range["resultType"], "matrix", "{range}");

        let e = p.query("sum(").unwrap_err();
        assert!(e.contains("bad_data") && e.contains("parse error"), "{e}");

        // The rule loads and, with no `for`, fires at its next evaluation.
        let deadline = Instant::now() + Duration::from_secs(20);
        let alerts = loop {
            let a = p.alerts().unwrap();
            if a["alerts"].as_array().is_some_and(|a| a.iter().any(|a| a["state"] == "firing"))
                || Instant::now() > deadline
            {
                break a;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        assert_eq!(alerts["alerts"][0]["labels"]["alertname"], "DemoRequests", "{alerts}");
        assert_eq!(alerts["alerts"][0]["state"], "firing", "{alerts}");
        let rules = p.rules().unwrap();
        assert_eq!(rules["groups"][0]["rules"][0]["health"], "ok", "{rules}");

        drop(p);
        assert!(gone(pid), "prometheus {pid} still runs after drop");
    }

    #[test]
    fn an_unreachable_target_times_out_with_its_error() {
        require_binaries();
        let nobody = SocketAddr::from(([127, 0, 0, 1], free_port().unwrap()));
        let p = Prometheus::start("selftest-down", &[("down".into(), nobody, "/metrics".into())], 500).unwrap();
        let e = p.wait_for_scrapes("down", 1, Duration::from_secs(3)).unwrap_err();
        assert!(e.contains("job down"), "{e}");
    }

    #[test]
    fn promtool_accepts_good_rules_and_names_a_broken_expression() {
        require_binaries();
        let dir = work_dir("promtool-selftest");
        let good = rule_file(&dir, "good.yaml", "up == 0");
        let out = promtool_check_rules(&good).unwrap();
        assert!(out.contains("SUCCESS"), "{out}");
        let bad = rule_file(&dir, "bad.yaml", "sum(up");
        let e = promtool_check_rules(&bad).unwrap_err();
        assert!(e.contains("parse error") || e.contains("unclosed"), "{e}");

        // Prometheus itself refuses to start on it, and says why.
        let started = Instant::now();
        let e = match Prometheus::start_with_rules("selftest-bad", &[], 1_000, &[bad]) {
            Ok(p) => panic!("started on a broken rule file (pid {})", p.pid()),
            Err(e) => e,
        };
        assert!(e.contains("exited") && e.contains("bad.yaml"), "{e}");
        assert!(started.elapsed() < READY_WITHIN, "{:?}", started.elapsed());
    }
}
