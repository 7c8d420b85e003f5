//! The Codex CLI itself (`codex exec`, installed by `make codex` into `.tools/npm/codex`) against
//! the demo stack through a custom model provider speaking the Responses API
//! (`wire_api = "responses"`), on a model served only by OpenAI-compatible chat endpoints
//! (`moonshotai/kimi-k2`) and on one served only by an Anthropic Messages endpoint
//! (`anthropic/claude-haiku-4-5`). Every request Codex sends (streamed, with `client_metadata`,
//! `include: ["reasoning.encrypted_content"]`, `store: false`, `prompt_cache_key`,
//! `reasoning.summary`, `developer` messages and its function tools) is translated; the scripted
//! mock model (`x-mock-behavior: agent`) calls Codex's `exec_command` tool to `cat` a file in a
//! temp directory, Codex runs it, and the answer quotes the file.
//!
//! Codex is configured (a temp `CODEX_HOME` and `HOME`, a dummy key) to call nothing but the
//! filter: no update check, analytics or feedback, no hosted `web_search` tool and no sub-agent
//! tools (the `multi_agent_v1` namespace), which only an endpoint serving the Responses API
//! natively can run (docs/surfaces.md, "Codex"); bounded to 90 s. Without npm on the machine the
//! tests are skipped, saying so; with npm but without the install they fail, naming `make codex`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use switchyard_integration::demo;
use switchyard_integration::envoy::repo_root;
use switchyard_integration::mock::Received;

/// The word only the file holds: the answer has it only if the command ran.
const WORD: &str = "QUINCE";

fn codex() -> Option<PathBuf> {
    let bin = repo_root().join(".tools/npm/codex/node_modules/.bin/codex");
    if bin.exists() {
        return Some(bin);
    }
    let npm = Command::new("npm").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    if npm.is_ok_and(|s| s.success()) {
        panic!("Codex is not installed in .tools/npm/codex: run `make codex`");
    }
    eprintln!("SKIPPED: npm is not installed, so the Codex CLI (@openai/codex) cannot be");
    None
}

/// A fresh directory under the system's temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("switchyard-codex-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for sub in ["home/.codex", "work"] {
            std::fs::create_dir_all(d.join(sub)).expect("temp dir");
        }
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Codex's `config.toml`: the filter on `port` as the model provider, with these request headers.
/// `native`: the model is served by an endpoint running the Responses API natively, so Codex
/// keeps its hosted `web_search` tool and its sub-agent tools.
fn config(port: u16, model: &str, headers: &[(&str, &str)], native: bool) -> String {
    let headers: Vec<String> = headers.iter().map(|(k, v)| format!("{k:?} = {v:?}")).collect();
    let (web_search, agents) = if native { ("live", "true") } else { ("disabled", "false") };
    format!(
        r#"model = "{model}"
model_provider = "switchyard"
check_for_update_on_startup = false
web_search = "{web_search}"

[model_providers.switchyard]
name = "Switchyard"
base_url = "http://127.0.0.1:{port}/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
http_headers = {{ {} }}

[agents]
enabled = {agents}

[analytics]
enabled = false

[feedback]
enabled = false
"#,
        headers.join(", ")
    )
}

