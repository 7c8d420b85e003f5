//! A simulated provider market for `make bench-routing`: several endpoints of one model, each
//! with its own list prices (cached prompt tokens included), TTFT and throughput
//! distributions, error rate, malformed-tool-call rate, a capacity above which it answers 429
//! (and a latency that rises as it approaches it), outages and recoveries on the market clock,
//! and a prompt cache that only a conversation returning to the same endpoint hits.
//!
//! The market's parameters live in one file (`integration/market/default.json`); the harness
//! (`switchyard-market`) runs the same open-loop traffic through two Envoys, one per default
//! policy, alternating them in matched time blocks (a switchback) and compares them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::mock::ChannelBody;
pub use crate::rng::Rng;

/// One endpoint of the market.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub name: String,
    pub prompt: f64,
    pub completion: f64,
    pub cached_prompt: f64,
    pub ttft_ms: f64,
    pub ttft_spread: f64,
    pub tps: f64,
    pub error_rate: f64,
    pub malformed_tool_rate: f64,
    pub capacity: usize,
    /// TTFT grows by this factor x (load / capacity)^2.
    pub load_slowdown: f64,
    /// Answers 503 between these market seconds.
    pub outage: Option<(f64, f64)>,
    /// Fails `degraded_error_rate` of requests until then (a provider recovering).
    pub degraded_until_s: Option<f64>,
    pub degraded_error_rate: f64,
    /// Recurring bursts of total failure: every attempt that arrives in one fails.
    pub bursts: Option<Bursts>,
}

/// Bursts of total failure on an endpoint's market clock: from `first_s`, every `every_s`,
/// each `length_s` long; `reset_share` of the failed attempts have their connection reset, the
/// others get a 503.
#[derive(Clone, Copy, Debug)]
pub struct Bursts {
    pub first_s: f64,
    pub every_s: f64,
    pub length_s: f64,
    pub reset_share: f64,
}

impl Bursts {
    /// Seconds since the start of the burst `at_s` falls in, if it falls in one.
    pub fn into_burst(&self, at_s: f64) -> Option<f64> {
        if at_s < self.first_s || self.every_s <= 0.0 {
            return None;
        }
        let since = (at_s - self.first_s) % self.every_s;
        (since < self.length_s).then_some(since)
    }

    /// Seconds since the end of the last burst before `at_s` (None before the first ends).
    pub fn since_end(&self, at_s: f64) -> Option<f64> {
        if at_s < self.first_s + self.length_s || self.every_s <= 0.0 {
            return None;
        }
        let since = (at_s - self.first_s) % self.every_s;
        (since >= self.length_s).then_some(since - self.length_s)
    }
}

#[derive(Clone, Debug)]
pub struct Market {
    pub model: String,
    pub requests_per_s: f64,
    pub block_s: f64,
    pub blocks: usize,
    pub warmup_s: f64,
    pub completion_mean: f64,
    pub completion_spread: f64,
    pub prompt_mean: f64,
    pub prompt_spread: f64,
    pub stream_share: f64,
    pub tools_share: f64,
    pub conversation_share: f64,
    pub turns: usize,
    pub endpoints: Vec<Endpoint>,
}

fn num(v: &Value, k: &str, default: f64) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(default)
}

