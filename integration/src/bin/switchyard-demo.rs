//! `make run`: mock providers + Envoy with the Switchyard filter, answering real requests.
//!
//! Usage: switchyard-demo [--port N] [--admin-port N] [--provider-port N] | --print-config
//! Prints `READY <port>` once Envoy answers, then example curl calls; stops on Ctrl-C/SIGTERM.

use switchyard_integration::demo;

fn arg(name: &str, default: u16) -> u16 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    if std::env::args().any(|a| a == "--print-config") {
        let cfg = demo::example_config("target/wasm32-wasip1/release/switchyard.wasm".into());
        print!("{}", switchyard_integration::envoy::to_yaml(&switchyard_integration::envoy::bootstrap(&cfg)));
        return;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("switchyard-demo: {e}");
            std::process::exit(1);
        }
    };
    let code = rt.block_on(async {
        let stack = match demo::start(arg("--port", 10000), arg("--admin-port", 9901), arg("--provider-port", 0)).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("switchyard-demo: {e}");
                return 1;
            }
        };
        let port = stack.envoy.port;
        println!("READY {port}");
        println!("Switchyard demo: Envoy {} on 127.0.0.1:{port} (admin {}), config and log in {}", stack.envoy.pid(), stack.envoy.admin, stack.envoy.dir.display());
        for p in &stack.providers {
            println!("  mock provider {:<17} 127.0.0.1:{}", p.name, p.addr.port());
        }
        println!(
            r#"
Try:
  curl -s localhost:{port}/v1/chat/completions -H 'content-type: application/json' \
    -d '{{"model":"meta-llama/llama-4-maverick","messages":[{{"role":"user","content":"Hello"}}]}}' -D -

  curl -s localhost:{port}/v1/chat/completions -H 'content-type: application/json' -H 'x-switchyard-debug: 1' \
    -d '{{"model":"meta-llama/llama-4-maverick:floor","messages":[{{"role":"user","content":"Hi"}}],"provider":{{"ignore":["fireworks"]}}}}' -D -

  curl -sN localhost:{port}/v1/chat/completions -H 'content-type: application/json' \
    -d '{{"model":"meta-llama/llama-4-maverick","stream":true,"messages":[{{"role":"user","content":"Stream"}}],"provider":{{"order":["together"],"allow_fallbacks":false}}}}'

  curl -s localhost:{port}/v1/chat/completions -H 'content-type: application/json' \
    -d '{{"model":"meta-llama/llama-4-maverick","messages":[],"provider":{{"zdr":true,"data_collection":"deny","only":["together"]}}}}'

  # the finance compliance route (policy "finance"): tries to widen, stays inside the policy
  curl -s localhost:{port}/v1/chat/completions -H 'host: finance.llm.local' -H 'content-type: application/json' \
    -d '{{"model":"meta-llama/llama-4-maverick","messages":[],"provider":{{"order":["together"],"data_collection":"allow"}}}}' -D -
  # the access log line (policy, endpoint, model, attempts) is in the Envoy log above

  # the auto router: the model is picked per prompt (x-switchyard-model, strategy auto:code);
  # x-switchyard-auto explains the classification and the ranked candidates
  curl -s localhost:{port}/v1/chat/completions -H 'content-type: application/json' -H 'x-switchyard-debug: 1' \
    -d '{{"model":"openrouter/auto","messages":[{{"role":"user","content":"Fix this python bug: def f(x): return x+"}}],"plugins":[{{"id":"auto-router","cost_tier":"high","allowed_models":["anthropic/*","qwen/*"]}}]}}' -D -

Ctrl-C to stop."#
        );
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return 1,
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        drop(stack);
        0
    });
    std::process::exit(code);
}
