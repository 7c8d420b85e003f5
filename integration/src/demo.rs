//! The demo stack behind `make run` (and the Python SDK tests): a few mock providers on
//! 127.0.0.1, a catalog that routes models across them (deepinfra and together also speak
//! Anthropic's Messages API and Google's Gemini API, anthropic-direct the Messages API,
//! google-ai-studio the Gemini API, google-vertex Claude and Gemini as Google Vertex AI serves
//! them, amazon-bedrock Claude on Amazon Bedrock, signed by Envoy), and Envoy with the filter.

use serde_json::{json, Value};

use std::path::PathBuf;

use crate::envoy::{wasm_path, ClusterSpec, Envoy, PolicyRoute, StackConfig};
use crate::mock::{Behavior, MockProvider};

/// Demo providers: (slug, cluster, authority).
pub const DEMO_PROVIDERS: [(&str, &str, &str); 7] = [
    ("deepinfra", "provider_deepinfra", "api.deepinfra.example"),
    ("together", "provider_together", "api.together.example"),
    ("fireworks", "provider_fireworks", "api.fireworks.example"),
    ("anthropic-direct", "provider_anthropic", "api.anthropic.example"),
    ("google-ai-studio", "provider_google", "generativelanguage.example"),
    ("google-vertex", "provider_vertex", "us-east5-aiplatform.googleapis.com"),
    ("amazon-bedrock", "provider_bedrock", "bedrock-runtime.us-east-1.amazonaws.com"),
];

