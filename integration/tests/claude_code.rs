//! Claude Code itself (`claude -p`, installed by `make claude-code` into `.tools/npm/claude-code`)
//! against the demo stack, on a model served only by OpenAI-compatible chat endpoints
//! (`moonshotai/kimi-k2`: fireworks, together): every request it sends (`/v1/messages?beta=true`,
//! streamed, with its tools, `cache_control`, adaptive thinking, `context_management`,
//! `output_config` and a `role: system` message after the first user turn) is translated, the
//! scripted mock model (`x-mock-behavior: agent`) calls its Read tool on a file in a temp
//! directory, and the answer quotes the file. Then the same session with the first endpoint
//! answering 429 on the second turn: the other endpoint takes over, and Claude Code never sees
//! the 429.
//!
//! Claude Code is kept from calling anything but the filter (telemetry, error reports, update
//! checks and other nonessential traffic off, a temp `HOME`, a dummy key) and bounded to 90 s.
//! Without npm on the machine the tests are skipped, saying so; with npm but without the install
//! they fail, naming `make claude-code`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use switchyard_integration::demo;
use switchyard_integration::envoy::repo_root;
use switchyard_integration::mock::Received;

const MODEL: &str = "moonshotai/kimi-k2";
/// The word only the file holds: the answer has it only if the Read tool ran.
const WORD: &str = "MARMALADE";

fn claude() -> Option<PathBuf> {
    let bin = repo_root().join(".tools/npm/claude-code/node_modules/.bin/claude");
    if bin.exists() {
        return Some(bin);
    }
    let npm = Command::new("npm").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    if npm.is_ok_and(|s| s.success()) {
        panic!("Claude Code is not installed in .tools/npm/claude-code: run `make claude-code`");
    }
    eprintln!("SKIPPED: npm is not installed, so Claude Code (@anthropic-ai/claude-code) cannot be");
    None
}

/// A fresh directory under the system's temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("switchyard-cc-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("home")).expect("temp dir");
        std::fs::create_dir_all(d.join("work")).expect("temp dir");
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `claude -p` in `dir/work` against the filter on `port` with these extra request headers;
/// returns its JSON result.
fn run_claude(bin: &Path, dir: &Path, port: u16, model: &str, headers: &[(&str, &str)]) -> Value {
    let note = dir.join("work/note.txt");
    std::fs::write(&note, format!("The secret word is {WORD}.\n")).expect("note");
    let prompt = format!("Read the file {} with your Read tool and answer with the secret word only.", note.display());
    let custom: Vec<String> = headers.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let mut child = Command::new(bin)
        .args(["-p", &prompt, "--model", model, "--output-format", "json", "--allowedTools", "Read"])
        .current_dir(dir.join("work"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.join("home"))
        .env("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}"))
        .env("ANTHROPIC_API_KEY", "sk-switchyard-demo-caller")
        .env("ANTHROPIC_CUSTOM_HEADERS", custom.join("\n"))
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        // A 429 that reached Claude Code would be retried by it, hiding a missing failover.
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("claude starts");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if child.try_wait().expect("claude runs").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("claude -p did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("claude output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("claude -p printed no JSON result ({e}; {}): {stdout}\n{stderr}", out.status))
}

fn body(r: &Received) -> Value {
    serde_json::from_slice(&r.body).unwrap_or(Value::Null)
}

/// The last message of a translated request, when it is a tool's result.
fn tool_result(r: &Received) -> Option<String> {
    let b = body(r);
    let last = b["messages"].as_array()?.last()?.clone();
    (last["role"] == "tool").then(|| last["content"].as_str().unwrap_or("").to_string())
}

/// The demo stack, Claude Code run against it with `headers`, and what each demo provider
/// received for `test_id` (in `demo::DEMO_PROVIDERS` order).
fn session(tag: &str, model: &str, headers: &[(&str, &str)]) -> Option<(Value, Vec<(String, Vec<Received>)>)> {
    let bin = claude()?;
    let dir = TempDir::new(tag);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let stack = rt.block_on(demo::start(0, 0, 0)).expect("demo stack starts");
    let mut all = vec![("x-test-id", tag)];
    all.extend_from_slice(headers);
    let result = run_claude(&bin, &dir.0, stack.envoy.port, model, &all);
    let received = demo::DEMO_PROVIDERS
        .iter()
        .zip(&stack.providers)
        .map(|((slug, _, _), p)| (slug.to_string(), p.received_for(tag)))
        .collect();
    assert_eq!(result["is_error"], false, "{result}\n{}", stack.envoy.log_tail());
    Some((result, received))
}

