//! The demo behind `make run` and the committed example config, as a user meets them: the
//! committed `envoy/switchyard-demo.yaml` runs as its header says (mock providers from
//! `switchyard-demo --mocks-only`, then Envoy with the file), and the demo stops with its parent.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use switchyard_integration::demo::DEMO_PROVIDERS;
use switchyard_integration::envoy::{envoy_binary, http_get, repo_root, TEST_AWS_ENV};
use switchyard_integration::procfs::alive;

const DEMO: &str = env!("CARGO_BIN_EXE_switchyard-demo");

/// A child process killed (by PID) when the test ends, passing or not.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0)
}

/// `n` consecutive free ports (the mocks take one each from base).
fn free_run(n: u16) -> u16 {
    for _ in 0..200 {
        let base = 20_000 + (free_port() % 30_000);
        let held: Vec<TcpListener> = (0..n).filter_map(|i| TcpListener::bind(("127.0.0.1", base + i)).ok()).collect();
        if held.len() == usize::from(n) {
            return base;
        }
    }
    panic!("no {n} consecutive free ports");
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn post(addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
    post_with(addr, path, "", body)
}

/// POST with more header lines (each ending in `\r\n`).
fn post_with(addr: SocketAddr, path: &str, headers: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: demo\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, out)
}

/// GET with a Host header (the demo selects operator policies by virtual host).
fn get_as(addr: SocketAddr, host: &str, path: &str) -> String {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nconnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn committed_demo_config_runs_as_its_header_says() {
    let yaml = std::fs::read_to_string(repo_root().join("envoy/switchyard-demo.yaml")).unwrap();
    assert!(yaml.contains("#   1. the mock providers: target/release/switchyard-demo --mocks-only"), "{yaml}");
    assert!(yaml.contains("#   2. .venv/bin/envoy -c envoy/switchyard-demo.yaml --base-id 7"));
    let aws = format!("AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={}", TEST_AWS_ENV[0].1, TEST_AWS_ENV[1].1);
    assert!(yaml.contains(&aws), "the header gives Envoy the mock Bedrock's keys: {yaml}");
    let n = DEMO_PROVIDERS.len() as u16;
    for (i, (slug, _, _)) in DEMO_PROVIDERS.iter().enumerate() {
        let port = 18101 + i;
        assert!(yaml.contains(&format!("#        {slug} {port}")), "header lists {slug} on {port}");
        assert!(yaml.contains(&format!("port_value: {port}")), "the config uses {port}");
    }
    // Step 1 as documented, on free ports (a fixed port may be taken on a shared machine).
    let base = free_run(n);
    let _mocks = Killed(
        Command::new(DEMO)
            .args(["--mocks-only", "--provider-port", &base.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the mock providers", || TcpStream::connect(("127.0.0.1", base + n - 1)).is_ok());
    // Step 2 with the committed file, only its ports moved to free ones.
    let (listener, admin) = (free_port(), free_port());
    // A port ends its line (block style) or its flow mapping (`{..., port_value: 18101}}`).
    let port = |yaml: String, from: u16, to: u16| {
        ["\n", "}", ","]
            .iter()
            .fold(yaml, |y, end| y.replace(&format!("port_value: {from}{end}"), &format!("port_value: {to}{end}")))
    };
    let mut moved = port(yaml.clone(), 10000, listener);
    moved = port(moved, 9901, admin);
    for i in 0..n {
        moved = port(moved, 18101 + i, base + i);
    }
    moved = moved.replace("enable_reuse_port: true", "enable_reuse_port: false");
    let dir = repo_root().join(".work").join(format!("demo-yaml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("switchyard-demo.yaml");
    std::fs::write(&config, moved).unwrap();
    let log = std::fs::File::create(dir.join("envoy.log")).unwrap();
    let _envoy = Killed(
        Command::new(envoy_binary())
            .current_dir(repo_root())
            .args(["-c", &config.to_string_lossy(), "--base-id", &(40_000 + std::process::id() % 10_000).to_string()])
            .arg("--disable-hot-restart")
            .envs(TEST_AWS_ENV)
            .env_remove("AWS_SESSION_TOKEN")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let admin_addr: SocketAddr = ([127, 0, 0, 1], admin).into();
    wait_for("Envoy ready", || matches!(http_get(admin_addr, "/ready"), Ok((200, _))));
    // Step 3 and a routed request: the filter answers and a mock provider serves.
    let addr: SocketAddr = ([127, 0, 0, 1], listener).into();
    let (status, models) = http_get(addr, "/v1/models").unwrap();
    assert_eq!(status, 200, "{models}");
    assert!(models.contains("meta-llama/llama-4-maverick"), "{models}");
    let (status, answer) = post(
        addr,
        "/v1/chat/completions",
        r#"{"model":"meta-llama/llama-4-maverick","messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(status, 200, "{answer}");
    assert!(answer.to_ascii_lowercase().contains("x-switchyard-provider:"), "{answer}");
    // The listings respect the caller's policy: the finance route sees only what its policy
    // (ZDR providers under contract, meta-llama/* and anthropic/*) lets it reach.
    let finance = get_as(addr, "finance.llm.local", "/v1/models");
    assert!(finance.starts_with("HTTP/1.1 200"), "{finance}");
    assert!(finance.contains("x-switchyard-policy: finance"), "{finance}");
    assert!(finance.contains("\"meta-llama/llama-4-maverick\""), "{finance}");
    assert!(!finance.contains("\"qwen/"), "a model outside allowed_models is listed: {finance}");
    let eps = get_as(addr, "finance.llm.local", "/v1/models/meta-llama/llama-4-maverick/endpoints");
    assert!(eps.contains("\"tag\":\"deepinfra/turbo\""), "{eps}");
    assert!(!eps.contains("\"tag\":\"together\"") && !eps.contains("\"tag\":\"fireworks\""), "{eps}");
    clouds_failover(addr);
}

/// README's "Claude across the clouds", as printed by `make run`: the mock Anthropic answers 529,
/// the attempt fails over to Claude on Amazon Bedrock, signed by Envoy with the keys of the
/// header (the mock answers 403 to any other signature), and Bedrock's event stream reaches an
/// OpenAI caller as OpenAI chunks and an Anthropic caller as Anthropic's SSE events; with Bedrock
/// throttled as well, Claude on Google Vertex AI answers.
fn clouds_failover(addr: SocketAddr) {
    let order = r#""provider":{"order":["anthropic-direct","amazon-bedrock"]}"#;
    let behavior = "x-mock-behavior: anthropic-direct=529\r\n";
    let openai = format!(
        r#"{{"model":"anthropic/claude-sonnet-4-5","stream":true,"stream_options":{{"include_usage":true}},"messages":[{{"role":"user","content":"Hello"}}],{order}}}"#
    );
    let anthropic = format!(
        r#"{{"model":"anthropic/claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{{"role":"user","content":"Hello"}}],{order}}}"#
    );
    let (status, out) = post_with(addr, "/v1/chat/completions", behavior, &openai);
    assert_eq!(status, 200, "{out}");
    let lower = out.to_ascii_lowercase();
    assert!(lower.contains("x-switchyard-attempt-log: anthropic-direct:529,amazon-bedrock:200"), "{out}");
    assert!(lower.contains("x-switchyard-provider: amazon-bedrock"), "{out}");
    assert!(out.contains("\"content\":\"Hello from Bedrock\"") && out.contains("\"cost\":"), "{out}");
    assert!(out.contains("data: [DONE]") && !out.contains("event: "), "OpenAI chunks, not Anthropic events: {out}");
    let headers = "anthropic-version: 2023-06-01\r\n".to_string() + behavior;
    let (status, out) = post_with(addr, "/v1/messages", &headers, &anthropic);
    assert_eq!(status, 200, "{out}");
    assert!(
        out.to_ascii_lowercase().contains("x-switchyard-attempt-log: anthropic-direct:529,amazon-bedrock:200"),
        "{out}"
    );
    for event in ["message_start", "content_block_delta", "message_delta", "message_stop"] {
        assert!(out.contains(&format!("event: {event}\n")), "no {event}: {out}");
    }
    assert!(out.contains("Hello from Bedrock") && !out.contains("[DONE]"), "{out}");

    // Bedrock throttled too: the third cloud, Claude on Vertex AI (`:streamRawPredict`, the
    // mock taking only its access token), answers both callers in their own stream shapes.
    let order3 = r#""provider":{"order":["anthropic-direct","amazon-bedrock","google-vertex"]}"#;
    let behavior3 = "x-mock-behavior: anthropic-direct=529,amazon-bedrock=429\r\n";
    let log3 = "x-switchyard-attempt-log: anthropic-direct:529,amazon-bedrock:429,google-vertex:200";
    let (status, out) = post_with(addr, "/v1/chat/completions", behavior3, &openai.replace(order, order3));
    assert_eq!(status, 200, "{out}");
    assert!(out.to_ascii_lowercase().contains(log3), "{out}");
    assert!(out.to_ascii_lowercase().contains("x-switchyard-provider: google-vertex"), "{out}");
    assert!(out.contains("data: [DONE]") && !out.contains("event: "), "OpenAI chunks: {out}");
    let headers3 = "anthropic-version: 2023-06-01\r\n".to_string() + behavior3;
    let (status, out) = post_with(addr, "/v1/messages", &headers3, &anthropic.replace(order, order3));
    assert_eq!(status, 200, "{out}");
    assert!(out.to_ascii_lowercase().contains(log3), "{out}");
    for event in ["message_start", "content_block_delta", "message_stop"] {
        assert!(out.contains(&format!("event: {event}\n")), "no {event}: {out}");
    }
}

#[test]
fn the_demo_stops_with_its_parent_and_takes_envoy_along() {
    let dir = repo_root().join(".work").join(format!("demo-stop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("demo.out");
    let pid_file = dir.join("demo.pid");
    // A parent like make (which exports MAKELEVEL): starts the demo, then dies while it runs.
    let mut parent = Killed(
        Command::new("sh")
            .env("MAKELEVEL", "1")
            .arg("-c")
            .arg(r#""$0" --port 0 --admin-port 0 > "$1" 2>&1 & echo $! > "$2"; sleep 60"#)
            .arg(DEMO)
            .arg(&out)
            .arg(&pid_file)
            .spawn()
            .unwrap(),
    );
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    wait_for("the demo to be ready", || read(&out).contains("READY "));
    let text = read(&out);
    let demo_pid: u32 = read(&pid_file).trim().parse().unwrap();
    let envoy_pid: u32 = text
        .split("Envoy (pid ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no Envoy pid in {text}"));
    // The demo teaches: labelled examples with expected statuses, failover, streaming, metrics, stop.
    for needle in ["[1] ", "expect: 200", "failover", "streaming", "expect: 404", "/stats/prometheus", "Ctrl-C"] {
        assert!(text.contains(needle), "demo output lacks {needle:?}:\n{text}");
    }
    assert!(alive(demo_pid) && alive(envoy_pid));
    let _ = parent.0.kill();
    let _ = parent.0.wait();
    wait_for("the demo and its Envoy to stop", || !alive(demo_pid) && !alive(envoy_pid));
}