/// The demo catalog. Keys are literal demo values, never real secrets.
pub fn demo_catalog() -> Value {
    json!({
        "providers": {
            // Plays every API, OpenAI's Responses API included (as OpenAI serves it).
            "deepinfra": {"cluster": "provider_deepinfra", "authority": "api.deepinfra.example",
                          "credential": {"value": "demo-deepinfra-key"}, "tags": ["us", "contract-2026"],
                          "apis": {"openai": {}, "openai_responses": {}, "anthropic": {}, "google": {}},
                          "data_policy": {"retains_data": false, "trains_on_data": false, "zdr": true}},
            "together": {"cluster": "provider_together", "authority": "api.together.example",
                         "credential": {"value": "demo-together-key"}, "tags": ["us"],
                         "apis": {"openai": {}, "anthropic": {}, "google": {}},
                         "data_policy": {"retains_data": true, "trains_on_data": false, "zdr": false}},
            "fireworks": {"cluster": "provider_fireworks", "authority": "api.fireworks.example",
                          "credential": {"value": "demo-fireworks-key"}, "tags": ["eu"],
                          "data_policy": {"retains_data": false, "trains_on_data": false, "zdr": false}},
            // Speaks Anthropic's Messages API (x-api-key) and its OpenAI-compatible API.
            "anthropic-direct": {"cluster": "provider_anthropic", "authority": "api.anthropic.example",
                                 "credential": {"header": "x-api-key", "prefix": "", "value": "demo-anthropic-key"},
                                 "apis": {"anthropic": {}, "openai": {}},
                                 "byok": true, "tags": ["us", "hipaa", "contract-2026"],
                                 "data_policy": {"retains_data": false, "trains_on_data": false, "zdr": true}},
            // Speaks Google's generateContent API (x-goog-api-key, /v1beta) and its OpenAI-compatible
            // API under /v1beta/openai.
            "google-ai-studio": {"cluster": "provider_google", "authority": "generativelanguage.example",
                                 "credential": {"value": "demo-google-key"},
                                 "apis": {"google": {}, "openai": {"path_prefix": "/v1beta/openai"}},
                                 "tags": ["us"],
                                 "data_policy": {"retains_data": true, "trains_on_data": false, "zdr": false}},
            // Google Vertex AI in us-east5 (kind vertex, docs/vertex.md): Claude and Gemini, an
            // access token as a bearer that the mock accepts (mock/vertex.rs).
            "google-vertex": {"cluster": "provider_vertex", "authority": "us-east5-aiplatform.googleapis.com",
                              "kind": "vertex", "kind_options": {"project": crate::mock::vertex::PROJECT, "location": "us-east5"},
                              "credential": {"value": crate::mock::vertex::TOKEN},
                              "apis": {"anthropic": {}, "google": {}}, "tags": ["us"],
                              "data_policy": {"retains_data": true, "trains_on_data": false, "zdr": false}},
            // Claude on Amazon Bedrock: no credential, so Envoy signs each attempt (SigV4, the
            // test kit's fake keys, `envoy::TEST_AWS_ENV`) and the mock recomputes the signature.
            "amazon-bedrock": {"cluster": "provider_bedrock", "authority": "bedrock-runtime.us-east-1.amazonaws.com",
                               "kind": "bedrock", "apis": {"anthropic": {}}, "tags": ["us"],
                               "data_policy": {"retains_data": false, "trains_on_data": false, "zdr": false}}
        },
        "models": {
            "meta-llama/llama-4-maverick": {
                "distillable": true,
                "cost_tier": "low",
                "input_modalities": ["text", "image"],
                "endpoints": [
                    {"provider": "deepinfra/turbo", "upstream_model": "meta-llama/Llama-4-Maverick-17B-128E-Instruct-Turbo",
                     "pricing": {"prompt": 0.5, "completion": 1.5}, "quantization": "fp8", "context_length": 131072,
                     "supported_parameters": ["max_tokens", "temperature", "tools", "tool_choice", "response_format"]},
                    {"provider": "together", "upstream_model": "meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8",
                     "pricing": {"prompt": 0.27, "completion": 0.85}, "quantization": "fp8", "context_length": 1048576,
                     "supported_parameters": ["max_tokens", "temperature", "tools", "tool_choice"]},
                    {"provider": "fireworks", "upstream_model": "accounts/fireworks/models/llama4-maverick-instruct-basic",
                     "pricing": {"prompt": 0.22, "completion": 0.88}, "quantization": "bf16", "context_length": 1048576,
                     "supported_parameters": ["max_tokens", "temperature"]}
                ]
            },
            "anthropic/claude-sonnet-4-6": {
                "cost_tier": "high",
                "input_modalities": ["text", "image", "file"],
                "endpoints": [
                    {"provider": "anthropic-direct", "upstream_model": "claude-sonnet-4-6",
                     "pricing": {"prompt": 3, "completion": 15}, "context_length": 200000,
                     "supported_parameters": ["max_tokens", "temperature", "tools", "tool_choice"]}
                ]
            },
            // The clouds' failover (`make run`, README): Anthropic first, then Claude on Bedrock,
            // then on Google Vertex AI. Its own model, so the SDK tests' Claude models keep their
            // single provider.
            "anthropic/claude-sonnet-4-5": {
                "cost_tier": "high",
                "input_modalities": ["text", "image", "file"],
                "endpoints": [
                    {"provider": "anthropic-direct", "upstream_model": "claude-sonnet-4-5", "apis": ["anthropic"],
                     "pricing": {"prompt": 3, "completion": 15, "cached_prompt": 0.3}, "context_length": 200000,
                     "supported_parameters": ["max_tokens", "temperature", "tools", "tool_choice"]},
                    {"provider": "amazon-bedrock", "upstream_model": "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
                     "region": "us-east-1",
                     "pricing": {"prompt": 3, "completion": 15, "cached_prompt": 0.3}, "context_length": 200000,
                     "supported_parameters": ["max_tokens", "temperature", "tools", "tool_choice"]},
                    {"provider": "google-vertex", "upstream_model": "claude-sonnet-4-5@20250929", "apis": ["anthropic"],
                     "pricing": {"prompt": 3, "completion": 15, "cached_prompt": 0.3}, "context_length": 200000,
                     "supported_parameters": ["max_tokens", "temperature", "tools", "tool_choice"]}
                ]
            },
            // Bedrock's non-Anthropic models go through Converse / ConverseStream
            // (`docs/bedrock.md`): Amazon Nova Pro, served by Bedrock only.
            "amazon/nova-pro-v1": {
                "cost_tier": "medium",
                "input_modalities": ["text", "image"],
                "endpoints": [
                    {"provider": "amazon-bedrock", "upstream_model": "us.amazon.nova-pro-v1:0", "region": "us-east-1",
                     "pricing": {"prompt": 0.8, "completion": 3.2, "cached_prompt": 0.2}, "context_length": 300000,
                     "supported_parameters": ["max_tokens", "temperature", "top_p", "tools", "tool_choice", "stop"]}
                ]
            },
            "anthropic/claude-opus-4-6": {
                "cost_tier": "xhigh",
                "input_modalities": ["text", "image", "file"],
                "endpoints": [
                    {"provider": "anthropic-direct", "upstream_model": "claude-opus-4-6",
                     "pricing": {"prompt": 15, "completion": 75}, "context_length": 200000,
                     "supported_parameters": ["max_tokens", "temperature", "tools", "tool_choice", "reasoning"]}
                ]
            },
            "qwen/qwen3-coder": {
                "cost_tier": "low",
                "endpoints": [
                    {"provider": "together", "upstream_model": "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8",
                     "pricing": {"prompt": 2, "completion": 2}, "quantization": "fp8", "context_length": 262144,
                     "supported_parameters": ["max_tokens", "temperature", "tools", "tool_choice", "response_format"]},
                    {"provider": "deepinfra", "upstream_model": "Qwen/Qwen3-Coder-480B-A35B-Instruct",
                     "pricing": {"prompt": 0.4, "completion": 1.6}, "quantization": "fp8", "context_length": 262144,
                     "supported_parameters": ["max_tokens", "temperature", "tools", "tool_choice", "response_format"]}
                ]
            },
            "deepseek/deepseek-r1": {
                "cost_tier": "medium",
                "endpoints": [
                    {"provider": "deepinfra", "upstream_model": "deepseek-ai/DeepSeek-R1-0528",
                     "pricing": {"prompt": 0.5, "completion": 2.15}, "quantization": "fp8", "context_length": 163840,
                     "supported_parameters": ["max_tokens", "temperature", "reasoning"]},
                    {"provider": "together", "upstream_model": "deepseek-ai/DeepSeek-R1",
                     "pricing": {"prompt": 3, "completion": 7}, "quantization": "fp8", "context_length": 163840,
                     "supported_parameters": ["max_tokens", "temperature", "reasoning"]}
                ]
            },
            "google/gemini-2.5-flash": {
                "cost_tier": "low",
                "input_modalities": ["text", "image", "audio", "video", "file"],
                "endpoints": [
                    {"provider": "google-ai-studio", "upstream_model": "gemini-2.5-flash",
                     "pricing": {"prompt": 0.3, "completion": 2.5, "cached_prompt": 0.075}, "context_length": 1048576,
                     "supported_parameters": ["max_tokens", "temperature", "top_p", "tools", "tool_choice", "response_format", "reasoning"]}
                ]
            },
            // Served by one API each (the endpoint's `apis` narrows its provider's): every other
            // API's callers reach them translated (docs/translation.md).
            "anthropic/claude-haiku-4-5": {
                "cost_tier": "low",
                "endpoints": [
                    {"provider": "anthropic-direct", "upstream_model": "claude-haiku-4-5", "apis": ["anthropic"],
                     "pricing": {"prompt": 1, "completion": 5, "cached_prompt": 0.1}, "context_length": 200000}
                ]
            },
            "google/gemini-2.5-pro": {
                "cost_tier": "medium",
                "endpoints": [
                    {"provider": "google-ai-studio", "upstream_model": "gemini-2.5-pro", "apis": ["google"],
                     "pricing": {"prompt": 1.25, "completion": 10, "cached_prompt": 0.31}, "context_length": 1048576}
                ]
            },
            // Served only by Vertex: every caller reaches Claude and Gemini as Vertex serves them.
            "anthropic/claude-sonnet-4.5": {
                "cost_tier": "high",
                "endpoints": [
                    {"provider": "google-vertex", "upstream_model": "claude-sonnet-4-5@20250929", "apis": ["anthropic"],
                     "pricing": {"prompt": 3, "completion": 15}, "context_length": 200000,
                     "supported_parameters": ["max_tokens", "temperature", "tools", "tool_choice"]}
                ]
            },
            "google/gemini-2.5-flash-lite": {
                "cost_tier": "low",
                "endpoints": [
                    {"provider": "google-vertex", "upstream_model": "gemini-2.5-flash-lite", "apis": ["google"],
                     "pricing": {"prompt": 0.1, "completion": 0.4}, "context_length": 1048576,
                     "supported_parameters": ["max_tokens", "temperature", "tools", "tool_choice"]}
                ]
            },
            "mistralai/mistral-small-3.2": {
                "cost_tier": "low",
                "endpoints": [
                    {"provider": "fireworks", "upstream_model": "accounts/fireworks/models/mistral-small-3p2",
                     "pricing": {"prompt": 0.1, "completion": 0.3}, "context_length": 131072}
                ]
            },
            // Only OpenAI-compatible chat endpoints (together narrowed to its OpenAI API): an
            // Anthropic caller such as Claude Code reaches it translated, and fails over
            // between the two.
            "moonshotai/kimi-k2": {
                "cost_tier": "low",
                "endpoints": [
                    {"provider": "fireworks", "upstream_model": "accounts/fireworks/models/kimi-k2-instruct",
                     "pricing": {"prompt": 0.6, "completion": 2.5}, "context_length": 131072,
                     "supported_parameters": ["max_tokens", "temperature", "tools", "tool_choice"]},
                    {"provider": "together", "upstream_model": "moonshotai/Kimi-K2-Instruct", "apis": ["openai"],
                     "pricing": {"prompt": 1, "completion": 3}, "context_length": 131072,
                     "supported_parameters": ["max_tokens", "temperature", "tools", "tool_choice"]}
                ]
            },
            "google/gemma-3-27b-it": {
                "cost_tier": "low",
                "input_modalities": ["text", "image"],
                "endpoints": [
                    {"provider": "deepinfra", "upstream_model": "google/gemma-3-27b-it",
                     "pricing": {"prompt": 0.09, "completion": 0.17}, "quantization": "bf16", "context_length": 131072,
                     "supported_parameters": ["max_tokens", "temperature", "response_format"]},
                    {"provider": "together", "upstream_model": "google/gemma-3-27b-it",
                     "pricing": {"prompt": 0.2, "completion": 0.2}, "quantization": "bf16", "context_length": 131072,
                     "supported_parameters": ["max_tokens", "temperature"]}
                ]
            }
        },
        "routing": {"default_policy": "price_weighted", "debug_header": true},
        // `model: "auto"`: per task type, candidate models with preference weights (higher is
        // better); the request's cost tier (default medium) caps the price class.
        "auto": {
            "default_cost_tier": "medium",
            "max_models": 3,
            "long_context_tokens": 32000,
            "tasks": {
                "code": {"anthropic/claude-opus-4-6": 1.0, "anthropic/claude-sonnet-4-6": 0.95,
                         "qwen/qwen3-coder": 0.85, "deepseek/deepseek-r1": 0.6},
                "reasoning": {"anthropic/claude-opus-4-6": 1.0, "deepseek/deepseek-r1": 0.9,
                              "anthropic/claude-sonnet-4-6": 0.85},
                "long_context": {"meta-llama/llama-4-maverick": 1.0, "anthropic/claude-sonnet-4-6": 0.9,
                                 "qwen/qwen3-coder": 0.6},
                "tool_use": {"anthropic/claude-sonnet-4-6": 1.0, "qwen/qwen3-coder": 0.85,
                             "meta-llama/llama-4-maverick": 0.6},
                "structured_output": {"qwen/qwen3-coder": 0.9, "meta-llama/llama-4-maverick": 0.8,
                                      "google/gemma-3-27b-it": 0.6},
                "chat": {"anthropic/claude-sonnet-4-6": 1.0, "meta-llama/llama-4-maverick": 0.9,
                         "google/gemma-3-27b-it": 0.7}
            }
        },
        // Compliance routes: the finance route (or a finance-namespace workload, or a JWT with
        // tenant=finance) only ever reaches ZDR providers under contract, with no fallback
        // elsewhere; the EU route only EU providers; everyone else the open policy.
        "policies": {
            "finance": {"only": ["deepinfra", "anthropic-direct"], "zdr": true, "data_collection": "deny",
                        "allow_fallbacks": false, "require_tags": ["contract-2026"],
                        "allowed_models": ["meta-llama/*", "anthropic/*"], "request_provider": "narrow_only",
                        "max_attempts": 2},
            "eu": {"require_tags": ["eu"], "data_collection": "deny"},
            "open": {}
        },
        "policy_selection": {
            "rules": [
                {"policy": "finance", "route": "finance"},
                {"policy": "finance", "peer_uri_san": "spiffe://cluster.local/ns/finance/*"},
                {"policy": "finance", "jwt_claim": {"claim": "tenant", "value": "finance"}},
                {"policy": "eu", "route": "eu"}
            ],
            "default": "open"
        }
    })
}