impl Market {
    pub fn parse(text: &str) -> Result<Market, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("market file: {e}"))?;
        let endpoints = v["endpoints"]
            .as_array()
            .ok_or("market file: endpoints must be a list")?
            .iter()
            .map(|e| Endpoint {
                name: e["name"].as_str().unwrap_or("unnamed").to_string(),
                prompt: num(e, "prompt", 1.0),
                completion: num(e, "completion", 1.0),
                cached_prompt: num(e, "cached_prompt", num(e, "prompt", 1.0)),
                ttft_ms: num(e, "ttft_ms", 100.0),
                ttft_spread: num(e, "ttft_spread", 0.3),
                tps: num(e, "tps", 100.0),
                error_rate: num(e, "error_rate", 0.0),
                malformed_tool_rate: num(e, "malformed_tool_rate", 0.0),
                capacity: num(e, "capacity", 1e6) as usize,
                load_slowdown: num(e, "load_slowdown", 0.0),
                outage: e.get("outage").map(|o| (num(o, "from_s", 0.0), num(o, "to_s", 0.0))),
                degraded_until_s: e.get("degraded_until_s").and_then(Value::as_f64),
                degraded_error_rate: num(e, "degraded_error_rate", 0.0),
                bursts: e.get("bursts").map(|b| Bursts {
                    first_s: num(b, "first_s", 10.0),
                    every_s: num(b, "every_s", 10.0),
                    length_s: num(b, "length_s", 1.5),
                    reset_share: num(b, "reset_share", 0.5),
                }),
            })
            .collect();
        Ok(Market {
            model: v["model"].as_str().unwrap_or("market/model").to_string(),
            requests_per_s: num(&v, "requests_per_s", 20.0),
            block_s: num(&v, "block_s", 20.0),
            blocks: num(&v, "blocks", 6.0) as usize,
            warmup_s: num(&v, "warmup_s", 5.0),
            completion_mean: num(&v["completion_tokens"], "mean", 200.0),
            completion_spread: num(&v["completion_tokens"], "spread", 0.5),
            prompt_mean: num(&v["prompt_tokens"], "mean", 800.0),
            prompt_spread: num(&v["prompt_tokens"], "spread", 0.5),
            stream_share: num(&v["mix"], "stream", 0.5),
            tools_share: num(&v["mix"], "tools", 0.2),
            conversation_share: num(&v["mix"], "conversation", 0.3),
            turns: num(&v["mix"], "turns", 3.0) as usize,
            endpoints,
        })
    }

    /// The Switchyard catalog for this market (one provider per endpoint) under `policy`.
    pub fn catalog(&self, policy: &str) -> Value {
        let providers: serde_json::Map<String, Value> = self
            .endpoints
            .iter()
            .map(|e| {
                let spec = json!({"cluster": format!("m_{}", e.name), "authority": format!("{}.market", e.name), "credential": {"value": format!("key-{}", e.name)}});
                (e.name.clone(), spec)
            })
            .collect();
        let endpoints: Vec<Value> = self
            .endpoints
            .iter()
            .map(|e| {
                json!({"provider": e.name, "upstream_model": format!("{}-model", e.name),
                "pricing": {"prompt": e.prompt, "completion": e.completion, "cached_prompt": e.cached_prompt},
                "supported_parameters": ["tools", "tool_choice", "max_tokens", "temperature"]})
            })
            .collect();
        json!({"providers": providers, "models": {self.model.clone(): {"endpoints": endpoints}},
               "routing": {"default_policy": policy, "max_attempts": 4, "expected_completion_tokens": self.completion_mean.round() as u64}})
    }
}

/// One attempt as the market endpoint saw it.
#[derive(Clone, Debug)]
pub struct AttemptLog {
    pub request: String,
    pub endpoint: String,
    pub status: u16,
    /// Market seconds at arrival.
    pub at_s: f64,
    pub duration_ms: f64,
}

struct EndpointState {
    spec: Endpoint,
    in_flight: AtomicUsize,
    /// Conversation -> prompt tokens of its last turn here (the endpoint's prompt cache).
    cache: Mutex<HashMap<String, u64>>,
    seq: AtomicU64,
}

/// The running market: its endpoints' addresses and the attempt log.
pub struct RunningMarket {
    pub addrs: Vec<(String, SocketAddr)>,
    pub log: Arc<Mutex<Vec<AttemptLog>>>,
    pub clock: Instant,
}

pub async fn start(market: &Market, clock: Instant) -> std::io::Result<RunningMarket> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut addrs = Vec::new();
    for spec in &market.endpoints {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        addrs.push((spec.name.clone(), listener.local_addr()?));
        let state = Arc::new(EndpointState {
            spec: spec.clone(),
            in_flight: AtomicUsize::new(0),
            cache: Mutex::new(HashMap::new()),
            seq: AtomicU64::new(0),
        });
        let (log, completion) = (Arc::clone(&log), (market.completion_mean, market.completion_spread));
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let _ = stream.set_nodelay(true);
                let (state, log) = (Arc::clone(&state), Arc::clone(&log));
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        serve(Arc::clone(&state), Arc::clone(&log), clock, completion, req)
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
    }
    Ok(RunningMarket { addrs, log, clock })
}

struct InFlight(Arc<EndpointState>);
impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn error(status: u16, retry_after: Option<u32>) -> Response<ChannelBody> {
    let body = json!({"error": {"message": "market failure", "type": "provider_error", "code": status}}).to_string();
    let (tx, rx) = mpsc::channel(1);
    let _ = tx.try_send(Ok(Bytes::from(body.clone())));
    let mut b = Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("content-length", body.len());
    if let Some(s) = retry_after {
        b = b.header("retry-after", s.to_string());
    }
    b.body(ChannelBody(rx)).unwrap_or_else(|_| Response::new(ChannelBody(mpsc::channel(1).1)))
}

