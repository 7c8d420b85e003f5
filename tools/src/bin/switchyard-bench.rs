//! `make bench`: Switchyard's full routing + failover path beside plain Envoy, the mock provider
//! reached directly, measurement-only breakdown rows and LiteLLM proxy, side by side in one run,
//! one table.
//!
//! Method (what keeps the figures honest on a 2-core machine):
//! - The mock provider and the load generator are this binary in processes of their own
//!   (`switchyard-bench mock`, `switchyard-bench load ...`), one thread each, pinned to one core;
//!   the proxy under test (Envoy `--concurrency 1`, or LiteLLM) is pinned to the other. The
//!   mock keeps nothing of what it received.
//! - The proxy's CPU time per request comes from /proc (the figure to trust); the CPU time of the
//!   load generator and the mock is measured too, and each row says what bound it: the proxy's
//!   core, or the generator + mock core.
//! - Every proxy is warmed up on every load before measuring; rows run in a rotated order per
//!   round and per load, under load and at one connection alike; medians over the rounds.
//!
//! Env: BENCH_SECONDS (each loaded run, 2), BENCH_IDLE_SECONDS (each one-connection run, 1),
//! BENCH_WARMUP_SECONDS (0.5), BENCH_ROUNDS (3), BENCH_CONNECTIONS (32), BENCH_SIZES (bytes,
//! comma-separated, "1024,10240,102400"), BENCH_BREAKDOWN (1: the breakdown rows), BENCH_LITELLM
//! (1: the LiteLLM row, installing it on first use), BENCH_TRANSLATED (1: the full path translated,
//! an OpenAI caller served by Anthropic Messages endpoints), BENCH_RESPONSES (1: a Responses API
//! caller on the chat-completions endpoints, translated), BENCH_BEDROCK (1: Claude on Amazon Bedrock,
//! each attempt SigV4-signed by Envoy and the answer an AWS event stream decoded frame by frame: an
//! Anthropic caller, and an OpenAI caller translated), BENCH_LIMITS (1: the full path under a
//! mesh-wide token limit and under a spend limit, with Redis and the rate limit service on the generator's core), BENCH_NATIVE
//! (1: the full path on the native build, when `make native` built it), BENCH_RSS (1: the --concurrency 2 RSS
//! comparison), BENCH_OUT (where the report is also written, target/bench/results.md),
//! BENCH_NICE (scheduling priority of everything the bench starts, 0), BENCH_ALT_WASM (a second
//! module build: its full-path row beside the default build's), BENCH_ALT_NATIVE (the same for a
//! second native library), BENCH_SSE (0: the non-streaming loads only).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::BufRead;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_integration::envoy::{
    bootstrap, http_get, native_path, plain_bootstrap, repo_root, wasm_path, Build, ClusterSpec, Envoy, StackConfig,
};
use switchyard_integration::memory::NOOP_WASM;
use switchyard_integration::mesh::{free_port, RateLimitService, Redis};
use switchyard_integration::procfs::{cpu_us, rss_kib, stat_fields};
use switchyard_tools::floor::{floor_bootstrap, floor_module};
use switchyard_tools::load::{chat_body, responses_body, run, start_mock, LoadSpec};

/// LiteLLM proxy, pinned (the newest release whose `proxy` extra installs from the package index).
const LITELLM_VERSION: &str = "1.106.12";
const MODEL: &str = "bench/model";
const PATH: &str = "/v1/chat/completions";
/// The Responses API's path (the `responses` caller of `--api`).
const RESPONSES_PATH: &str = "/v1/responses";
/// Anthropic's Messages path (the `anthropic` caller of `--api`).
const MESSAGES_PATH: &str = "/v1/messages";
/// The caller's key (LiteLLM refuses to start without a master key; Envoy ignores it).
const CALLER_KEY: &str = "sk-bench-7d1e3a9c5b2f4680e1d3a5c7b9f20468";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or_default();
    let result = match args.first().map(String::as_str) {
        Some("mock") => mock_main(),
        Some("load") => load_main(rest),
        Some(other) => Err(format!("unknown mode {other:?} (modes: mock, load; none runs the bench)")),
        None => bench(),
    };
    match result {
        Ok(0) => {}
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("bench: {e}");
            std::process::exit(1);
        }
    }
}

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

fn env_on(name: &str) -> bool {
    std::env::var(name).map(|v| v.trim() != "0").unwrap_or(true)
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------------------------
// The two helper processes.

/// `switchyard-bench mock`: serves until killed; prints its port on the first line.
fn mock_main() -> Result<i32, String> {
    let rt = runtime()?;
    rt.block_on(async {
        let addr = start_mock(0).await.map_err(|e| format!("mock: {e}"))?;
        println!("{}", addr.port());
        std::future::pending::<()>().await;
        Ok(0)
    })
}

/// `switchyard-bench load --addr A --size N --stream 0|1 --connections N --seconds S [--api
/// chat|responses]`: one load run (chat completions requests, or the Responses API's); prints a
/// JSON summary, with this process's own CPU time.
fn load_main(args: &[String]) -> Result<i32, String> {
    let mut opts: HashMap<&str, &str> = HashMap::new();
    for pair in args.chunks(2) {
        if let [k, v] = pair {
            opts.insert(k.trim_start_matches("--"), v.as_str());
        }
    }
    let get = |k: &str| opts.get(k).copied().ok_or_else(|| format!("load: --{k} missing"));
    let addr: SocketAddr = get("addr")?.parse().map_err(|e| format!("load: --addr: {e}"))?;
    let size: usize = get("size")?.parse().map_err(|e| format!("load: --size: {e}"))?;
    let stream = get("stream")? == "1";
    let connections: usize = get("connections")?.parse().map_err(|e| format!("load: --connections: {e}"))?;
    let seconds: f64 = get("seconds")?.parse().map_err(|e| format!("load: --seconds: {e}"))?;
    let mut headers = vec![
        ("content-type".to_string(), "application/json".to_string()),
        ("authorization".to_string(), format!("Bearer {CALLER_KEY}")),
    ];
    let (path, body) = match opts.get("api").copied().unwrap_or("chat") {
        "chat" => (PATH, chat_body(MODEL, size, stream)),
        "responses" => (RESPONSES_PATH, responses_body(MODEL, size, stream)),
        // The chat body (model, max_tokens, a user message, stream) is a Messages body too.
        "anthropic" => {
            headers.push(("anthropic-version".into(), "2023-06-01".into()));
            (MESSAGES_PATH, chat_body(MODEL, size, stream))
        }
        other => return Err(format!("load: --api {other:?} (chat, responses or anthropic)")),
    };
    let spec = LoadSpec {
        addr,
        path: path.into(),
        headers,
        body,
        stream,
        connections,
        duration: Duration::from_secs_f64(seconds),
        request_timeout: Duration::from_secs(30),
    };
    let rt = runtime()?;
    let cpu0 = self_cpu_us();
    let r = rt.block_on(run(&spec));
    let cpu = self_cpu_us().saturating_sub(cpu0);
    let out = json!({
        "requests": r.requests, "errors": r.errors, "elapsed_us": r.elapsed.as_micros() as u64,
        "p50": r.percentile_us(0.50), "p99": r.percentile_us(0.99),
        "ttfb_p50": r.ttfb_percentile_us(0.50), "cpu_us": cpu, "first_error": r.first_error,
    });
    println!("{out}");
    Ok(0)
}

fn self_cpu_us() -> u64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    tv(u.ru_utime) + tv(u.ru_stime)
}

// ---------------------------------------------------------------------------------------------
// Processes: CPU pinning, CPU time and RSS from /proc, stopping exactly what we started.

fn cpu_set(core: usize) -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes within it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(core, &mut set) };
    set
}

/// Pins thread/process `tid` (0 = the calling thread) to `core`.
fn pin(tid: i32, core: usize) -> bool {
    let set = cpu_set(core);
    // SAFETY: the set is a valid cpu_set_t of the size given.
    unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}

