//! `make run`: mock providers + Envoy with the Switchyard filter, answering real requests.
//!
//! Usage: switchyard-demo [--port N] [--admin-port N] [--provider-port N]
//!        switchyard-demo --mocks-only [--provider-port N]   (mock providers only, default 18101..)
//!        switchyard-demo --print-config                     (envoy/switchyard-demo.yaml)
//!        switchyard-demo --azure [--port N] [--admin-port N] (GPT on Azure by Entra token alone:
//!                                                            the Azure SDK tests' stack)
//!
//! Prints `READY <port>` once Envoy answers, then labelled example calls, the metrics URL and
//! Envoy's access-log lines as requests arrive. Stops on Ctrl-C or SIGTERM, and when its parent
//! (`make`) dies; Envoy and the mock providers stop with it.

use std::io::{BufRead, Seek};
use std::time::Duration;

use switchyard_integration::demo;

fn arg(name: &str, default: u16) -> u16 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The clouds' failover requests (README, "Claude across the clouds"): the provider order is
/// Anthropic's own API, then Amazon Bedrock.
const CLOUDS_OPENAI: &str = r#"{"model":"anthropic/claude-sonnet-4-5","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Hello"}],"provider":{"order":["anthropic-direct","amazon-bedrock"]}}"#;
const CLOUDS_ANTHROPIC: &str = r#"{"model":"anthropic/claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hello"}],"provider":{"order":["anthropic-direct","amazon-bedrock"]}}"#;
const CLOUDS_THREE: &str = r#"{"model":"anthropic/claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hello"}],"provider":{"order":["anthropic-direct","amazon-bedrock","google-vertex"]}}"#;

/// One printed example: what it shows, the status to expect, the command.
struct Example {
    shows: &'static str,
    expect: &'static str,
    command: String,
}

