//! A rate limit service for the tests: Envoy's `RateLimitService/ShouldRateLimit` gRPC API over
//! HTTP/2, counting with Kuadrant's Limitador engine on Redis (its counters are shared by every
//! process that uses the same Redis, like a production deployment's replicas).
//!
//! It reads the limits in envoyproxy/ratelimit's configuration format (JSON is YAML), the file
//! `make render` writes from the catalog's `rate_limits`, and answers like envoyproxy/ratelimit:
//! a descriptor matches a configured chain of keys (a key with a `value` matches that value, one
//! without matches any, each distinct value its own counter); `hits_addend` is always added
//! (0 counts as 1); the descriptor is over limit when the count after adding exceeds the limit;
//! each status carries the remaining count and the time until the window resets.
//!
//! `switchyard-ratelimit --listen 127.0.0.1:0 --redis redis://127.0.0.1:6379/ --config FILE`
//! prints `listening on <addr>` once it serves.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use limitador::limit::{Expression, Limit};
use limitador::storage::redis::AsyncRedisStorage;
use limitador::AsyncRateLimiter;
use serde_json::Value;
use switchyard::limits::rls::{decode_request, encode_response, Code, Response as RlsResponse, Status};

/// One configured limit: the chain of keys it matches and its count per window.
#[derive(Debug, Clone, PartialEq)]
struct Leaf {
    chain: Vec<(String, Option<String>)>,
    max: u64,
    seconds: u64,
    namespace: String,
}

fn unit_seconds(unit: &str) -> Option<u64> {
    Some(match unit {
        "second" => 1,
        "minute" => 60,
        "hour" => 3600,
        "day" => 86_400,
        "week" => 7 * 86_400,
        "month" => 30 * 86_400,
        "year" => 365 * 86_400,
        _ => return None,
    })
}

fn leaves(
    domain: &str,
    nodes: &[Value],
    prefix: &[(String, Option<String>)],
    out: &mut Vec<Leaf>,
) -> Result<(), String> {
    for n in nodes {
        let key = n["key"].as_str().ok_or("a descriptor without key")?.to_string();
        let value = n["value"].as_str().map(str::to_string);
        let mut chain = prefix.to_vec();
        chain.push((key, value));
        if let Some(rl) = n.get("rate_limit") {
            let unit = rl["unit"].as_str().ok_or("rate_limit.unit")?;
            let seconds = unit_seconds(&unit.to_ascii_lowercase()).ok_or_else(|| format!("unknown unit {unit}"))?;
            let max = rl["requests_per_unit"].as_u64().ok_or("rate_limit.requests_per_unit")?;
            // One namespace per limit: Limitador applies every limit of a namespace to a
            // request, and each descriptor is checked alone here.
            let namespace = format!("{domain}/{}", out.len());
            out.push(Leaf { chain: chain.clone(), max, seconds, namespace });
        }
        if let Some(children) = n["descriptors"].as_array() {
            leaves(domain, children, &chain, out)?;
        }
    }
    Ok(())
}

fn load(config: &Value) -> Result<(String, Vec<Leaf>), String> {
    let domain = config["domain"].as_str().ok_or("no domain")?.to_string();
    let mut out = Vec::new();
    leaves(&domain, config["descriptors"].as_array().map(Vec::as_slice).unwrap_or(&[]), &[], &mut out)?;
    Ok((domain, out))
}

fn matching<'a>(leaves: &'a [Leaf], descriptor: &[(String, String)]) -> Option<&'a Leaf> {
    leaves.iter().find(|l| {
        l.chain.len() == descriptor.len()
            && l.chain.iter().zip(descriptor).all(|((k, v), (dk, dv))| k == dk && v.as_ref().is_none_or(|v| v == dv))
    })
}

struct Service {
    domain: String,
    leaves: Vec<Leaf>,
    limiter: AsyncRateLimiter,
}

impl Service {
    async fn should_rate_limit(&self, message: &[u8]) -> Result<RlsResponse, String> {
        let (domain, descriptors, hits) = decode_request(message).ok_or("malformed RateLimitRequest")?;
        let hits = u64::from(hits.max(1));
        let mut statuses = Vec::with_capacity(descriptors.len());
        for d in &descriptors {
            let leaf = (domain == self.domain).then(|| matching(&self.leaves, d)).flatten();
            let Some(leaf) = leaf else {
                statuses.push(Status { code: Code::Ok, remaining: u32::MAX, reset_s: None });
                continue;
            };
            let values: HashMap<String, String> = d.iter().cloned().collect();
            let ctx = limitador::limit::Context::from(values);
            let ns = leaf.namespace.as_str().into();
            // envoyproxy/ratelimit's semantics: the hits are added first (one atomic increment,
            // counted even over the limit), then the count after adding is compared with the
            // limit. Limitador's `check_rate_limited_and_update` reads the counter and adds in a
            // later round trip, so concurrent calls pass on the same reading. Read after adding,
            // the count includes what concurrent calls added meanwhile: never admits past it.
            self.limiter.update_counters(&ns, &ctx, hits).await.map_err(|e| e.to_string())?;
            let checked = self.limiter.is_rate_limited(&ns, &ctx, 0).await.map_err(|e| e.to_string())?;
            let counter = checked.counters.first();
            let remaining = counter.and_then(|c| c.remaining()).unwrap_or(0);
            let reset_s = counter.and_then(|c| c.expires_in()).map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0));
            statuses.push(Status {
                code: if checked.limited { Code::OverLimit } else { Code::Ok },
                remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
                reset_s: Some(reset_s.unwrap_or(leaf.seconds)),
            });
        }
        let overall = if statuses.iter().any(|s| s.code == Code::OverLimit) { Code::OverLimit } else { Code::Ok };
        Ok(RlsResponse { overall, statuses })
    }
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn grpc_reply(message: Option<Vec<u8>>, status: u32, detail: &str) -> Response<Body> {
    let mut frames: Vec<Result<Frame<Bytes>, Infallible>> = Vec::new();
    if let Some(m) = message {
        let mut framed = Vec::with_capacity(m.len() + 5);
        framed.push(0);
        framed.extend_from_slice(&(m.len() as u32).to_be_bytes());
        framed.extend_from_slice(&m);
        frames.push(Ok(Frame::data(Bytes::from(framed))));
    }
    let mut trailers = hyper::HeaderMap::new();
    trailers.insert("grpc-status", status.to_string().parse().expect("digits"));
    if !detail.is_empty() {
        if let Ok(v) = detail.parse() {
            trailers.insert("grpc-message", v);
        }
    }
    frames.push(Ok(Frame::trailers(trailers)));
    let body = Frames(frames.into());
    Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(BodyExt::boxed(body))
        .expect("static response parts")
}