/// BENCH_NICE: the scheduling priority of every process the bench starts (default 0; e.g. -10
/// gives the measured processes their cores back from other work on a shared machine).
fn nice_level() -> i32 {
    std::env::var("BENCH_NICE").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// With autogroup scheduling, nice only weighs within a session: BENCH_NICE also sets this
/// session's group (the bench and everything it starts) against the machine's other sessions,
/// and puts the previous value back when the bench ends.
struct AutogroupNice(Option<String>);

impl AutogroupNice {
    fn set(nice: i32) -> AutogroupNice {
        if nice == 0 {
            return AutogroupNice(None);
        }
        let path = "/proc/self/autogroup";
        // "/autogroup-252 nice 0"
        let before = std::fs::read_to_string(path).ok().and_then(|s| s.split_whitespace().last().map(str::to_string));
        if before.is_some() && std::fs::write(path, nice.to_string()).is_ok() {
            AutogroupNice(before)
        } else {
            eprintln!("bench: could not set this session's autogroup nice (BENCH_NICE applies within it only)");
            AutogroupNice(None)
        }
    }
}

impl Drop for AutogroupNice {
    fn drop(&mut self) {
        if let Some(v) = &self.0 {
            let _ = std::fs::write("/proc/self/autogroup", v);
        }
    }
}

/// Pins every thread of `pid` (and of its descendants) to `core`, at BENCH_NICE.
fn pin_tree(pid: u32, core: usize) {
    let nice = nice_level();
    for p in tree(pid) {
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for t in tasks.flatten() {
                if let Ok(tid) = t.file_name().to_string_lossy().parse::<i32>() {
                    pin(tid, core);
                    if nice != 0 {
                        // SAFETY: changes the priority of a thread we started only.
                        unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
                    }
                }
            }
        }
    }
}

/// The cores this process may run on.
fn allowed_cores() -> Vec<usize> {
    // SAFETY: sched_getaffinity writes within the set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
}

/// `pid` and all its descendants.
fn tree(pid: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            if let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() {
                if let Some(ppid) = stat_fields(p).get(1).and_then(|v| v.parse::<u32>().ok()) {
                    children.entry(ppid).or_default().push(p);
                }
            }
        }
    }
    let (mut out, mut todo, mut seen) = (Vec::new(), vec![pid], HashSet::new());
    while let Some(p) = todo.pop() {
        if seen.insert(p) {
            out.push(p);
            todo.extend(children.get(&p).cloned().unwrap_or_default());
        }
    }
    out
}

/// (busy, total) ticks of one CPU so far, from /proc/stat.
fn core_ticks(core: usize) -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let name = format!("cpu{core}");
    let Some(line) = stat.lines().find(|l| l.split_whitespace().next() == Some(name.as_str())) else { return (0, 0) };
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// Share of `core` that was busy between two `core_ticks` readings.
fn busy_share(a: (u64, u64), b: (u64, u64)) -> Option<f64> {
    let total = b.1.saturating_sub(a.1);
    (total > 0).then(|| b.0.saturating_sub(a.0) as f64 / total as f64)
}

fn tree_cpu_us(pid: u32) -> u64 {
    tree(pid).into_iter().map(cpu_us).sum()
}

fn tree_rss_kib(pid: u32) -> u64 {
    tree(pid).into_iter().map(rss_kib).sum()
}

/// Makes `cmd`'s process die with this thread, optionally pinned to `core` and leading a process
/// group of its own (so its own children can be stopped with it).
fn guard_child(cmd: &mut Command, core: Option<usize>, own_group: bool) {
    let nice = nice_level();
    // SAFETY: prctl, setpgid, setpriority and sched_setaffinity are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if nice != 0 {
                libc::setpriority(libc::PRIO_PROCESS, 0, nice);
            }
            if own_group {
                libc::setpgid(0, 0);
            }
            if let Some(c) = core {
                let set = cpu_set(c);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            }
            Ok(())
        });
    }
}

/// A helper process we started, stopped by its PID (and its process group, when it leads one)
/// when dropped, on success and on error alike.
struct Helper {
    child: Child,
    group: bool,
}