fn examples(port: u16) -> Vec<Example> {
    let chat = |extra_headers: &str, body: &str| {
        format!(
            "curl -s localhost:{port}/v1/chat/completions -H 'content-type: application/json'{extra_headers} \\\n    -d '{body}' -D -"
        )
    };
    vec![
        Example {
            shows: "default routing (price-weighted): the answer names the catalog model, the provider and usage.cost",
            expect: "200; x-switchyard-provider, x-switchyard-strategy: price_weighted",
            command: chat("", r#"{"model":"meta-llama/llama-4-maverick","messages":[{"role":"user","content":"Hello"}]}"#),
        },
        Example {
            shows: "failover: the mock deepinfra answers 429 and together 503 (x-mock-behavior), fireworks serves",
            expect: "200; x-switchyard-attempt-log: deepinfra/turbo:429,together:503,fireworks:200",
            command: chat(
                " -H 'x-mock-behavior: deepinfra=429,together=503'",
                r#"{"model":"meta-llama/llama-4-maverick","messages":[{"role":"user","content":"Hi"}],"provider":{"order":["deepinfra","together","fireworks"]}}"#,
            ),
        },
        Example {
            shows: "streaming (SSE): chunks arrive as the provider sends them; the usage chunk carries usage.cost",
            expect: "200; text/event-stream ending in data: [DONE]",
            command: format!(
                "curl -sN localhost:{port}/v1/chat/completions -H 'content-type: application/json' \\\n    -d '{}'",
                r#"{"model":"meta-llama/llama-4-maverick","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Stream"}],"provider":{"sort":"price"}}"#
            ),
        },
        Example {
            shows: "the model list (OpenAI shape + OpenRouter pricing) and one model's endpoints with live statistics",
            expect: "200 and 200",
            command: format!(
                "curl -s localhost:{port}/v1/models\n  curl -s localhost:{port}/v1/models/meta-llama/llama-4-maverick/endpoints"
            ),
        },
        Example {
            shows: "a compliance filter that leaves nothing: zdr + only together (together is not ZDR)",
            expect: "404 no_endpoints, error.metadata.constraint = zdr",
            command: chat(
                "",
                r#"{"model":"meta-llama/llama-4-maverick","messages":[],"provider":{"zdr":true,"only":["together"]}}"#,
            ),
        },
        Example {
            shows: "a typo in provider.ignore is not silent",
            expect: "200; x-switchyard-warning: provider.ignore[0] \"togther\" matches no provider",
            command: chat(
                "",
                r#"{"model":"meta-llama/llama-4-maverick","messages":[],"provider":{"ignore":["togther"]}}"#,
            ),
        },
        Example {
            shows: "the debug header: the ranked candidates with scores and the health each decision saw",
            expect: "200; x-switchyard-candidates (the demo enables routing.debug_header)",
            command: chat(
                " -H 'x-switchyard-debug: 1'",
                r#"{"model":"meta-llama/llama-4-maverick:floor","messages":[{"role":"user","content":"Hi"}]}"#,
            ),
        },
        Example {
            shows: "the finance compliance route (policy \"finance\"): the request tries to widen, stays inside the policy",
            expect: "200; x-switchyard-policy: finance",
            command: chat(
                " -H 'host: finance.llm.local'",
                r#"{"model":"meta-llama/llama-4-maverick","messages":[],"provider":{"order":["together"],"data_collection":"allow"}}"#,
            ),
        },
        Example {
            shows: "the auto router: the model is picked per prompt; x-switchyard-auto explains the choice",
            expect: "200; x-switchyard-model names the pick",
            command: chat(
                " -H 'x-switchyard-debug: 1'",
                r#"{"model":"openrouter/auto","messages":[{"role":"user","content":"Fix this python bug: def f(x): return x+"}],"plugins":[{"id":"auto-router","cost_tier":"high","allowed_models":["anthropic/*","qwen/*"]}]}"#,
            ),
        },
        Example {
            shows: "an Anthropic Messages caller (anthropic SDK): routed among endpoints speaking Anthropic's API, answered in its shape",
            expect: "200; a message naming model anthropic/claude-sonnet-4-6, provider and usage.cost",
            command: format!(
                "curl -s localhost:{port}/v1/messages -H 'content-type: application/json' -H 'anthropic-version: 2023-06-01' \\\n    -d '{}' -D -",
                r#"{"model":"anthropic/claude-sonnet-4-6","max_tokens":64,"messages":[{"role":"user","content":"Hello"}],"provider":{"sort":"price"}}"#
            ),
        },
        // The clouds' failover chain for Claude: Anthropic, then Amazon Bedrock, then Google
        // Vertex AI.
        Example {
            shows: "Claude fails over Anthropic -> Amazon Bedrock, OpenAI caller, streamed: the mock Anthropic answers 529 overloaded, Envoy signs the Bedrock attempt (SigV4) and the mock Bedrock checks it; its event stream comes back as OpenAI chunks",
            expect: "200; x-switchyard-attempt-log: anthropic-direct:529,amazon-bedrock:200; chunks \"Hello from Bedrock\", usage.cost, data: [DONE]",
            command: format!(
                "curl -sN localhost:{port}/v1/chat/completions -H 'content-type: application/json' \\\n    -H 'x-mock-behavior: anthropic-direct=529' -d '{}' -D -",
                CLOUDS_OPENAI
            ),
        },
        Example {
            shows: "the same failover for an Anthropic Messages caller, streamed: Bedrock's event stream as Anthropic's own SSE events",
            expect: "200; x-switchyard-attempt-log: anthropic-direct:529,amazon-bedrock:200; event: message_start ... event: message_stop",
            command: format!(
                "curl -sN localhost:{port}/v1/messages -H 'content-type: application/json' -H 'anthropic-version: 2023-06-01' \\\n    -H 'x-mock-behavior: anthropic-direct=529' -d '{}' -D -",
                CLOUDS_ANTHROPIC
            ),
        },
        Example {
            shows: "Bedrock throttled too: Claude on Google Vertex AI answers (streamRawPredict, the mock checks its access token), Anthropic caller, streamed",
            expect: "200; x-switchyard-attempt-log: anthropic-direct:529,amazon-bedrock:429,google-vertex:200; event: message_start ... event: message_stop",
            command: format!(
                "curl -sN localhost:{port}/v1/messages -H 'content-type: application/json' -H 'anthropic-version: 2023-06-01' \\\n    -H 'x-mock-behavior: anthropic-direct=529,amazon-bedrock=429' -d '{}' -D -",
                CLOUDS_THREE
            ),
        },
        Example {
            shows: "a Google generateContent caller (google-genai SDK): the model is in the path, routing fields in x-switchyard-routing",
            expect: "200; modelVersion: google/gemini-2.5-flash; the no-endpoint 404s come in Google's error shape",
            command: format!(
                "curl -s 'localhost:{port}/v1beta/models/google/gemini-2.5-flash:generateContent' -H 'content-type: application/json' \\\n    -H 'x-switchyard-routing: {{\"provider\":{{\"sort\":\"price\"}}}}' -d '{}' -D -",
                r#"{"contents":[{"role":"user","parts":[{"text":"Hello"}]}]}"#
            ),
        },
        Example {
            shows: "a body that is not JSON",
            expect: "400 invalid_json (the connection stays open)",
            command: chat("", "{not json"),
        },
    ]
}

/// Under make (which exports MAKELEVEL), asks the kernel for SIGTERM when the parent dies, so
/// stopping make stops the demo. Started any other way, the demo runs until it is stopped.
fn die_with_parent() {
    if std::env::var_os("MAKELEVEL").is_none() {
        return;
    }
    // SAFETY: prctl with PR_SET_PDEATHSIG only changes this process's own signal setting.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
    }
    // The parent may have died before the call: then nobody would signal us.
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } == 1 {
        std::process::exit(0);
    }
}