/// The demo stack's configuration: providers on `provider_ports[i]`, no pass-through cluster
/// (unrouted requests get the filter's 404/405), a 4 MiB buffer limit.
fn demo_config(wasm: PathBuf, listener_port: u16, admin_port: u16, provider_ports: &[u16]) -> StackConfig {
    let clusters: Vec<ClusterSpec> = DEMO_PROVIDERS
        .iter()
        .zip(provider_ports)
        .map(|((_, cluster, _), &port)| ClusterSpec { name: cluster.to_string(), port })
        .collect();
    let mut cfg = StackConfig::new(demo_catalog(), clusters, None);
    cfg.wasm = wasm;
    cfg.listener_port = listener_port;
    cfg.admin_port = admin_port;
    cfg.buffer_limit_bytes = 4 * 1024 * 1024;
    cfg.policy_routes = vec![
        PolicyRoute { domain: "finance.llm.local".into(), policy: "finance".into() },
        PolicyRoute { domain: "eu.llm.local".into(), policy: "eu".into() },
    ];
    cfg.access_log = switchyard_deploy::envoy::AccessLog::Text;
    cfg
}

/// First mock-provider port of the committed example config (`switchyard-demo --mocks-only`
/// listens on this and the next ones, one per `DEMO_PROVIDERS` entry).
pub const EXAMPLE_PROVIDER_PORT: u16 = 18101;

