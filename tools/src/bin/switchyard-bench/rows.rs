//! The rows: the proxies measured side by side, each row's Envoy configuration, LiteLLM.

use super::*;

pub(super) enum Target {
    /// Reached at `addr`; `pid` is the proxy whose CPU and RSS are measured (none: direct).
    Up {
        addr: SocketAddr,
        pid: Option<u32>,
    },
    Down(String),
}

pub(super) struct Row {
    pub(super) name: String,
    pub(super) target: Target,
    /// The API the row's requests speak (`Caller::Chat` but for the Responses row).
    pub(super) caller: Caller,
}

/// The API a row's load generator speaks.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Caller {
    Chat,
    Responses,
    Anthropic,
}

impl Caller {
    pub(super) fn arg(self) -> &'static str {
        match self {
            Caller::Chat => "chat",
            Caller::Responses => "responses",
            Caller::Anthropic => "anthropic",
        }
    }
}

/// Keeps each row's processes alive for the run (dropping stops them).
#[derive(Default)]
pub(super) struct Keep {
    pub(super) envoys: Vec<Envoy>,
    pub(super) helpers: Vec<Helper>,
}

/// Starts an Envoy with `concurrency` workers, all its threads on `core`.
pub(super) fn start_envoy(boot: &Value, tag: &str, concurrency: u32, cores: &Cores) -> Result<Envoy, String> {
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

pub(super) struct Cores {
    pub(super) proxy: Option<usize>,
    pub(super) client: Option<usize>,
}

/// The Switchyard stack the tests and the demo use (the same generator), two providers on the mock.
pub(super) fn switchyard_config(port: u16) -> StackConfig {
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
pub(super) fn translated_config(port: u16) -> StackConfig {
    let mut cfg = switchyard_config(port);
    for p in ["fast", "cheap"] {
        cfg.plugin_config["providers"][p]["apis"] = json!({"anthropic": {}});
    }
    cfg
}

/// Claude on Amazon Bedrock (`kind: bedrock`, no key): Envoy's `aws_request_signing` signs each
/// attempt's final path and body (SigV4 over the body's SHA-256, the test kit's fake keys), the
/// answer is an AWS event stream the per-attempt filter decodes frame by frame.
pub(super) fn bedrock_config(port: u16) -> StackConfig {
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
pub(super) fn native_config(port: u16) -> StackConfig {
    let mut cfg = switchyard_config(port);
    cfg.build = Build::Native;
    cfg
}

/// Breakdown (measurement only): `cfg` as it was before first-attempt clusters, every attempt
/// through the per-attempt (upstream) filter of its build.
pub(super) fn every_attempt_filtered(mut cfg: StackConfig) -> Result<Value, String> {
    cfg.first_attempt_clusters = false;
    let boot = bootstrap(&cfg);
    if boot.to_string().contains("-first") {
        return Err("this build's configuration has no way to turn first-attempt clusters off".into());
    }
    Ok(boot)
}

/// Breakdown (measurement only): the decision filter and the first-attempt hook, routed requests
/// sent to one static first-attempt cluster (no metadata step, no priority groups).
pub(super) fn downstream_wasm_only(boot: &Value) -> Result<Value, String> {
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
pub(super) fn ensure_litellm(log: &Path) -> Result<PathBuf, String> {
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
pub(super) fn start_litellm(dir: &Path, mock_port: u16, cores: &Cores) -> Result<(Helper, SocketAddr), String> {
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

/// `cfg` with another build of the module or library at `alt` (`BENCH_ALT_WASM`,
/// `BENCH_ALT_NATIVE`; `set` puts it in place), or why that row cannot run.
pub(super) fn alt_build(
    mut cfg: StackConfig,
    alt: &Path,
    set: impl FnOnce(&mut StackConfig, PathBuf),
) -> Result<Value, String> {
    if !alt.is_file() {
        return Err(format!("{} not found", alt.display()));
    }
    set(&mut cfg, alt.to_path_buf());
    Ok(bootstrap(&cfg))
}