/// A body of the given frames, in order.
struct Frames(std::collections::VecDeque<Result<Frame<Bytes>, Infallible>>);

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        std::task::Poll::Ready(self.0.pop_front())
    }
}

async fn handle(service: Arc<Service>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    if req.uri().path() != "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" {
        return Ok(grpc_reply(None, 12, "unimplemented"));
    }
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(grpc_reply(None, 13, "body")),
    };
    // One length-prefixed, uncompressed message.
    let Some(message) = body.get(5..) else { return Ok(grpc_reply(None, 13, "short message")) };
    Ok(match service.should_rate_limit(message).await {
        Ok(r) => grpc_reply(Some(encode_response(&r)), 0, ""),
        // The storage failed (Redis down): UNAVAILABLE, as Limitador's own server answers.
        Err(e) => {
            eprintln!("switchyard-ratelimit: {e}");
            grpc_reply(None, 14, "storage unavailable")
        }
    })
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(listen), Some(redis), Some(config)) =
        (arg(&args, "--listen"), arg(&args, "--redis"), arg(&args, "--config"))
    else {
        eprintln!("usage: switchyard-ratelimit --listen ADDR --redis URL --config FILE");
        std::process::exit(2);
    };
    let config: Value = match std::fs::read_to_string(&config)
        .map_err(|e| e.to_string())
        .and_then(|s| serde_json::from_str(&s).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => {
            eprintln!("switchyard-ratelimit: {config}: {e}");
            std::process::exit(2);
        }
    };
    let (domain, leaves) = match load(&config) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("switchyard-ratelimit: bad configuration: {e}");
            std::process::exit(2);
        }
    };
    // Redis may not be up yet (or restarting): retry, then serve; the storage's connection
    // manager reconnects by itself after that.
    let storage = loop {
        match AsyncRedisStorage::new(&redis).await {
            Ok(s) => break s,
            Err(e) => {
                eprintln!("switchyard-ratelimit: redis {redis}: {e}; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    };
    let limiter = AsyncRateLimiter::new_with_storage(Box::new(storage));
    for l in &leaves {
        let variables: Vec<Expression> = l
            .chain
            .iter()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| Expression::parse(k).unwrap_or_else(|e| panic!("descriptor key {k}: {e:?}")))
            .collect();
        limiter.add_limit(Limit::new(l.namespace.as_str(), l.max, l.seconds, Vec::new(), variables));
    }
    let listener = tokio::net::TcpListener::bind(&listen).await.unwrap_or_else(|e| panic!("bind {listen}: {e}"));
    println!("listening on {}", listener.local_addr().expect("bound"));
    let service = Arc::new(Service { domain, leaves, limiter });
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        // Small request-answer exchanges: without this, Nagle and delayed ACKs add ~40 ms.
        let _ = stream.set_nodelay(true);
        let service = Arc::clone(&service);
        tokio::spawn(async move {
            let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new()).serve_connection(
                TokioIo::new(stream),
                hyper::service::service_fn(move |req| handle(Arc::clone(&service), req)),
            );
            let _ = conn.await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_chains_and_matching() {
        let config = serde_json::json!({"domain": "d", "descriptors": [
            {"key": "switchyard_limit", "value": "rpm", "descriptors": [
                {"key": "subject", "rate_limit": {"unit": "minute", "requests_per_unit": 10}}]},
            {"key": "switchyard_cooldown", "descriptors": [
                {"key": "slot", "rate_limit": {"unit": "hour", "requests_per_unit": 1000000}}]}
        ]});
        let (domain, leaves) = load(&config).unwrap();
        assert_eq!((domain.as_str(), leaves.len()), ("d", 2));
        assert_eq!((leaves[0].max, leaves[0].seconds), (10, 60));
        let d = |e: &[(&str, &str)]| -> Vec<(String, String)> {
            e.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        assert_eq!(matching(&leaves, &d(&[("switchyard_limit", "rpm"), ("subject", "x")])), Some(&leaves[0]));
        assert_eq!(matching(&leaves, &d(&[("switchyard_limit", "tpm"), ("subject", "x")])), None);
        assert_eq!(matching(&leaves, &d(&[("switchyard_cooldown", "alpha"), ("slot", "7")])), Some(&leaves[1]));
        assert_eq!(matching(&leaves, &d(&[("switchyard_limit", "rpm")])), None);
    }
}