/// The demo's Envoy bootstrap with fixed ports (listener 10000, admin 9901, providers from
/// 18101) and the `.wasm` path relative to the repository root: `envoy/switchyard-demo.yaml`.
pub fn example_config(wasm: PathBuf) -> StackConfig {
    let ports: Vec<u16> = (0..DEMO_PROVIDERS.len() as u16).map(|i| EXAMPLE_PROVIDER_PORT + i).collect();
    demo_config(wasm, 10000, 9901, &ports)
}

/// `envoy/switchyard-demo.yaml`: the header saying how to run it, then the generated bootstrap.
pub fn example_yaml(wasm: PathBuf) -> String {
    let mut out = String::new();
    for (i, (slug, _, _)) in DEMO_PROVIDERS.iter().enumerate() {
        if i == 0 {
            out.push_str(
                "# Generated by `switchyard-demo --print-config` (checked by integration/tests/example_config.rs).\n",
            );
            out.push_str(&format!(
                "# The Switchyard demo: Envoy 1.40 with the filter in its three roles and {} provider clusters.\n",
                DEMO_PROVIDERS.len()
            ));
            out.push_str("# Run it from the repository root, after `make wasm`:\n");
            out.push_str("#   1. the mock providers: target/release/switchyard-demo --mocks-only\n");
            out.push_str(
                "#      (build it with `cargo build --release -p switchyard-integration --bin switchyard-demo`);\n",
            );
            out.push_str("#      they listen on 127.0.0.1:\n");
        }
        out.push_str(&format!("#        {slug} {}\n", EXAMPLE_PROVIDER_PORT + i as u16));
    }
    out.push_str("#   2. .venv/bin/envoy -c envoy/switchyard-demo.yaml --base-id 7\n");
    out.push_str("#      with the mock Bedrock's fake AWS keys in Envoy's environment (it signs amazon-bedrock's\n");
    out.push_str("#      attempts): AWS_ACCESS_KEY_ID=");
    out.push_str(crate::mock::bedrock::ACCESS_KEY);
    out.push_str(" AWS_SECRET_ACCESS_KEY=");
    out.push_str(crate::mock::bedrock::SECRET_KEY);
    out.push_str("\n#      AWS_EC2_METADATA_DISABLED=true (`switchyard-demo --mocks-only` prints the command)\n");
    out.push_str("#   3. curl -s localhost:10000/v1/models   (admin: localhost:9901; `make run` does all of this)\n");
    out.push_str(&crate::envoy::to_yaml(&crate::envoy::bootstrap(&example_config(wasm))));
    out
}