/// Prints Envoy's access-log lines (they go to its stdout, i.e. `envoy.log`) as they appear.
fn follow_access_log(path: std::path::PathBuf) {
    std::thread::spawn(move || {
        let Ok(mut file) = std::fs::File::open(&path) else { return };
        let _ = file.seek(std::io::SeekFrom::End(0));
        let mut reader = std::io::BufReader::new(file);
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => std::thread::sleep(Duration::from_millis(200)),
                Ok(_) if line.contains("switchyard=") => print!("access: {line}"),
                Ok(_) => {}
            }
        }
    });
}

fn main() {
    if std::env::args().any(|a| a == "--print-config") {
        print!("{}", demo::example_yaml("target/wasm32-wasip1/release/switchyard.wasm".into()));
        return;
    }
    die_with_parent();
    let mocks_only = std::env::args().any(|a| a == "--mocks-only");
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("switchyard-demo: {e}");
            std::process::exit(1);
        }
    };
    let code = rt.block_on(async {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return 1,
        };
        if mocks_only {
            let base = arg("--provider-port", demo::EXAMPLE_PROVIDER_PORT);
            let providers = match demo::start_providers(base).await {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("switchyard-demo: {e}");
                    return 1;
                }
            };
            println!("READY mocks");
            for p in &providers {
                println!("  mock provider {:<17} 127.0.0.1:{}", p.name, p.addr.port());
            }
            let aws: Vec<String> =
                switchyard_integration::envoy::TEST_AWS_ENV.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!("Now, from the repository root (the fake AWS keys the mock Bedrock verifies):");
            println!("  {} .venv/bin/envoy -c envoy/switchyard-demo.yaml --base-id 7", aws.join(" "));
            println!("Ctrl-C to stop.");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return 0;
        }
        if std::env::args().any(|a| a == "--azure") {
            let stack =
                match switchyard_integration::azure_stack::start(arg("--port", 10000), arg("--admin-port", 9901)).await
                {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("switchyard-demo: {e}");
                        return 1;
                    }
                };
            println!("READY {}", stack.envoy.port);
            println!("  mock provider {:<17} 127.0.0.1:{}", stack.azure.name, stack.azure.addr.port());
            println!("  mock IMDS 127.0.0.1:{}", stack.imds.addr.port());
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            drop(stack);
            return 0;
        }
        let stack = match demo::start(arg("--port", 10000), arg("--admin-port", 9901), arg("--provider-port", 0)).await
        {
            Ok(s) => s,
            Err(e) => {
                eprintln!("switchyard-demo: {e}");
                return 1;
            }
        };
        let port = stack.envoy.port;
        println!("READY {port}");
        println!(
            "Switchyard demo: Envoy (pid {}) on 127.0.0.1:{port}, config and log in {}",
            stack.envoy.pid(),
            stack.envoy.dir.display()
        );
        for p in &stack.providers {
            println!("  mock provider {:<17} 127.0.0.1:{}", p.name, p.addr.port());
        }
        println!("\nExamples (what each shows, then the status to expect):");
        for (i, e) in examples(port).iter().enumerate() {
            println!("\n[{}] {}\n    expect: {}\n  {}", i + 1, e.shows, e.expect, e.command);
        }
        println!("\nMetrics:    curl -s http://{}/stats/prometheus | grep '^switchyard_'", stack.envoy.admin);
        println!("Access log: printed below as `access: ...` (one line per request, from Switchyard's filter state).");
        println!("Stop:       Ctrl-C (stops Envoy and the mock providers; so does stopping make).\n");
        follow_access_log(stack.envoy.dir.join("envoy.log"));
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        drop(stack);
        0
    });
    std::process::exit(code);
}