async fn serve(
    state: Arc<EndpointState>,
    log: Arc<Mutex<Vec<AttemptLog>>>,
    clock: Instant,
    completion: (f64, f64),
    req: Request<Incoming>,
) -> Result<Response<ChannelBody>, Box<dyn std::error::Error + Send + Sync>> {
    let request = req.headers().get("x-test-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let body = req.into_body().collect().await?.to_bytes();
    let started = Instant::now();
    let at_s = clock.elapsed().as_secs_f64();
    let spec = &state.spec;
    let seq = state.seq.fetch_add(1, Ordering::Relaxed);
    let mut rng = Rng::new(seq ^ (at_s.to_bits()) ^ (spec.name.len() as u64) << 40);
    let record = |status: u16, ms: f64| {
        if let Ok(mut g) = log.lock() {
            g.push(AttemptLog { request: request.clone(), endpoint: spec.name.clone(), status, at_s, duration_ms: ms });
        }
    };
    let n = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let guard = InFlight(Arc::clone(&state));
    if n > spec.capacity {
        record(429, 1.0);
        return Ok(error(429, Some(1)));
    }
    let load = n as f64 / spec.capacity.max(1) as f64;
    let ttft = rng.lognormal(spec.ttft_ms, spec.ttft_spread) * (1.0 + spec.load_slowdown * load * load);
    let in_outage = spec.outage.is_some_and(|(a, b)| at_s >= a && at_s < b);
    let err_rate =
        if spec.degraded_until_s.is_some_and(|t| at_s < t) { spec.degraded_error_rate } else { spec.error_rate };
    if in_outage {
        tokio::time::sleep(Duration::from_millis(15)).await;
        record(503, started.elapsed().as_secs_f64() * 1000.0);
        return Ok(error(503, None));
    }
    if let Some(b) = spec.bursts.filter(|b| b.into_burst(at_s).is_some()) {
        // Total failure, as a provider falling over looks: fast 503s and reset connections.
        tokio::time::sleep(Duration::from_millis(10)).await;
        if rng.unit() < b.reset_share {
            record(0, started.elapsed().as_secs_f64() * 1000.0);
            return Err("market burst: connection reset".into());
        }
        record(503, started.elapsed().as_secs_f64() * 1000.0);
        return Ok(error(503, None));
    }
    if rng.unit() < err_rate {
        tokio::time::sleep(Duration::from_secs_f64(ttft / 2000.0)).await;
        record(500, started.elapsed().as_secs_f64() * 1000.0);
        return Ok(error(500, None));
    }
    let req_json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let stream = req_json["stream"].as_bool().unwrap_or(false);
    let tools = req_json.get("tools").is_some();
    let conversation = req_json["user"].as_str().unwrap_or("").to_string();
    let prompt_tokens = (body.len() as u64).div_ceil(4);
    let cached = if conversation.is_empty() {
        0
    } else {
        let mut cache = state.cache.lock().map_err(|_| "cache lock")?;
        let hit = cache.get(&conversation).copied().unwrap_or(0).min(prompt_tokens);
        cache.insert(conversation, prompt_tokens);
        hit
    };
    let completion_tokens = rng.lognormal(completion.0, completion.1).round().clamp(1.0, 8192.0) as u64;
    let malformed = tools && rng.unit() < spec.malformed_tool_rate;
    let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens, "prompt_tokens_details": {"cached_tokens": cached}});
    let generate_s = completion_tokens as f64 / spec.tps.max(1.0);
    tokio::time::sleep(Duration::from_secs_f64(ttft / 1000.0)).await;
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let name = spec.name.clone();
    let args = if malformed { r#"{"city": Paris"# } else { r#"{"city":"Paris"}"# };
    if stream {
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let _guard = guard;
            let chunk = |delta: Value, usage: Option<&Value>| {
                let mut v = json!({"object": "chat.completion.chunk", "model": name, "choices": [{"index": 0, "delta": delta}]});
                if let Some(u) = usage {
                    v["usage"] = u.clone();
                }
                Bytes::from(format!("data: {v}\n\n"))
            };
            if tools {
                let _ = tx.send(Ok(chunk(json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}), None))).await;
            }
            let pieces = (completion_tokens / 10).max(1);
            for i in 0..pieces {
                tokio::time::sleep(Duration::from_secs_f64(generate_s / pieces as f64)).await;
                let delta = if tools {
                    let part = if i == 0 { args } else { "" };
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
                } else {
                    json!({"content": "tok tok tok tok tok tok tok tok tok tok "})
                };
                if tx.send(Ok(chunk(delta, None))).await.is_err() {
                    return;
                }
            }
            let _ = tx.send(Ok(chunk(json!({}), Some(&usage)))).await;
            let _ = tx.send(Ok(Bytes::from_static(b"data: [DONE]\n\n"))).await;
            drop(state);
        });
        record(200, ttft + generate_s * 1000.0);
        Ok(Response::builder().status(200).header("content-type", "text/event-stream").body(ChannelBody(rx))?)
    } else {
        tokio::time::sleep(Duration::from_secs_f64(generate_s)).await;
        drop(guard);
        let message = if tools {
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": args}}]})
        } else {
            json!({"role": "assistant", "content": "tok ".repeat(completion_tokens.min(64) as usize)})
        };
        let out = json!({"object": "chat.completion", "model": name, "choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage}).to_string();
        let _ = tx.try_send(Ok(Bytes::from(out.clone())));
        record(200, started.elapsed().as_secs_f64() * 1000.0);
        Ok(Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .header("content-length", out.len())
            .body(ChannelBody(rx))?)
    }
}