impl Drop for Helper {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        let target = if self.group { -pid } else { pid };
        // SAFETY: signals only the process (group) we started.
        unsafe { libc::kill(target, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                if self.group {
                    unsafe { libc::kill(target, libc::SIGKILL) };
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        unsafe { libc::kill(target, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// The rows.

enum Target {
    /// Reached at `addr`; `pid` is the proxy whose CPU and RSS are measured (none: direct).
    Up {
        addr: SocketAddr,
        pid: Option<u32>,
    },
    Down(String),
}

struct Row {
    name: String,
    target: Target,
    /// The API the row's requests speak (`Caller::Chat` but for the Responses row).
    caller: Caller,
}

/// The API a row's load generator speaks.
#[derive(Clone, Copy, PartialEq)]
enum Caller {
    Chat,
    Responses,
    Anthropic,
}

impl Caller {
    fn arg(self) -> &'static str {
        match self {
            Caller::Chat => "chat",
            Caller::Responses => "responses",
            Caller::Anthropic => "anthropic",
        }
    }
}

/// Keeps each row's processes alive for the run (dropping stops them).
#[derive(Default)]
struct Keep {
    envoys: Vec<Envoy>,
    helpers: Vec<Helper>,
}

/// Starts an Envoy with `concurrency` workers, all its threads on `core`.
fn start_envoy(boot: &Value, tag: &str, concurrency: u32, cores: &Cores) -> Result<Envoy, String> {
    // Threads Envoy creates inherit the mask of the thread that spawned it; pin them all after too.
    if let Some(c) = cores.proxy {
        pin(0, c);
    }
    let e = Envoy::start_bootstrap(boot, tag, &[], concurrency);
    if let Some(c) = cores.client {
        pin(0, c);
    }
    let e = e?;
    if let Some(c) = cores.proxy {
        pin_tree(e.pid(), c);
    }
    Ok(e)
}

struct Cores {
    proxy: Option<usize>,
    client: Option<usize>,
}

/// The Switchyard stack the tests and the demo use (the same generator), two providers on the mock.
fn switchyard_config(port: u16) -> StackConfig {
    let catalog = json!({
        "providers": {
            "fast": {"cluster": "p_fast", "authority": "fast.example", "credential": {"value": "k1"}},
            "cheap": {"cluster": "p_cheap", "authority": "cheap.example", "credential": {"value": "k2"}}
        },
        "models": {MODEL: {"endpoints": [
            {"provider": "fast", "upstream_model": "fast-model", "pricing": {"prompt": 2, "completion": 2}},
            {"provider": "cheap", "upstream_model": "cheap-model", "pricing": {"prompt": 1, "completion": 1}}
        ]}}
    });
    StackConfig::new(
        catalog,
        vec![ClusterSpec { name: "p_fast".into(), port }, ClusterSpec { name: "p_cheap".into(), port }],
        None,
    )
}

/// The full path for an OpenAI caller whose model only an Anthropic Messages endpoint serves:
/// the request, the answer and the stream translated (`docs/translation.md`).
fn translated_config(port: u16) -> StackConfig {
    let mut cfg = switchyard_config(port);
    for p in ["fast", "cheap"] {
        cfg.plugin_config["providers"][p]["apis"] = json!({"anthropic": {}});
    }
    cfg
}

/// Claude on Amazon Bedrock (`kind: bedrock`, no key): Envoy's `aws_request_signing` signs each
/// attempt's final path and body (SigV4 over the body's SHA-256, the test kit's fake keys), the
/// answer is an AWS event stream the per-attempt filter decodes frame by frame.
fn bedrock_config(port: u16) -> StackConfig {
    let mut cfg = switchyard_config(port);
    for p in ["fast", "cheap"] {
        let provider = &mut cfg.plugin_config["providers"][p];
        provider["kind"] = json!("bedrock");
        provider["authority"] = json!("bedrock-runtime.us-east-1.amazonaws.com");
        provider["apis"] = json!({"anthropic": {}});
        if let Some(o) = provider.as_object_mut() {
            o.remove("credential");
        }
    }
    // Claude's ids (an id that is not Anthropic's goes to Converse, which this row does not
    // measure).
    if let Some(endpoints) = cfg.plugin_config["models"][MODEL]["endpoints"].as_array_mut() {
        for (i, e) in endpoints.iter_mut().enumerate() {
            e["upstream_model"] = json!(format!("us.anthropic.claude-bench-{i}-v1:0"));
        }
    }
    cfg
}

/// The full path on the native build (`make native`).
fn native_config(port: u16) -> StackConfig {
    let mut cfg = switchyard_config(port);
    cfg.build = Build::Native;
    cfg
}

/// Breakdown (measurement only): `cfg` as it was before first-attempt clusters, every attempt
/// through the per-attempt (upstream) filter of its build.
fn every_attempt_filtered(mut cfg: StackConfig) -> Result<Value, String> {
    cfg.first_attempt_clusters = false;
    let boot = bootstrap(&cfg);
    if boot.to_string().contains("-first") {
        return Err("this build's configuration has no way to turn first-attempt clusters off".into());
    }
    Ok(boot)
}

/// Breakdown (measurement only): the decision filter and the first-attempt hook, routed requests
/// sent to one static first-attempt cluster (no metadata step, no priority groups).
fn downstream_wasm_only(boot: &Value) -> Result<Value, String> {
    let mut b = boot.clone();
    let twin = b
        .pointer("/static_resources/clusters")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find_map(|c| c["name"].as_str().filter(|n| n.ends_with("-first")).map(str::to_string)))
        .ok_or("no first-attempt cluster in this build's configuration")?;
    let hcm = b
        .pointer_mut("/static_resources/listeners/0/filter_chains/0/filters/0/typed_config")
        .ok_or("no HTTP connection manager")?;
    if let Some(filters) = hcm["http_filters"].as_array_mut() {
        filters.retain(|f| {
            let name = f["name"].as_str().unwrap_or("");
            [
                switchyard_integration::envoy::DECISION_FILTER,
                "envoy.filters.http.router",
                "envoy.filters.http.compressor",
            ]
            .contains(&name)
        });
    }
    let mut rerouted = 0;
    if let Some(vhosts) = hcm.pointer_mut("/route_config/virtual_hosts").and_then(Value::as_array_mut) {
        for vh in vhosts {
            if let Some(routes) = vh["routes"].as_array_mut() {
                for r in routes {
                    if r["route"].get("inline_cluster_specifier_plugin").is_some() {
                        r["route"] = json!({"cluster": twin, "timeout": "300s",
                            "host_rewrite_header": switchyard::wiring::AUTHORITY_HEADER});
                        rerouted += 1;
                    }
                }
            }
        }
    }
    if rerouted == 0 {
        return Err("no priority-group route in this build's configuration".into());
    }
    Ok(b)
}

/// Installs LiteLLM proxy (pinned) into its own venv on first use: `.work/litellm-venv`.
fn ensure_litellm(log: &Path) -> Result<PathBuf, String> {
    let venv = repo_root().join(".work/litellm-venv");
    let bin = venv.join("bin/litellm");
    let stamp = venv.join(format!(".installed-{LITELLM_VERSION}"));
    if bin.exists() && stamp.exists() {
        return Ok(bin);
    }
    eprintln!("bench: installing LiteLLM proxy {LITELLM_VERSION} into {} (first run only)", venv.display());
    let out = std::fs::File::create(log).map_err(|e| e.to_string())?;
    let steps: Vec<Vec<String>> = vec![
        vec!["python3".into(), "-m".into(), "venv".into(), venv.to_string_lossy().into()],
        vec![
            venv.join("bin/pip").to_string_lossy().into(),
            "install".into(),
            "-q".into(),
            "--disable-pip-version-check".into(),
            format!("litellm[proxy]=={LITELLM_VERSION}"),
        ],
    ];
    for step in steps {
        let (prog, args) = step.split_first().ok_or("empty step")?;
        let mut cmd = Command::new(prog);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|e| e.to_string())?)
            .stderr(out.try_clone().map_err(|e| e.to_string())?);
        guard_child(&mut cmd, None, true);
        let mut h = Helper { child: cmd.spawn().map_err(|e| format!("{prog}: {e}"))?, group: true };
        let deadline = Instant::now() + Duration::from_secs(480);
        loop {
            if let Ok(Some(status)) = h.child.try_wait() {
                if !status.success() {
                    let tail = std::fs::read_to_string(log).unwrap_or_default();
                    let last = tail.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").to_string();
                    return Err(format!("`{} {}` failed: {last}", prog, args.join(" ")));
                }
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("`{prog}` did not finish in 8 minutes"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        drop(h);
    }
    std::fs::write(&stamp, "").map_err(|e| e.to_string())?;
    Ok(bin)
}

/// LiteLLM proxy in front of the same mock, two deployments (the same two providers as
/// Switchyard's catalog) with a fallback from the first to the second.
fn start_litellm(dir: &Path, mock_port: u16, cores: &Cores) -> Result<(Helper, SocketAddr), String> {
    let bin = ensure_litellm(&dir.join("litellm-install.log"))?;
    let api_base = format!("http://127.0.0.1:{mock_port}/v1");
    let config = json!({
        "model_list": [
            {"model_name": MODEL, "litellm_params": {"model": "openai/fast-model", "api_base": api_base, "api_key": "k1"}},
            {"model_name": "bench/model-cheap", "litellm_params": {"model": "openai/cheap-model", "api_base": api_base, "api_key": "k2"}}
        ],
        "litellm_settings": {"num_retries": 0, "request_timeout": 60, "fallbacks": [{MODEL: ["bench/model-cheap"]}],
                              "set_verbose": false, "json_logs": false},
        "general_settings": {"master_key": CALLER_KEY}
    });
    let cfg_path = dir.join("litellm.yaml");
    std::fs::write(&cfg_path, config.to_string()).map_err(|e| e.to_string())?;
    let port = free_port()?;
    let log = std::fs::File::create(dir.join("litellm.log")).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(&bin);
    cmd.arg("--config")
        .arg(&cfg_path)
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--num_workers", "1", "--telemetry", "False"])
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("LITELLM_LOG", "ERROR")
        .env("NO_DOCS", "True")
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    guard_child(&mut cmd, cores.proxy, true);
    let mut h = Helper { child: cmd.spawn().map_err(|e| format!("litellm: {e}"))?, group: true };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = h.child.try_wait() {
            let log = std::fs::read_to_string(dir.join("litellm.log")).unwrap_or_default();
            let last = log.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
            return Err(format!("litellm exited with {status}: {last}"));
        }
        if let Ok((200, _)) = http_get(addr, "/health/liveliness") {
            if let Some(c) = cores.proxy {
                pin_tree(h.child.id(), c);
            }
            return Ok((h, addr));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Err(format!("litellm not ready after 120 s (log: {})", dir.join("litellm.log").display()))
}

// ---------------------------------------------------------------------------------------------
// Measuring.

#[derive(Clone, Copy)]
struct Load {
    size: usize,
    stream: bool,
}

impl Load {
    fn label(&self) -> String {
        let size = if self.size % 1024 == 0 { format!("{} KB", self.size / 1024) } else { format!("{} B", self.size) };
        format!("{size}{}", if self.stream { " SSE" } else { "" })
    }
}

/// One load run's figures.
#[derive(Clone, Debug, Default)]
struct Sample {
    requests: u64,
    errors: u64,
    rps: f64,
    p50: f64,
    p99: f64,
    ttfb_p50: f64,
    /// Proxy CPU per served request, us (None: no proxy).
    cpu_per_req: Option<f64>,
    /// Share of one core the proxy used.
    proxy_core: Option<f64>,
    /// Share of one core the load generator and the mock used together.
    client_core: f64,
    /// The load generator's part of it.
    gen_core: f64,
    /// Share of the proxy's core and of the generator's core that other processes used
    /// (busy share from /proc/stat minus ours): a busy machine disturbs the figures.
    others_proxy_core: Option<f64>,
    others_client_core: Option<f64>,
    first_error: Option<String>,
}

/// RSS at `--concurrency 2` after load, KiB: plain Envoy, Switchyard, and Switchyard's
/// configuration with a no-op module (V8's own cost).
#[derive(Clone, Copy)]
struct RssC2 {
    plain: u64,
    switchyard: u64,
    noop: u64,
    /// The native build's RSS, when its row ran.
    native: Option<u64>,
}

struct Bench {
    exe: PathBuf,
    cores: Cores,
    mock_pid: u32,
}

impl Bench {
    fn load(
        &self,
        addr: SocketAddr,
        pid: Option<u32>,
        load: Load,
        caller: Caller,
        connections: usize,
        seconds: f64,
    ) -> Result<Sample, String> {
        let proxy0 = pid.map(tree_cpu_us);
        let mock0 = cpu_us(self.mock_pid);
        let busy0 = (self.cores.proxy.map(core_ticks), self.cores.client.map(core_ticks));
        let mut cmd = Command::new(&self.exe);
        cmd.arg("load")
            .args(["--addr", &addr.to_string(), "--size", &load.size.to_string()])
            .args(["--stream", if load.stream { "1" } else { "0" }])
            .args(["--api", caller.arg()])
            .args(["--connections", &connections.to_string(), "--seconds", &seconds.to_string()])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit());
        guard_child(&mut cmd, self.cores.client, false);
        let out = cmd.output().map_err(|e| format!("load generator: {e}"))?;
        let mock1 = cpu_us(self.mock_pid);
        let proxy1 = pid.map(tree_cpu_us);
        let busy1 = (self.cores.proxy.map(core_ticks), self.cores.client.map(core_ticks));
        let v: Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("load generator output ({e}): {}", String::from_utf8_lossy(&out.stdout)))?;
        let n = |k: &str| v[k].as_f64().unwrap_or(0.0);
        let elapsed_us = n("elapsed_us").max(1.0);
        let requests = v["requests"].as_u64().unwrap_or(0);
        let proxy_cpu = match (proxy0, proxy1) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64),
            _ => None,
        };
        let proxy_core = proxy_cpu.map(|c| c / elapsed_us);
        let gen_core = n("cpu_us") / elapsed_us;
        let client_core = gen_core + mock1.saturating_sub(mock0) as f64 / elapsed_us;
        let others = |a: Option<(u64, u64)>, b: Option<(u64, u64)>, ours: f64| {
            a.zip(b).and_then(|(a, b)| busy_share(a, b)).map(|busy| (busy - ours).max(0.0))
        };
        Ok(Sample {
            others_proxy_core: others(busy0.0, busy1.0, proxy_core.unwrap_or(0.0)),
            others_client_core: others(busy0.1, busy1.1, client_core),
            requests,
            errors: v["errors"].as_u64().unwrap_or(0),
            rps: requests as f64 / (elapsed_us / 1e6),
            p50: n("p50"),
            p99: n("p99"),
            ttfb_p50: n("ttfb_p50"),
            cpu_per_req: proxy_cpu.filter(|_| requests > 0).map(|c| c / requests as f64),
            proxy_core,
            client_core,
            gen_core,
            first_error: v["first_error"].as_str().map(str::to_string),
        })
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// All samples of one row on one load.
#[derive(Default)]
struct Cell {
    loaded: Vec<Sample>,
    idle: Vec<Sample>,
}

/// Medians of a cell.
#[derive(Clone, Copy, Default)]
struct Summary {
    rps: f64,
    p50: f64,
    p99: f64,
    idle_p50: f64,
    idle_ttfb: f64,
    cpu: Option<f64>,
    proxy_core: Option<f64>,
    client_core: f64,
    gen_core: f64,
    others_proxy_core: Option<f64>,
    others_client_core: Option<f64>,
    errors: u64,
    measured: bool,
}

impl Cell {
    fn summary(&self) -> Summary {
        let m = |f: &dyn Fn(&Sample) -> f64, v: &[Sample]| median(v.iter().map(f).collect()).unwrap_or(0.0);
        Summary {
            rps: m(&|s| s.rps, &self.loaded),
            p50: m(&|s| s.p50, &self.loaded),
            p99: m(&|s| s.p99, &self.loaded),
            idle_p50: m(&|s| s.p50, &self.idle),
            idle_ttfb: m(&|s| s.ttfb_p50, &self.idle),
            cpu: median(self.loaded.iter().filter_map(|s| s.cpu_per_req).collect()),
            proxy_core: median(self.loaded.iter().filter_map(|s| s.proxy_core).collect()),
            client_core: m(&|s| s.client_core, &self.loaded),
            gen_core: m(&|s| s.gen_core, &self.loaded),
            others_proxy_core: median(self.loaded.iter().filter_map(|s| s.others_proxy_core).collect()),
            others_client_core: median(self.loaded.iter().filter_map(|s| s.others_client_core).collect()),
            errors: self.loaded.iter().chain(&self.idle).map(|s| s.errors).sum(),
            measured: !self.loaded.is_empty(),
        }
    }

    fn first_error(&self) -> Option<&str> {
        self.loaded.iter().chain(&self.idle).find_map(|s| s.first_error.as_deref())
    }
}

/// Saturated: above this share of a core.
const SATURATED: f64 = 0.90;

fn bound_by(s: &Summary) -> String {
    let client = s.client_core >= SATURATED;
    let proxy = s.proxy_core.is_some_and(|p| p >= SATURATED);
    let shared = s.proxy_core.zip(s.others_proxy_core).is_some_and(|(p, o)| p + o >= SATURATED);
    match (proxy, client) {
        (true, false) => "proxy".into(),
        (false, true) => "**gen+mock**".into(),
        (true, true) => "**both**".into(),
        (false, false) if shared => "**proxy core shared with others**".into(),
        (false, false) => "neither (latency)".into(),
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.0}%", v * 100.0))
}

fn signed(v: f64, digits: usize) -> String {
    format!("{}{:.*}", if v >= 0.0 { "+" } else { "-" }, digits, v.abs())
}

fn bench() -> Result<i32, String> {
    let seconds = env_f64("BENCH_SECONDS", 2.0);
    let idle_seconds = env_f64("BENCH_IDLE_SECONDS", 1.0);
    let warmup = env_f64("BENCH_WARMUP_SECONDS", 0.5);
    let rounds = env_f64("BENCH_ROUNDS", 3.0).max(1.0) as usize;
    let connections = env_f64("BENCH_CONNECTIONS", 32.0).max(1.0) as usize;
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .unwrap_or_else(|_| "1024,10240,102400".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    // BENCH_SSE=0: the non-streaming loads only (a quicker look at a JSON target).
    let sse = env_on("BENCH_SSE");
    let loads: Vec<Load> = sizes
        .iter()
        .flat_map(|&size| [Load { size, stream: false }, Load { size, stream: true }])
        .filter(|l| sse || !l.stream)
        .collect();
    let started = Instant::now();

    let allowed = allowed_cores();
    let cores = match allowed.as_slice() {
        [a, b, ..] => Cores { proxy: Some(*a), client: Some(*b) },
        _ => Cores { proxy: None, client: None },
    };
    if let Some(c) = cores.client {
        pin(0, c);
    }
    let _autogroup = AutogroupNice::set(nice_level());
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = repo_root().join(format!(".work/bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;

    // The mock, in its own process on the generator's core.
    let mut cmd = Command::new(&exe);
    cmd.arg("mock").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    guard_child(&mut cmd, cores.client, false);
    let mut mock = Helper { child: cmd.spawn().map_err(|e| format!("mock: {e}"))?, group: false };
    let mut line = String::new();
    if let Some(out) = mock.child.stdout.take() {
        std::io::BufReader::new(out).read_line(&mut line).map_err(|e| format!("mock: {e}"))?;
    }
    let mock_port: u16 = line.trim().parse().map_err(|_| format!("mock did not say its port: {line:?}"))?;
    let mock_addr = SocketAddr::from(([127, 0, 0, 1], mock_port));
    let bench = Bench { exe, cores, mock_pid: mock.child.id() };

    // The rows.
    let mut keep = Keep::default();
    let mut rows: Vec<Row> = vec![Row {
        name: "direct to the mock (no proxy)".into(),
        target: Target::Up { addr: mock_addr, pid: None },
        caller: Caller::Chat,
    }];
    let add_envoy = |rows: &mut Vec<Row>, keep: &mut Keep, name: &str, boot: Result<Value, String>, tag: &str| {
        let target = match boot.and_then(|b| start_envoy(&b, tag, 1, &bench.cores)) {
            Ok(e) => {
                let t = Target::Up { addr: e.addr(), pid: Some(e.pid()) };
                keep.envoys.push(e);
                t
            }
            Err(e) => Target::Down(e.lines().next().unwrap_or("").to_string()),
        };
        rows.push(Row { name: name.into(), target, caller: Caller::Chat });
    };
    let plain_boot = plain_bootstrap(&ClusterSpec { name: "provider".into(), port: mock_port }, 0, 0);
    add_envoy(&mut rows, &mut keep, "plain Envoy (router only)", Ok(plain_boot.clone()), "bench-plain");
    let sy_boot = bootstrap(&switchyard_config(mock_port));
    add_envoy(&mut rows, &mut keep, FULL_ROW, Ok(sy_boot.clone()), "bench-switchyard");
    if env_on("BENCH_NATIVE") && native_path().exists() {
        // The same filters and configuration as the native dynamic module (`make native`).
        add_envoy(&mut rows, &mut keep, NATIVE_ROW, Ok(bootstrap(&native_config(mock_port))), "bench-native");
        // The wiring question for the native build: with a per-attempt filter this cheap, are the
        // first-attempt twin clusters (and their hook) still worth their configuration?
        let boot = every_attempt_filtered(native_config(mock_port));
        add_envoy(&mut rows, &mut keep, NATIVE_EVERY_ATTEMPT_ROW, boot, "bench-native-every-attempt");
    }
    // BENCH_ALT_NATIVE=<library>: the native full path with another build of the library, side by
    // side with the default one in the same run (a change's A/B on a machine too noisy to compare
    // runs).
    if let Some(alt) = std::env::var_os("BENCH_ALT_NATIVE").map(PathBuf::from) {
        let mut cfg = native_config(mock_port);
        let name = format!("Switchyard full path (native), {}", alt.display());
        let boot = if alt.is_file() {
            cfg.native = alt;
            Ok(bootstrap(&cfg))
        } else {
            Err(format!("{} not found", alt.display()))
        };
        add_envoy(&mut rows, &mut keep, &name, boot, "bench-native-alt");
    }
    // BENCH_ALT_WASM=<module>: the same full path with another build of the module (e.g. other
    // optimization settings), side by side with the default build in the same run.
    if let Some(alt) = std::env::var_os("BENCH_ALT_WASM").map(PathBuf::from) {
        let mut cfg = switchyard_config(mock_port);
        let name = format!("Switchyard full path, {}", alt.display());
        let boot = if alt.is_file() {
            cfg.wasm = alt;
            Ok(bootstrap(&cfg))
        } else {
            Err(format!("{} not found", alt.display()))
        };
        add_envoy(&mut rows, &mut keep, &name, boot, "bench-switchyard-alt");
    }
    if env_on("BENCH_TRANSLATED") {
        let boot = bootstrap(&translated_config(mock_port));
        add_envoy(
            &mut rows,
            &mut keep,
            "Switchyard translated (OpenAI caller, Anthropic endpoint)",
            Ok(boot),
            "bench-translated",
        );
    }
    if env_on("BENCH_RESPONSES") {
        // A Responses API caller on the same chat-completions endpoints: the request, the answer
        // and the stream translated (`docs/translation.md`, "Responses caller").
        add_envoy(
            &mut rows,
            &mut keep,
            "Switchyard Responses (Responses caller, chat endpoint)",
            Ok(bootstrap(&switchyard_config(mock_port))),
            "bench-responses",
        );
        if let Some(row) = rows.last_mut() {
            row.caller = Caller::Responses;
        }
    }
    if env_on("BENCH_BEDROCK") {
        // Beside the plain full path: the same routing with SigV4 signing and event-stream
        // decoding, for an Anthropic caller (the stream's events unwrapped) and an OpenAI caller
        // (translated as well).
        for (name, caller, tag) in [
            (BEDROCK_ROW, Caller::Anthropic, "bench-bedrock"),
            (BEDROCK_TRANSLATED_ROW, Caller::Chat, "bench-bedrock-openai"),
        ] {
            add_envoy(&mut rows, &mut keep, name, Ok(bootstrap(&bedrock_config(mock_port))), tag);
            if let Some(row) = rows.last_mut() {
                row.caller = caller;
            }
        }
    }
    if env_on("BENCH_BREAKDOWN") {
        // The floor of the shape (a Wasm body router that parses and decides nothing), request
        // side only and with the answer: the gap to the full path is Switchyard's own.
        let floor = floor_module();
        for (name, answer, tag) in [
            ("- floor: a Wasm filter holding and rewriting the request body", false, "bench-floor"),
            ("- floor + the answer held and rewritten, three headers", true, "bench-floor-answer"),
        ] {
            let boot = floor.clone().and_then(|m| floor_bootstrap(&plain_boot, &m, answer));
            add_envoy(&mut rows, &mut keep, name, boot, tag);
        }
        add_envoy(
            &mut rows,
            &mut keep,
            "- every attempt through the per-attempt Wasm",
            every_attempt_filtered(switchyard_config(mock_port)),
            "bench-every-attempt",
        );
        add_envoy(
            &mut rows,
            &mut keep,
            "- decision filter + first-attempt hook, static route",
            downstream_wasm_only(&sy_boot),
            "bench-wasm-only",
        );
    }
    // The full path under a mesh-wide token limit that never refuses: an admission call at the
    // headers and a settlement after the answer, to a rate limit service (Limitador on Redis)
    // on the generator's core.
    let mut mesh_parts: Option<(Redis, RateLimitService)> = None;
    if env_on("BENCH_LIMITS") {
        let boot = (|| -> Result<StackConfig, String> {
            let mut cfg = switchyard_config(mock_port);
            // The service knows both limits; the token row's Envoy applies the token limit only
            // (the spend row's, below, the spend limit only).
            cfg.plugin_config["rate_limits"] = json!({"service": {"cluster": "switchyard_ratelimit"},
                "limits": {"bench-tokens": {"tokens": 4_000_000_000u64, "window": "hour"},
                           "bench-spend": {"spend_usd": 100_000u64, "window": "hour"}}});
            let limits =
                switchyard_integration::ratelimit::service_config(&cfg.plugin_config).ok_or("no rate_limits")?;
            if let Some(l) = cfg.plugin_config["rate_limits"]["limits"].as_object_mut() {
                l.remove("bench-spend");
            }
            let redis = Redis::start("bench")?;
            let service = RateLimitService::start("bench", &redis.url(), &limits)?;
            if let Some(c) = bench.cores.client {
                redis.pid().into_iter().chain(service.pid()).for_each(|p| pin_tree(p, c));
            }
            cfg.rate_limit_service = Some(("127.0.0.1".into(), service.addr.port()));
            mesh_parts = Some((redis, service));
            Ok(cfg)
        })();
        let native = boot.as_ref().ok().filter(|_| env_on("BENCH_NATIVE") && native_path().exists()).map(|cfg| {
            let mut n = cfg.clone();
            n.build = Build::Native;
            bootstrap(&n)
        });
        // The same path under a spend limit (reservations priced like `usage.cost`).
        let spend = boot.as_ref().ok().map(|cfg| {
            let mut c = cfg.clone();
            c.plugin_config["rate_limits"]["limits"] =
                json!({"bench-spend": {"spend_usd": 100_000u64, "window": "hour"}});
            bootstrap(&c)
        });
        add_envoy(&mut rows, &mut keep, LIMITS_ROW, boot.map(|c| bootstrap(&c)), "bench-limits");
        if let Some(b) = spend {
            add_envoy(&mut rows, &mut keep, SPEND_ROW, Ok(b), "bench-spend");
        }
        // The same limit on the native build (same service and Redis), beside its own full path.
        if let Some(b) = native {
            add_envoy(&mut rows, &mut keep, NATIVE_LIMITS_ROW, Ok(b), "bench-native-limits");
        }
    }
    let litellm_name = format!("LiteLLM proxy {LITELLM_VERSION} (1 worker)");
    if env_on("BENCH_LITELLM") {
        let target = match start_litellm(&dir, mock_port, &bench.cores) {
            Ok((h, addr)) => {
                let pid = h.child.id();
                keep.helpers.push(h);
                Target::Up { addr, pid: Some(pid) }
            }
            Err(e) => Target::Down(format!("not available: {e}")),
        };
        rows.push(Row { name: litellm_name.clone(), target, caller: Caller::Chat });
    }
    let plain_idx = 1;
    let sy_idx = 2;
    for (i, r) in rows.iter().enumerate() {
        if let Target::Down(why) = &r.target {
            eprintln!("bench: row {:?} is not measured: {why}", r.name);
            if i == plain_idx || i == sy_idx {
                return Err(format!("{} did not start: {why}", r.name));
            }
        }
    }
    let up: Vec<(usize, SocketAddr, Option<u32>)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r.target {
            Target::Up { addr, pid } => Some((i, addr, pid)),
            Target::Down(_) => None,
        })
        .collect();

    // Warm-up: every proxy on every load (V8 tiers the module up, pools fill).
    eprintln!("bench: warming up {} rows on {} loads", up.len(), loads.len());
    for &load in &loads {
        for &(i, addr, pid) in &up {
            let s = bench.load(addr, pid, load, rows[i].caller, connections, warmup)?;
            if s.requests == 0 {
                eprintln!(
                    "bench: warm-up of {:?} on {} served nothing: {:?}",
                    rows[i].name,
                    load.label(),
                    s.first_error
                );
            }
        }
    }

    // Rounds: each load, rows in an order rotated per round and per load; loaded runs, then the
    // same rotation at one connection.
    let mut cells: Vec<Vec<Cell>> =
        (0..loads.len()).map(|_| (0..rows.len()).map(|_| Cell::default()).collect()).collect();
    for round in 0..rounds {
        eprintln!("bench: round {}/{rounds} ({:.0} s so far)", round + 1, started.elapsed().as_secs_f64());
        for (li, &load) in loads.iter().enumerate() {
            let mut order = up.clone();
            if !order.is_empty() {
                let k = (round + li) % order.len();
                order.rotate_left(k);
            }
            for &(i, addr, pid) in &order {
                let s = bench.load(addr, pid, load, rows[i].caller, connections, seconds)?;
                cells[li][i].loaded.push(s);
            }
            for &(i, addr, pid) in order.iter().rev() {
                let s = bench.load(addr, pid, load, rows[i].caller, 1, idle_seconds)?;
                cells[li][i].idle.push(s);
            }
        }
    }
    let summaries: Vec<Vec<Summary>> = cells.iter().map(|row| row.iter().map(Cell::summary).collect()).collect();
    let rss: Vec<Option<u64>> = rows
        .iter()
        .map(|r| match r.target {
            Target::Up { pid: Some(p), .. } => Some(tree_rss_kib(p)),
            _ => None,
        })
        .collect();

    // RSS at --concurrency 2 (the target's setting), after load on both workers; the same
    // configuration with a no-op Wasm module in Switchyard's place shows V8's own share of it.
    let rss_c2 = if env_on("BENCH_RSS") {
        eprintln!("bench: RSS at --concurrency 2");
        let noop_path = repo_root().join(".work").join(format!("bench-noop-{}.wasm", std::process::id()));
        std::fs::write(&noop_path, NOOP_WASM).map_err(|e| format!("write {}: {e}", noop_path.display()))?;
        let mut noop_cfg = switchyard_config(mock_port);
        noop_cfg.wasm = noop_path.clone();
        let noop_boot = bootstrap(&noop_cfg);
        // The native build's figure too when its row ran (the target is per build).
        let native_boot =
            (env_on("BENCH_NATIVE") && native_path().exists()).then(|| bootstrap(&native_config(mock_port)));
        let mut rss = Vec::new();
        let mut runs =
            vec![(&plain_boot, "bench-plain-c2"), (&sy_boot, "bench-switchyard-c2"), (&noop_boot, "bench-noop-c2")];
        if let Some(b) = &native_boot {
            runs.push((b, "bench-native-c2"));
        }
        for (boot, tag) in runs {
            let e = start_envoy(boot, tag, 2, &bench.cores)?;
            for load in [
                Load { size: 1024, stream: false },
                Load { size: 1024, stream: true },
                Load { size: 102_400, stream: false },
            ] {
                // (The no-op module routes nothing: its requests end in the catch-all 404.)
                bench.load(e.addr(), Some(e.pid()), load, Caller::Chat, connections, seconds.min(2.0))?;
            }
            rss.push(rss_kib(e.pid()));
        }
        let _ = std::fs::remove_file(&noop_path);
        let at = |i: usize| rss.get(i).copied().unwrap_or(0);
        Some(RssC2 { plain: at(0), switchyard: at(1), noop: at(2), native: rss.get(3).copied() })
    } else {
        None
    };
    drop(keep);
    drop(mock);

    let report = render(
        &rows,
        &loads,
        &cells,
        &summaries,
        &rss,
        rss_c2,
        Params { seconds, idle_seconds, warmup, rounds, connections, cores: &bench.cores, elapsed: started.elapsed() },
    );
    print!("{report}");
    let out =
        std::env::var_os("BENCH_OUT").map(PathBuf::from).unwrap_or_else(|| repo_root().join("target/bench/results.md"));
    if let Some(parent) = out.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    if std::fs::write(&out, &report).is_ok() {
        eprintln!("bench: report written to {}", out.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
    // Errors on a row other than LiteLLM make the figures suspect: fail the run (after the table).
    let bad = rows.iter().enumerate().any(|(i, r)| r.name != litellm_name && summaries.iter().any(|s| s[i].errors > 0));
    Ok(if bad { 2 } else { 0 })
}

struct Params<'a> {
    seconds: f64,
    idle_seconds: f64,
    warmup: f64,
    rounds: usize,
    connections: usize,
    cores: &'a Cores,
    elapsed: Duration,
}

/// Bound by the proxy's own core (and not by the generator + mock).
fn proxy_bound(s: &Summary) -> bool {
    s.proxy_core.is_some_and(|p| p >= SATURATED) && s.client_core < SATURATED
}

/// A target row "at most +`limit` us over plain" for a latency measured on both rows.
// The hot-path targets (full path over plain Envoy, 1 KB unless named), and when a run counts:
// plain Envoy at most 40 us per request and other processes at most 10 % of its core.
const TARGET_CPU_US: f64 = 30.0;
/// A mesh-wide limit's check: at most this much CPU per request over the same build's
/// unlimited full path (1 KB JSON).
const TARGET_LIMIT_CPU_US: f64 = 30.0;
const TARGET_P50_US: f64 = 60.0;
const TARGET_TTFB_US: f64 = 80.0;
const TARGET_100K_RATIO: f64 = 0.5;
const TARGET_RSS_MB: f64 = 35.0;
const TARGET_NATIVE_RSS_MB: f64 = 10.0;
const TARGET_WASM_BYTES: u64 = 600_000;
// The native build's targets (1 KB): CPU as a ratio to plain Envoy's (a ratio holds on any
// machine `make bench` runs on), p50 at one connection, SSE time to first byte.
const TARGET_NATIVE_CPU_RATIO: f64 = 2.0;
const TARGET_NATIVE_P50_US: f64 = 60.0;
const TARGET_NATIVE_TTFB_US: f64 = 60.0;
const FULL_ROW: &str = "Switchyard full path";
const NATIVE_ROW: &str = "Switchyard full path (native module)";
const LIMITS_ROW: &str = "Switchyard full path under a token limit";
const SPEND_ROW: &str = "Switchyard full path under a spend limit";
const NATIVE_LIMITS_ROW: &str = "Switchyard full path under a token limit (native module)";
const NATIVE_EVERY_ATTEMPT_ROW: &str = "- native, every attempt through the per-attempt filter (no twins)";
/// Claude on Amazon Bedrock: SigV4 by Envoy and the event stream decoded (`BENCH_BEDROCK`).
const BEDROCK_ROW: &str = "Switchyard Bedrock (Anthropic caller: SigV4 by Envoy, event stream)";
const BEDROCK_TRANSLATED_ROW: &str = "Switchyard Bedrock translated (OpenAI caller, SigV4, event stream)";
const QUIET_PLAIN_CPU_US: f64 = 40.0;
const QUIET_OTHERS: f64 = 0.10;

fn latency_target(what: &str, switchyard: f64, plain: f64, limit: f64) -> String {
    let d = switchyard - plain;
    let verdict = if d <= limit { "met".to_string() } else { format!("missed by {:.0} us", d - limit) };
    format!("| {what}: at most +{limit:.0} us | {switchyard:.0} vs {plain:.0} us: {} us | {verdict} |", signed(d, 0))
}

/// The throughput target's line: by req/s when both rows were bound by Envoy's core, else by the
/// CPU per request (req/s then measure the machine, not Envoy).
fn throughput_target(b: Summary, s: Summary, label: &str, min: f64) -> String {
    let r = s.rps / b.rps.max(1e-9);
    let cpu = b.cpu.zip(s.cpu).filter(|(_, sc)| *sc > 0.0).map(|(bc, sc)| bc / sc);
    let (x, basis) = match cpu {
        Some(c) if !(proxy_bound(&b) && proxy_bound(&s)) => {
            (c, "by CPU per request: the rows were not bound by Envoy's own core")
        }
        _ => (r, "by req/s: both rows bound by Envoy's core"),
    };
    let goal = format!("at least {min}x plain");
    let verdict = if x >= min { "met".to_string() } else { format!("missed by {:.2}x", min - x) };
    format!(
        "| Throughput at {label}: {goal} | {r:.2}x by req/s; {} by CPU per request | {verdict} ({basis}) |",
        cpu.map_or("-".into(), |c| format!("{c:.2}x"))
    )
}

fn envoy_version() -> String {
    Command::new(switchyard_integration::envoy::envoy_binary())
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            let s = String::from_utf8_lossy(&o.stdout).into_owned();
            s.split_whitespace()
                .find(|w| w.contains('/') && w.chars().next().is_some_and(|c| c.is_ascii_hexdigit()))
                .map(|w| w.split('/').nth(1).unwrap_or(w).to_string())
        })
        .unwrap_or_else(|| "?".into())
}

#[allow(clippy::too_many_arguments)]
fn render(
    rows: &[Row],
    loads: &[Load],
    cells: &[Vec<Cell>],
    sums: &[Vec<Summary>],
    rss: &[Option<u64>],
    rss_c2: Option<RssC2>,
    p: Params<'_>,
) -> String {
    let mut o = String::new();
    let wasm_bytes = std::fs::metadata(wasm_path()).map(|m| m.len()).unwrap_or(0);
    let pinning = match (p.cores.proxy, p.cores.client) {
        (Some(a), Some(b)) => {
            format!("proxy pinned to CPU {a}; load generator + mock (one thread each, own processes) pinned to CPU {b}")
        }
        _ => "no pinning (fewer than 2 CPUs allowed)".into(),
    };
    let pinning = match nice_level() {
        0 => pinning,
        n => format!("{pinning}; all at nice {n}"),
    };
    let _ = writeln!(o, "## Switchyard benchmark\n");
    let _ = writeln!(
        o,
        "Envoy {} `--concurrency 1`; {pinning}. {} connections for the loaded runs ({} s each), 1 connection for the latency runs ({} s each), {} rounds, rows rotated per round and load, {} s warm-up per row and load; medians over rounds. `.wasm` {} bytes. Whole run {:.0} s.\n",
        envoy_version(), p.connections, p.seconds, p.idle_seconds, p.rounds, p.warmup, wasm_bytes, p.elapsed.as_secs_f64()
    );
    let _ = writeln!(o, "| load | path | req/s | vs plain | p50 / p99 us @{c} | p50 us @1 conn | SSE TTFB us @1 conn | proxy CPU us/req | proxy core | gen+mock core (gen + mock) | bound by | others on proxy / gen core | RSS MiB | errors |", c = p.connections);
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut notes: Vec<String> = Vec::new();
    for (li, load) in loads.iter().enumerate() {
        let base = sums[li][1];
        for (i, row) in rows.iter().enumerate() {
            let s = sums[li][i];
            if let Target::Down(why) = &row.target {
                if li == 0 {
                    let _ = writeln!(o, "| {} | {} | {why} | | | | | | | | | | | |", load.label(), row.name);
                }
                continue;
            }
            if !s.measured {
                continue;
            }
            let delta =
                |v: f64, b: f64| if i == 1 || i == 0 { String::new() } else { format!(" ({})", signed(v - b, 0)) };
            let ttfb = if load.stream {
                format!("{:.0}{}", s.idle_ttfb, delta(s.idle_ttfb, base.idle_ttfb))
            } else {
                "".into()
            };
            let cpu = match (s.cpu, base.cpu) {
                (Some(c), Some(b)) if i > 1 => format!("{c:.1} ({})", signed(c - b, 1)),
                (Some(c), _) => format!("{c:.1}"),
                _ => "-".into(),
            };
            let _ = writeln!(
                o,
                "| {} | {} | {:.0} | {} | {:.0} / {:.0} | {:.0}{} | {ttfb} | {cpu} | {} | {:.0}% ({:.0} + {:.0}) | {} | {} / {} | {} | {} |",
                load.label(),
                row.name,
                s.rps,
                if i == 0 { "-".into() } else { format!("{:.2}x", s.rps / base.rps.max(1e-9)) },
                s.p50,
                s.p99,
                s.idle_p50,
                delta(s.idle_p50, base.idle_p50),
                s.proxy_core.map_or("-".into(), |c| format!("{:.0}%", c * 100.0)),
                s.client_core * 100.0,
                s.gen_core * 100.0,
                (s.client_core - s.gen_core) * 100.0,
                if i == 0 { "gen+mock (no proxy)".into() } else { bound_by(&s) },
                pct(s.others_proxy_core),
                pct(s.others_client_core),
                rss[i].map_or("-".into(), |k| format!("{:.0}", k as f64 / 1024.0)),
                s.errors,
            );
            if s.errors > 0 {
                notes.push(format!(
                    "{} / {}: {} errors, first: {}",
                    load.label(),
                    row.name,
                    s.errors,
                    cells[li][i].first_error().unwrap_or("?")
                ));
            }
        }
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "proxy core / gen+mock core: share of one core used during the loaded runs (the proxy's from /proc, the load generator's and the mock's from their own processes; they share one core, so their sum is what saturates). \"bound by\": which side was above {:.0}% of its core; only rows bound by the proxy compare proxies by req/s, the CPU per request compares them always. RSS: after the run, `--concurrency 1` (LiteLLM: all its processes).\n", SATURATED * 100.0);
    let client_bound: Vec<String> = loads
        .iter()
        .enumerate()
        .flat_map(|(li, l)| {
            rows.iter()
                .enumerate()
                .skip(1)
                .filter(move |(i, _)| sums[li][*i].measured && sums[li][*i].client_core >= SATURATED)
                .map(move |(_, r)| format!("{} / {}", l.label(), r.name))
        })
        .collect();
    let others: Vec<f64> = sums.iter().flatten().filter(|x| x.measured).filter_map(|x| x.others_proxy_core).collect();
    let disturbed = others.iter().filter(|&&x| x > 0.10).count();
    if disturbed > 0 {
        let _ = writeln!(
            o,
            "Other processes took more than 10% of the proxy's core in {disturbed} of {} rows (median {:.0}%, at most {:.0}%): the machine was not quiet, so req/s and latencies are lower than on an idle machine; the CPU per request is less affected.\n",
            others.len(),
            median(others.clone()).unwrap_or(0.0) * 100.0,
            others.iter().copied().fold(0.0, f64::max) * 100.0
        );
    }
    if client_bound.is_empty() {
        let _ = writeln!(o, "The load generator and the mock stayed below {:.0}% of their core on every proxied row: they did not hold the proxies back.\n", SATURATED * 100.0);
    } else {
        let _ = writeln!(o, "The load generator + mock were saturated on: {}. Their req/s understate what the proxy could do; use the CPU per request there.\n", client_bound.join("; "));
    }
    for n in &notes {
        let _ = writeln!(o, "- errors: {n}");
    }
    if !notes.is_empty() {
        let _ = writeln!(o);
    }

    // The hot-path targets, Switchyard full path vs plain Envoy (docs/performance.md).
    let find = |size: usize, stream: bool| loads.iter().position(|l| l.size == size && l.stream == stream);
    let _ = writeln!(o, "### Targets (Switchyard full path vs plain Envoy, this run)\n");
    if let Some(li) = find(1024, false) {
        let plain = sums[li][1];
        let others = plain.others_proxy_core.unwrap_or(0.0);
        let counts = plain.cpu.is_some_and(|c| c <= QUIET_PLAIN_CPU_US) && others <= QUIET_OTHERS;
        let _ = writeln!(
            o,
            "{} plain Envoy {} us per request at 1 KB, other processes {:.0}% of its core (a run counts when plain costs at most {QUIET_PLAIN_CPU_US:.0} us and others at most {:.0}%).\n",
            if counts { "This run counts:" } else { "This run does not count (the machine was not quiet):" },
            plain.cpu.map_or("-".to_string(), |c| format!("{c:.1}")),
            others * 100.0,
            QUIET_OTHERS * 100.0
        );
    }
    let _ = writeln!(o, "| target | measured | verdict |");
    let _ = writeln!(o, "|---|---|---|");
    let verdict = |ok: bool, by: String| if ok { "met".to_string() } else { format!("missed by {by}") };
    if let Some(li) = find(1024, false) {
        let (b, s) = (sums[li][1], sums[li][2]);
        if let (Some(bc), Some(sc)) = (b.cpu, s.cpu) {
            let d = sc - bc;
            let _ = writeln!(
                o,
                "| Envoy CPU per request at 1 KB: at most +{TARGET_CPU_US:.0} us over plain | {sc:.1} vs {bc:.1} us: {} us | {} |",
                signed(d, 1),
                verdict(d <= TARGET_CPU_US, format!("{:.1} us", d - TARGET_CPU_US))
            );
        }
        let _ = writeln!(o, "{}", latency_target("p50 at one connection, 1 KB", s.idle_p50, b.idle_p50, TARGET_P50_US));
    }
    if let Some(li) = find(1024, true) {
        let (b, s) = (sums[li][1], sums[li][2]);
        let _ = writeln!(
            o,
            "{}",
            latency_target("SSE time to first byte, 1 KB, one connection", s.idle_ttfb, b.idle_ttfb, TARGET_TTFB_US)
        );
    }
    if let Some(li) = find(102_400, false) {
        let _ = writeln!(o, "{}", throughput_target(sums[li][1], sums[li][2], "100 KB", TARGET_100K_RATIO));
    }
    // The native build's row, when it ran.
    if let Some(ni) = rows.iter().position(|r| r.name == NATIVE_ROW) {
        if let Some(li) = find(1024, false) {
            let (b, n) = (sums[li][1], sums[li][ni]);
            if let (Some(bc), Some(nc)) = (b.cpu, n.cpu) {
                let ratio = nc / bc;
                let _ = writeln!(
                    o,
                    "| native: Envoy CPU per request at 1 KB: at most {TARGET_NATIVE_CPU_RATIO:.1}x plain | {nc:.1} vs {bc:.1} us: {ratio:.2}x ({} us) | {} |",
                    signed(nc - bc, 1),
                    verdict(ratio <= TARGET_NATIVE_CPU_RATIO, format!("{:.2}x ({:.1} us)", ratio - TARGET_NATIVE_CPU_RATIO, nc - TARGET_NATIVE_CPU_RATIO * bc))
                );
            }
            let _ = writeln!(
                o,
                "{}",
                latency_target("native: p50 at one connection, 1 KB", n.idle_p50, b.idle_p50, TARGET_NATIVE_P50_US)
            );
        }
        if let Some(li) = find(1024, true) {
            let (b, n) = (sums[li][1], sums[li][ni]);
            let _ = writeln!(
                o,
                "{}",
                latency_target("native: SSE time to first byte, 1 KB", n.idle_ttfb, b.idle_ttfb, TARGET_NATIVE_TTFB_US)
            );
        }
    }
    // A mesh-wide limit's check against the same build's unlimited full path, when those rows ran.
    if let Some(li) = find(1024, false) {
        let row = |name: &str| rows.iter().position(|r| r.name == name).and_then(|i| sums[li][i].cpu);
        for (what, limited, unlimited) in [
            ("under a token limit", LIMITS_ROW, FULL_ROW),
            ("under a spend limit", SPEND_ROW, FULL_ROW),
            ("native: under a token limit", NATIVE_LIMITS_ROW, NATIVE_ROW),
        ] {
            if let (Some(l), Some(u)) = (row(limited), row(unlimited)) {
                let d = l - u;
                let _ = writeln!(
                    o,
                    "| {what}: at most +{TARGET_LIMIT_CPU_US:.0} us CPU over the unlimited full path | {l:.1} vs {u:.1} us: {} us | {} |",
                    signed(d, 1),
                    verdict(d <= TARGET_LIMIT_CPU_US, format!("{:.1} us", d - TARGET_LIMIT_CPU_US))
                );
            }
        }
    }
    if let Some(r) = rss_c2 {
        let mb = |kib: u64| kib as f64 * 1024.0 / 1e6;
        let d_mb = mb(r.switchyard) - mb(r.plain);
        let _ = writeln!(
            o,
            "| Envoy RSS at `--concurrency 2`: at most +{TARGET_RSS_MB:.0} MB over plain | {:.1} vs {:.1} MB: {} MB (a no-op Wasm module in its place: {} MB) | {} |",
            mb(r.switchyard),
            mb(r.plain),
            signed(d_mb, 1),
            signed(mb(r.noop) - mb(r.plain), 1),
            verdict(d_mb <= TARGET_RSS_MB, format!("{:.1} MB", d_mb - TARGET_RSS_MB))
        );
        if let Some(n) = r.native {
            let d_mb = mb(n) - mb(r.plain);
            let native_bytes = std::fs::metadata(native_path()).map(|m| m.len()).unwrap_or(0);
            let _ = writeln!(
                o,
                "| native: Envoy RSS at `--concurrency 2`: at most +{TARGET_NATIVE_RSS_MB:.0} MB over plain | {:.1} vs {:.1} MB: {} MB (library {native_bytes} bytes) | {} |",
                mb(n),
                mb(r.plain),
                signed(d_mb, 1),
                verdict(d_mb <= TARGET_NATIVE_RSS_MB, format!("{:.1} MB", d_mb - TARGET_NATIVE_RSS_MB))
            );
        }
    }
    let _ = writeln!(
        o,
        "| release `.wasm`: at most {} KB ({TARGET_WASM_BYTES} bytes) | {wasm_bytes} bytes | {} |",
        TARGET_WASM_BYTES / 1000,
        verdict(wasm_bytes <= TARGET_WASM_BYTES, format!("{} bytes", wasm_bytes.saturating_sub(TARGET_WASM_BYTES)))
    );
    let _ = writeln!(o);

    // Per-round figures for the two rows compared, so the spread is visible.
    let _ = writeln!(o, "Per-round req/s and CPU us/req (plain Envoy | Switchyard full path):");
    for (li, load) in loads.iter().enumerate() {
        let fmt = |i: usize| {
            cells[li][i]
                .loaded
                .iter()
                .map(|s| format!("{:.0}/{:.1}", s.rps, s.cpu_per_req.unwrap_or(0.0)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let _ = writeln!(o, "- {}: {} | {}", load.label(), fmt(1), fmt(2));
    }
    o
}