fn of<'a>(received: &'a [(String, Vec<Received>)], slug: &str) -> &'a [Received] {
    received.iter().find(|(s, _)| s == slug).map_or(&[], |(_, r)| r.as_slice())
}

#[test]
fn claude_code_reads_a_file_through_a_model_served_only_by_openai_endpoints() {
    let behavior = [("x-mock-behavior", "fireworks=agent,together=agent")];
    let Some((result, received)) = session("cc-read", MODEL, &behavior) else { return };
    let answer = result["result"].as_str().unwrap_or("");
    assert!(answer.contains(WORD), "the answer quotes the file Claude Code read: {result}");
    assert_eq!(result["num_turns"], 2, "{result}");

    let turns: Vec<&Received> =
        received.iter().filter(|(s, _)| s == "fireworks" || s == "together").flat_map(|(_, r)| r).collect();
    assert_eq!(turns.len(), 2, "one request per turn, no retries: {turns:?}");
    let anthropic_paths = received.iter().flat_map(|(_, r)| r).filter(|r| !r.path.starts_with("/v1/chat/completions"));
    assert_eq!(anthropic_paths.count(), 0, "only OpenAI endpoints serve the model");
    let first = turns.iter().find(|r| tool_result(r).is_none()).expect("the first turn");
    let b = body(first);
    assert_eq!(b["stream"], true);
    let roles: Vec<&str> = b["messages"].as_array().unwrap().iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles[..3], ["system", "user", "system"], "Claude Code's mid-conversation system message, in place");
    assert!(b["tools"].as_array().unwrap().iter().any(|t| t["function"]["name"] == "Read"), "{b}");
    assert!(b.get("thinking").is_none() && b.get("context_management").is_none(), "dropped: {b}");
    let second = turns.iter().find_map(|r| tool_result(r)).expect("the second turn carries the tool's result");
    assert!(second.contains(WORD), "{second}");
}

#[test]
fn claude_code_session_fails_over_when_its_endpoint_answers_429_mid_session() {
    let behavior = [
        ("x-mock-behavior", "fireworks=agent+429+onresult,together=agent"),
        ("x-switchyard-routing", r#"{"provider": {"order": ["fireworks", "together"]}}"#),
    ];
    let Some((result, received)) = session("cc-failover", MODEL, &behavior) else { return };
    assert!(result["result"].as_str().unwrap_or("").contains(WORD), "{result}");

    let fireworks = of(&received, "fireworks");
    let together = of(&received, "together");
    assert_eq!(fireworks.len(), 2, "the first turn (served) and the second (429)");
    assert!(tool_result(&fireworks[0]).is_none() && tool_result(&fireworks[1]).is_some());
    assert_eq!(together.len(), 1, "together took the second turn over: {together:?}");
    assert!(tool_result(&together[0]).is_some_and(|t| t.contains(WORD)));
}

/// The request as Claude Code sent it reaches an endpoint speaking Anthropic's API (qwen3-coder:
/// together and deepinfra) unchanged but for the model: its path and query, its beta headers, and
/// the mid-conversation system message the strict mock takes as the real API does.
#[test]
fn claude_code_reaches_anthropic_endpoints_as_it_speaks() {
    let Some((result, received)) = session("cc-passthrough", "qwen/qwen3-coder", &[]) else { return };
    assert!(result["result"].as_str().is_some_and(|r| r.contains("tok0")), "{result}");
    let sent: Vec<&Received> = received.iter().flat_map(|(_, r)| r).collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].path, "/v1/messages?beta=true");
    let beta = sent[0].header("anthropic-beta").unwrap_or("");
    assert!(beta.contains("mid-conversation-system"), "{beta}");
    let b = body(sent[0]);
    assert_eq!(b["messages"][1]["role"], "system", "{b}");
    assert_eq!(b["thinking"]["type"], "adaptive");
    assert!(b.get("context_management").is_some() && b.get("output_config").is_some(), "{b}");
}