/// Runs `codex exec` in `dir/work` against the filter on `port`; returns its last message.
fn run_codex(bin: &Path, dir: &Path, port: u16, model: &str, headers: &[(&str, &str)], native: bool) -> String {
    let note = dir.join("work/note.txt");
    std::fs::write(&note, format!("The secret word is {WORD}.\n")).expect("note");
    std::fs::write(dir.join("home/.codex/config.toml"), config(port, model, headers, native)).expect("config");
    let last = dir.join("last.txt");
    let prompt = format!("Run `cat {}` with your shell tool and answer with the secret word only.", note.display());
    let mut child = Command::new(bin)
        .args(["exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", "--color", "never"])
        .arg("--output-last-message")
        .arg(&last)
        .arg(&prompt)
        .current_dir(dir.join("work"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.join("home"))
        .env("CODEX_HOME", dir.join("home/.codex"))
        .env("OPENAI_API_KEY", "sk-switchyard-demo-caller")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("codex starts");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if child.try_wait().expect("codex runs").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("codex exec did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("codex output");
    let answer = std::fs::read_to_string(&last).unwrap_or_default();
    assert!(
        out.status.success() && !answer.is_empty(),
        "codex exec failed ({}): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    answer
}

fn body(r: &Received) -> Value {
    serde_json::from_slice(&r.body).unwrap_or(Value::Null)
}

/// The demo stack, Codex run against it on `model` with `x-mock-behavior: <behavior>`: its answer
/// and every request the demo providers received for this session.
fn session(tag: &str, model: &str, headers: &[(&str, &str)]) -> Option<(String, Vec<(String, Received)>)> {
    let bin = codex()?;
    let dir = TempDir::new(tag);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let stack = rt.block_on(demo::start(0, 0, 0)).expect("demo stack starts");
    let mut all = vec![("x-test-id", tag)];
    all.extend_from_slice(headers);
    let native = headers.iter().any(|(k, _)| *k == "x-switchyard-routing");
    let answer = run_codex(&bin, &dir.0, stack.envoy.port, model, &all, native);
    // In arrival order across the providers: the turns may reach different endpoints of the model.
    let mut received: Vec<(String, Received)> = demo::DEMO_PROVIDERS
        .iter()
        .zip(&stack.providers)
        .flat_map(|((slug, _, _), p)| p.received_for(tag).into_iter().map(|r| (slug.to_string(), r)))
        .collect();
    received.sort_by_key(|(_, r)| r.seq);
    Some((answer, received))
}

#[test]
fn codex_runs_a_command_through_a_model_served_only_by_openai_chat_endpoints() {
    let Some((answer, received)) =
        session("codex-chat", "moonshotai/kimi-k2", &[("x-mock-behavior", "fireworks=agent,together=agent")])
    else {
        return;
    };
    assert!(answer.contains(WORD), "the answer quotes the file Codex read: {answer}");
    assert_eq!(received.len(), 2, "one request per turn, no retries: {received:?}");
    assert!(received.iter().all(|(_, r)| r.path == "/v1/chat/completions"), "{received:?}");
    let first = body(&received[0].1);
    assert_eq!(first["stream"], true);
    assert!(first.get("client_metadata").is_none() && first.get("prompt_cache_key").is_none(), "dropped: {first}");
    let tools = first["tools"].as_array().expect("tools");
    assert!(tools.iter().any(|t| t["function"]["name"] == "exec_command"), "{first}");
    let second = body(&received[1].1);
    let last = second["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
    assert_eq!(last["role"], "tool", "{second}");
    assert!(last["content"].as_str().is_some_and(|c| c.contains(WORD)), "the command's output: {last}");
}

#[test]
fn codex_runs_a_command_through_a_model_served_only_by_an_anthropic_endpoint() {
    let Some((answer, received)) =
        session("codex-anthropic", "anthropic/claude-haiku-4-5", &[("x-mock-behavior", "anthropic-direct=agent")])
    else {
        return;
    };
    assert!(answer.contains(WORD), "the answer quotes the file Codex read: {answer}");
    assert_eq!(received.len(), 2, "one request per turn, no retries: {received:?}");
    assert!(received.iter().all(|(s, r)| s == "anthropic-direct" && r.path == "/v1/messages"), "{received:?}");
    let first = body(&received[0].1);
    assert!(first["system"].is_string() || first["system"].is_array(), "the developer messages: {first}");
    assert!(first["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == "exec_command")), "{first}");
    let second = body(&received[1].1);
    let blocks = second["messages"].as_array().and_then(|m| m.last()).map(|m| m["content"].clone());
    let result = blocks.as_ref().and_then(Value::as_array).and_then(|b| b.iter().find(|b| b["type"] == "tool_result"));
    assert!(result.is_some_and(|r| r.to_string().contains(WORD)), "the command's output: {second}");
}

/// On an endpoint serving the Responses API natively (deepinfra) Codex's request goes as sent, its
/// hosted and namespaced tools included, less `client_metadata` (its installation and session
/// ids, for OpenAI's logs), which a Responses host other than OpenAI refuses as unknown.
#[test]
fn codex_reaches_a_native_responses_endpoint_as_it_speaks() {
    let only = [("x-switchyard-routing", r#"{"provider": {"only": ["deepinfra"]}}"#)];
    let Some((answer, received)) = session("codex-native", "qwen/qwen3-coder", &only) else { return };
    assert!(answer.contains("tok0"), "{answer}");
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0].1.path, "/v1/responses");
    let b = body(&received[0].1);
    assert!(b.get("client_metadata").is_none(), "{b}");
    assert_eq!(b["store"], false);
    assert!(b["prompt_cache_key"].is_string() && b["include"].is_array(), "kept: {b}");
    let kinds: Vec<&str> = b["tools"].as_array().unwrap().iter().filter_map(|t| t["type"].as_str()).collect();
    assert!(kinds.contains(&"web_search") && kinds.contains(&"namespace"), "{kinds:?}");
}
