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
mod procs;
mod report;
mod rows;

use procs::*;
use report::*;
use rows::*;

const FULL_ROW: &str = "Switchyard full path";
const NATIVE_ROW: &str = "Switchyard full path (native module)";
const LIMITS_ROW: &str = "Switchyard full path under a token limit";
const SPEND_ROW: &str = "Switchyard full path under a spend limit";
const NATIVE_LIMITS_ROW: &str = "Switchyard full path under a token limit (native module)";
const NATIVE_EVERY_ATTEMPT_ROW: &str = "- native, every attempt through the per-attempt filter (no twins)";
/// Claude on Amazon Bedrock: SigV4 by Envoy and the event stream decoded (`BENCH_BEDROCK`).
const BEDROCK_ROW: &str = "Switchyard Bedrock (Anthropic caller: SigV4 by Envoy, event stream)";
const BEDROCK_TRANSLATED_ROW: &str = "Switchyard Bedrock translated (OpenAI caller, SigV4, event stream)";
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
        let name = format!("Switchyard full path (native), {}", alt.display());
        let boot = alt_build(native_config(mock_port), &alt, |cfg, alt| cfg.native = alt);
        add_envoy(&mut rows, &mut keep, &name, boot, "bench-native-alt");
    }
    // BENCH_ALT_WASM=<module>: the same full path with another build of the module (e.g. other
    // optimization settings), side by side with the default build in the same run.
    if let Some(alt) = std::env::var_os("BENCH_ALT_WASM").map(PathBuf::from) {
        let name = format!("Switchyard full path, {}", alt.display());
        let boot = alt_build(switchyard_config(mock_port), &alt, |cfg, alt| cfg.wasm = alt);
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