/// The demo's mock providers on `base..` (one port per `DEMO_PROVIDERS` entry; 0 = any free ports). Must run inside a tokio
/// runtime.
pub async fn start_providers(base: u16) -> Result<Vec<MockProvider>, String> {
    let mut providers = Vec::new();
    for (i, (slug, _, _)) in DEMO_PROVIDERS.iter().enumerate() {
        let port = if base == 0 { 0 } else { base + i as u16 };
        let behavior = Behavior {
            ttft: std::time::Duration::from_millis(20),
            chunk_interval: std::time::Duration::from_millis(30),
            chunks: 5,
            ..Behavior::default()
        };
        providers.push(MockProvider::start(slug, port, behavior).await.map_err(|e| format!("mock {slug}: {e}"))?);
    }
    Ok(providers)
}

pub struct DemoStack {
    pub envoy: Envoy,
    pub providers: Vec<MockProvider>,
}

/// Starts the demo providers on `provider_base_port..` (0 = any free ports) and Envoy on
/// `listener_port` (0 = any free port). Must run inside a tokio runtime.
pub async fn start(listener_port: u16, admin_port: u16, provider_base_port: u16) -> Result<DemoStack, String> {
    let providers = start_providers(provider_base_port).await?;
    let ports: Vec<u16> = providers.iter().map(|p| p.addr.port()).collect();
    let mut cfg = demo_config(wasm_path(), listener_port, admin_port, &ports);
    if crate::envoy::Build::from_env() == crate::envoy::Build::Native {
        // The native build refuses JWT-claim rules (it cannot read nested dynamic metadata).
        if let Some(rules) = cfg.plugin_config["policy_selection"]["rules"].as_array_mut() {
            rules.retain(|r| r.get("jwt_claim").is_none());
        }
    }
    // Started on the caller's thread, not a blocking-pool thread: Envoy is killed when the
    // thread that started it exits (PR_SET_PDEATHSIG), and pool threads exit when idle.
    let envoy = Envoy::start(&cfg, "demo")?;
    Ok(DemoStack { envoy, providers })
}
