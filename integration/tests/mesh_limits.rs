//! Mesh-wide limits with real parts: three Envoy processes (own `--base-id`) share one rate
//! limit service (`switchyard-ratelimit`: Kuadrant's Limitador engine) on one real Redis
//! (Debian's `redis-server`). Budgets hold across the pods within the stated overshoot, a
//! provider's capacity and a provider's 429 are seen by every pod, the service or Redis going
//! away gives each failure mode without a hang, and both recover.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_deploy::ratelimit::service_config;
use switchyard_integration::client::{post_json, Reply};
use switchyard_integration::envoy::{ClusterSpec, Envoy, StackConfig};
use switchyard_integration::mesh::{RateLimitService, Redis};
use switchyard_integration::mock::{Behavior, MockProvider};

const RLS_CLUSTER: &str = "switchyard_ratelimit";

fn plugin(rate_limits: Value) -> Value {
    let ep = |p: &str, price: f64| json!({"provider": p, "upstream_model": format!("{p}-up"), "pricing": {"prompt": price, "completion": price}});
    json!({
        "providers": {
            "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "key-alpha"}},
            "beta": {"cluster": "c_beta", "authority": "beta.example", "credential": {"value": "key-beta"}}
        },
        "models": {"m/x": {"endpoints": [ep("alpha", 1.0), ep("beta", 2.0)]}},
        "policies": {"search": {}, "free": {}},
        "policy_selection": {"trusted_headers": ["x-team"],
                             "rules": [{"policy": "free", "header": {"name": "x-team", "value": "free"}}],
                             "default": "search"},
        "routing": {"default_policy": "price_weighted", "debug_header": true},
        "rate_limits": rate_limits
    })
}

/// Redis, the service on it, two mock providers and `pods` Envoys in front of them.
struct Mesh {
    redis: Redis,
    service: RateLimitService,
    alpha: MockProvider,
    beta: MockProvider,
    pods: Vec<Envoy>,
}

impl Mesh {
    async fn start(tag: &str, rate_limits: Value, pods: usize) -> Mesh {
        let plugin = plugin(rate_limits);
        let redis = Redis::start(tag).expect("redis");
        let service = RateLimitService::start(tag, &redis.url(), &service_config(&plugin).expect("rate_limits"))
            .expect("service");
        let alpha = MockProvider::start("alpha", 0, Behavior::default()).await.expect("alpha");
        let beta = MockProvider::start("beta", 0, Behavior::default()).await.expect("beta");
        let mut cfg = StackConfig::new(
            plugin,
            vec![
                ClusterSpec { name: "c_alpha".into(), port: alpha.addr.port() },
                ClusterSpec { name: "c_beta".into(), port: beta.addr.port() },
            ],
            None,
        );
        cfg.rate_limit_service = Some(("127.0.0.1".into(), service.addr.port()));
        cfg.per_try_idle_timeout_ms = 2_000;
        let pods = tokio::task::block_in_place(|| {
            (0..pods).map(|i| Envoy::start(&cfg, &format!("{tag}-pod{i}")).expect("envoy")).collect()
        });
        Mesh { redis, service, alpha, beta, pods }
    }

    fn pod(&self, i: usize) -> SocketAddr {
        self.pods[i % self.pods.len()].addr()
    }

    /// Requests the rate limit cluster has seen from one pod (Envoy's own upstream counter).
    fn service_calls(&self, i: usize) -> u64 {
        self.counter(i, "cluster.switchyard_ratelimit.upstream_rq_total")
    }

    /// One of pod `i`'s counters by its name (Envoy may prefix a Wasm metric's name); a counter
    /// Envoy does not have fails the test (never read as zero).
    fn counter(&self, i: usize, name: &str) -> u64 {
        let filter = format!("/stats?filter={}$", name.replace('.', "\\."));
        let (_, stats) = self.pods[i].admin_get(&filter).expect("stats");
        stats
            .lines()
            .filter_map(|l| l.split_once(": "))
            .find(|(k, _)| *k == name || k.ends_with(&format!(".{name}")))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("pod {i} has no counter {name}: {stats:?}"))
    }

    /// `switchyard_rate_limit_failure_total{reason}` of pod `i`.
    fn failures(&self, i: usize, reason: &str) -> u64 {
        self.counter(i, &format!("switchyard.rate_limit.failure_total.reason.{reason}"))
    }
}

async fn chat(addr: SocketAddr, id: &str, extra: &[(&str, &str)]) -> Reply {
    chat_with(addr, id, extra, json!({"sort": "price"})).await
}

async fn chat_with(addr: SocketAddr, id: &str, extra: &[(&str, &str)], provider: Value) -> Reply {
    let mut headers = vec![("x-test-id", id)];
    headers.extend_from_slice(extra);
    let body = json!({"model": "m/x", "messages": [{"role": "user", "content": "hello"}], "provider": provider});
    tokio::time::timeout(Duration::from_secs(10), post_json(addr, "/v1/chat/completions", &headers, &body))
        .await
        .unwrap_or_else(|_| panic!("{id}: no answer within 10 s (a hang)"))
        .unwrap_or_else(|e| panic!("{id}: {e}"))
}

fn tokens_of(r: &Reply) -> u64 {
    let u = &r.json()["usage"];
    u["prompt_tokens"].as_u64().unwrap_or(0) + u["completion_tokens"].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_budget_holds_across_three_pods_under_concurrent_traffic() {
    const BUDGET: u64 = 20_000;
    let mesh = Mesh::start(
        "budget",
        json!({"service": {"cluster": RLS_CLUSTER, "timeout_ms": 500},
               "limits": {"search-tokens": {"policy": "search", "per": "policy", "tokens": BUDGET, "window": "hour"}}}),
        3,
    )
    .await;
    // One request tells what a request costs; the policy without limits makes no call at all.
    let first = chat(mesh.pod(0), "budget-probe", &[("x-switchyard-debug", "1")]).await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.header("x-switchyard-limits"), Some("search-tokens=search (admitted)"));
    let per_request = tokens_of(&first);
    assert!(per_request > 0);
    assert!(mesh.service_calls(0) >= 1, "pod 0 asked the service about the probe");
    let before = mesh.service_calls(1);
    let free = chat(mesh.pod(1), "budget-free", &[("x-team", "free")]).await;
    assert_eq!(free.status, 200);
    assert_eq!(mesh.service_calls(1), before, "a request no limit applies to calls nothing");
    // The positive control: a request the limit applies to, on the same pod, is counted.
    let control = chat(mesh.pod(1), "budget-control", &[]).await;
    assert_eq!(control.status, 200, "{}", control.text());
    assert!(mesh.service_calls(1) > before, "pod 1's admission call is counted");

    // Six clients (two per pod) until each is refused.
    let served = Arc::new(AtomicU64::new(per_request + tokens_of(&control)));
    let served_requests = Arc::new(AtomicUsize::new(2));
    let mut clients = Vec::new();
    const CLIENTS: usize = 6;
    for c in 0..CLIENTS {
        let (addr, served, served_requests) = (mesh.pod(c), Arc::clone(&served), Arc::clone(&served_requests));
        clients.push(tokio::spawn(async move {
            for n in 0..10_000 {
                let r = chat(addr, &format!("budget-{c}-{n}"), &[]).await;
                if r.status == 429 {
                    return r;
                }
                assert_eq!(r.status, 200, "{}", r.text());
                served.fetch_add(tokens_of(&r), Ordering::SeqCst);
                served_requests.fetch_add(1, Ordering::SeqCst);
            }
            panic!("client {c} was never refused");
        }));
    }
    for c in clients {
        let refused = c.await.expect("client");
        let body = refused.json();
        assert_eq!(body["error"]["code"], "rate_limited", "{body}");
        assert_eq!(body["error"]["metadata"]["limit"], "search-tokens");
        let retry: u64 = refused.header("retry-after").and_then(|v| v.parse().ok()).expect("retry-after");
        assert!((1..=3600).contains(&retry), "{retry}");
    }
    let served = served.load(Ordering::SeqCst);
    // No max_tokens: each request is admitted for its prompt estimate (35 bytes of messages: 9
    // tokens) plus `routing.expected_completion_tokens` (256), far more than it uses, so no
    // request exceeds its reservation and the budget is not overshot at all. What over-reserving
    // costs is the other side: refused while the reservations in flight and the leases the
    // workers hold (3 pods x 2 workers, each at most a reservation or 1/64 of the budget,
    // whichever is more) fill the budget, plus one reservation refused.
    let estimate = 9 + 256;
    let bound = BUDGET + CLIENTS as u64 * per_request.saturating_sub(estimate);
    let floor = BUDGET - (CLIENTS as u64 + 1) * estimate - 6 * estimate.max(BUDGET / 64);
    // Leases: a worker admits most requests from budget it leased, without a call.
    let calls: u64 = (0..3).map(|pod| mesh.service_calls(pod)).sum();
    let requests = served_requests.load(Ordering::SeqCst) as u64;
    println!("budget {BUDGET}, served {served} tokens ({requests} requests, {calls} service calls), bound {bound}, floor {floor}");
    assert!(calls < requests, "{calls} calls for {requests} requests: leases admit without a call");
    assert!(served <= bound, "served {served} tokens over the bound {bound}");
    assert!(served >= floor, "refused early: served {served} of {BUDGET}, under {floor}");
    // Nothing refused reached a provider.
    let received = mesh.alpha.received().len() + mesh.beta.received().len();
    assert_eq!(
        received,
        served_requests.load(Ordering::SeqCst) + 1,
        "providers saw exactly the served requests (+1 free)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn provider_capacity_and_a_providers_429_are_shared_by_every_pod() {
    const CAPACITY: usize = 12;
    let mesh = Mesh::start(
        "capacity",
        json!({"service": {"cluster": RLS_CLUSTER},
               "capacity": {"alpha": {"requests_per_minute": CAPACITY}},
               "share_cooldowns": true}),
        3,
    )
    .await;
    // Paced traffic over the three pods: alpha (cheaper) serves until its mesh-wide capacity is
    // used, then every pod routes to beta.
    const REQUESTS: usize = 60;
    for n in 0..REQUESTS {
        let r = chat(mesh.pod(n), &format!("cap-{n}"), &[]).await;
        assert_eq!(r.status, 200, "{}", r.text());
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let alpha =
        mesh.alpha.received().iter().filter(|r| r.header("x-test-id").is_some_and(|i| i.starts_with("cap-"))).count();
    let beta = REQUESTS - alpha;
    // The stated bound: each pod learns the cap from the answer to its next charge (one tick,
    // 100 ms): at most about three requests per pod at this pace.
    let bound = CAPACITY + 3 * 4;
    println!("capacity {CAPACITY}/min: alpha served {alpha}, beta {beta}, bound {bound}");
    assert!(alpha >= CAPACITY.min(REQUESTS), "alpha served only {alpha}");
    assert!(alpha <= bound, "alpha served {alpha}, over its capacity bound {bound}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_pods_429_with_retry_after_stops_the_other_pods_attempts() {
    let mesh = Mesh::start("cooldown", json!({"service": {"cluster": RLS_CLUSTER}, "share_cooldowns": true}), 3).await;
    let beta_first = json!({"order": ["beta", "alpha"]});
    let tried_beta = |id: &str| mesh.beta.received().iter().filter(|x| x.header("x-test-id") == Some(id)).count();
    // Before: every pod tries beta first.
    for pod in 1..3 {
        let id = format!("cool-before-{pod}");
        assert_eq!(chat_with(mesh.pod(pod), &id, &[], beta_first.clone()).await.status, 200);
        assert_eq!(tried_beta(&id), 1, "{id}");
    }
    // Beta answers pod 0 with 429 and Retry-After: 30.
    let hit =
        chat_with(mesh.pod(0), "cool-hit", &[("x-mock-behavior", "beta=429/30")], json!({"only": ["beta"]})).await;
    assert_eq!(hit.status, 429, "{}", hit.text());
    // Within a few ticks the other pods learn of it (their poll counts a shared cool-down;
    // polled, bounded, not a fixed sleep: the tick runs later on a busy machine), then skip beta
    // without an attempt of their own.
    let learned = |pod: usize| {
        let (_, stats) = mesh.pods[pod].admin_get("/stats?filter=shared_cooldown_total").expect("stats");
        stats.lines().any(|l| {
            l.split_once(": ")
                .is_some_and(|(k, v)| k.ends_with("provider.beta") && v.trim().parse::<u64>().unwrap_or(0) > 0)
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !(learned(1) && learned(2)) {
        assert!(std::time::Instant::now() < deadline, "pods 1 and 2 never learned of pod 0's cool-down");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for n in 0..6 {
        let id = format!("cool-after-{n}");
        let pod = 1 + n % 2;
        let r = chat_with(mesh.pod(pod), &id, &[], beta_first.clone()).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some("alpha"), "{id}");
        assert_eq!(tried_beta(&id), 0, "{id}: pod {pod} still tried beta after pod 0's 429");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_service_or_redis_going_away_gives_each_failure_mode_and_both_recover() {
    let mut mesh = Mesh::start(
        "failure",
        json!({"service": {"cluster": RLS_CLUSTER, "timeout_ms": 100},
               "limits": {
                 "open-rpm": {"policy": "search", "requests": 100000, "window": "minute", "failure_mode": "open"},
                 "closed-rpm": {"policy": "free", "requests": 100000, "window": "minute", "failure_mode": "closed"}}}),
        3,
    )
    .await;
    // The open limit's request asks for the debug header: it names how admission went.
    let both = |mesh: &Mesh, tag: &'static str| {
        let (a, b) = (mesh.pod(0), mesh.pod(1));
        async move {
            let t = Instant::now();
            let open = chat(a, &format!("{tag}-open"), &[("x-switchyard-debug", "1")]).await;
            let closed = chat(b, &format!("{tag}-closed"), &[("x-team", "free")]).await;
            (open, closed, t.elapsed())
        }
    };
    let limits = |r: &Reply| r.header("x-switchyard-limits").unwrap_or_default().to_string();
    let (open, closed, _) = both(&mesh, "healthy").await;
    assert_eq!((open.status, closed.status), (200, 200), "{} {}", open.text(), closed.text());
    assert_eq!(limits(&open), "open-rpm=all (admitted)");

    // Each failure is told apart from "no limit applied" by the debug header and by the failure
    // counter of its reason, on the pod that saw it.
    let failed = |mesh: &Mesh, reason: &str| (mesh.failures(0, reason), mesh.failures(1, reason));
    // The service killed mid-run: connections are refused at once. Open serves, closed refuses
    // in the caller's shape, neither hangs.
    let before = failed(&mesh, "unavailable");
    mesh.service.kill();
    for round in 0..3 {
        let (open, closed, took) = both(&mesh, "killed").await;
        assert_eq!(open.status, 200, "round {round}: {}", open.text());
        assert_eq!(limits(&open), "open-rpm=all (service failed, open)", "round {round}");
        assert_eq!(closed.status, 503, "round {round}: {}", closed.text());
        assert_eq!(closed.json()["error"]["code"], "rate_limit_unavailable", "{}", closed.text());
        assert!(took < Duration::from_secs(5), "round {round} took {took:?}");
    }
    let after = failed(&mesh, "unavailable");
    assert_eq!((after.0 - before.0, after.1 - before.1), (3, 3), "one failure per admission, by reason");
    mesh.service.restart().expect("service restart");
    let (open, closed, _) = both(&mesh, "service-back").await;
    assert_eq!((open.status, closed.status), (200, 200), "after the service restarted: {}", closed.text());
    assert_eq!(limits(&open), "open-rpm=all (admitted)");

    // The service hung (SIGSTOP): it accepts connections and answers nothing, so each admission
    // runs into its 100 ms timeout - the path a killed service (refused at once) never takes.
    // Envoy ends a gRPC call at its timeout with UNAVAILABLE, so it counts as `unavailable`;
    // what tells it apart is the wait: the two admissions (one after the other) cannot end
    // before their timeouts.
    let before = failed(&mesh, "unavailable");
    mesh.service.pause();
    let (open, closed, took) = both(&mesh, "paused").await;
    mesh.service.resume();
    assert_eq!(open.status, 200, "{}", open.text());
    assert_eq!(limits(&open), "open-rpm=all (service failed, open)");
    assert_eq!((closed.status, closed.json()["error"]["code"].as_str()), (503, Some("rate_limit_unavailable")));
    let after = failed(&mesh, "unavailable");
    assert_eq!((after.0 - before.0, after.1 - before.1), (1, 1), "both admissions failed");
    // Not 200 ms: Envoy's timers may fire a little early (a fresh clone's CI run measured
    // 198.8 ms), and a refused connection (the killed service) ends in a few ms, far below.
    assert!(took >= Duration::from_millis(150), "each admission waited for its 100 ms timeout: {took:?}");
    assert!(took < Duration::from_secs(5), "the timeout held: {took:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (open, closed, _) = both(&mesh, "resumed").await;
        if (open.status, closed.status, limits(&open).as_str()) == (200, 200, "open-rpm=all (admitted)") {
            break;
        }
        assert!(Instant::now() < deadline, "the resumed service did not answer again: {}", closed.text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Redis restarted: the service answers UNAVAILABLE meanwhile (each failure mode again),
    // then reconnects, and Envoy keeps serving throughout.
    mesh.redis.kill();
    let (open, closed, _) = both(&mesh, "redis-down").await;
    assert_eq!((open.status, closed.status), (200, 503), "with Redis down: {}", closed.text());
    mesh.redis.restart().expect("redis restart");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (open, closed, _) = both(&mesh, "redis-back").await;
        assert_eq!(open.status, 200);
        if closed.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the service did not recover after Redis restarted: {}", closed.text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(mesh.redis.pid().is_some());
}

/// `callers` clients, each with one request at a time (`max_tokens` set), spread over the pods
/// until each is refused: (tokens served, requests served, the largest estimate error seen).
async fn exhaust(mesh: &Mesh, tag: &str, callers: usize, max_tokens: u64) -> (u64, usize, u64) {
    let messages = json!([{"role": "user", "content": "hello"}]);
    // The filter's estimate: the prompt's bytes / 4 plus max_tokens.
    let estimate = (serde_json::to_string(&messages).unwrap().len() as u64).div_ceil(4) + max_tokens;
    let body = json!({"model": "m/x", "messages": messages, "provider": {"sort": "price"}, "max_tokens": max_tokens});
    let served = Arc::new(AtomicU64::new(0));
    let served_requests = Arc::new(AtomicUsize::new(0));
    let worst_error = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for c in 0..callers {
        let addr = mesh.pod(c);
        let (served, served_requests, worst_error) =
            (Arc::clone(&served), Arc::clone(&served_requests), Arc::clone(&worst_error));
        let (body, tag) = (body.clone(), tag.to_string());
        clients.push(tokio::spawn(async move {
            for n in 0..10_000 {
                let id = format!("{tag}-{c}-{n}");
                let r = tokio::time::timeout(
                    Duration::from_secs(10),
                    post_json(addr, "/v1/chat/completions", &[("x-test-id", id.as_str())], &body),
                )
                .await
                .unwrap_or_else(|_| panic!("{id}: no answer within 10 s (a hang)"))
                .unwrap_or_else(|e| panic!("{id}: {e}"));
                if r.status == 429 {
                    return r;
                }
                assert_eq!(r.status, 200, "{}", r.text());
                let used = tokens_of(&r);
                served.fetch_add(used, Ordering::SeqCst);
                served_requests.fetch_add(1, Ordering::SeqCst);
                worst_error.fetch_max(used.saturating_sub(estimate), Ordering::SeqCst);
            }
            panic!("caller {c} was never refused");
        }));
    }
    for c in clients {
        let refused = c.await.expect("caller");
        let body = refused.json();
        assert_eq!(body["error"]["code"], "rate_limited", "{body}");
        assert_eq!(body["error"]["metadata"]["limit"], "search-tokens");
        let retry: u64 = refused.header("retry-after").and_then(|v| v.parse().ok()).expect("retry-after");
        assert!((1..=3600).contains(&retry), "{retry}");
    }
    (served.load(Ordering::SeqCst), served_requests.load(Ordering::SeqCst), worst_error.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_is_overshot_by_at_most_one_estimate_error_per_caller() {
    const BUDGET: u64 = 3_000;
    // max_tokens a little under what the mock answers: every request's use is above its
    // estimate by a few tokens, the error the bound allows once per caller.
    const MAX_TOKENS: u64 = 8;
    for callers in [12, 24] {
        let tag = format!("overshoot{callers}");
        let mut mesh = Mesh::start(
            &tag,
            json!({"service": {"cluster": RLS_CLUSTER, "timeout_ms": 500},
                   "limits": {
                     "search-tokens": {"policy": "search", "per": "policy", "tokens": BUDGET, "window": "hour"},
                     "free-tokens": {"policy": "free", "tokens": 1_000_000, "window": "hour", "failure_mode": "closed"}}}),
            3,
        )
        .await;
        let (served, requests, error) = exhaust(&mesh, &tag, callers, MAX_TOKENS).await;
        // Every admission and settlement reached the service: none served uncounted.
        let failed: Vec<(usize, &str, u64)> = (0..3)
            .flat_map(|pod| {
                [
                    "timeout",
                    "unavailable",
                    "error",
                    "refused",
                    "settlement",
                    "malformed",
                    "unknown",
                    "charge",
                    "backlog",
                ]
                .map(|r| (pod, r))
            })
            .map(|(pod, r)| (pod, r, mesh.failures(pod, r)))
            .filter(|x| x.2 > 0)
            .collect();
        // The documented bound: what admission reserved never exceeds the budget; what a
        // request uses beyond its reservation is charged when it ends, so only the requests in
        // flight when the budget fills (one per caller) add their estimate error.
        let bound = BUDGET + callers as u64 * error;
        println!("budget {BUDGET}, {callers} callers: served {served} tokens ({requests} requests), estimate error up to {error} a request, bound {bound}, service failures {failed:?}");
        assert!(failed.is_empty(), "admissions and settlements all reached the service: {failed:?}");
        assert!(error > 0, "the answers exceed their estimates (else the bound is the budget itself)");
        assert!(served <= bound, "{callers} callers: served {served} tokens over the bound {bound}");
        assert!(served >= BUDGET / 2, "{callers} callers: refused early: served {served} of {BUDGET}");
        // Every pod refuses once the budget is used, without a provider attempt.
        let received = mesh.alpha.received().len() + mesh.beta.received().len();
        assert_eq!(received, requests, "providers saw exactly the served requests");
        for pod in 0..3 {
            let r = chat(mesh.pod(pod), &format!("{tag}-after-{pod}"), &[]).await;
            assert_eq!(r.status, 429, "pod {pod}: {}", r.text());
            assert_eq!(r.json()["error"]["metadata"]["limit"], "search-tokens");
        }
        assert_eq!(mesh.alpha.received().len() + mesh.beta.received().len(), requests);
        if callers == 24 {
            // The service killed: the open limit serves (uncounted), the closed one refuses.
            mesh.service.kill();
            for pod in 0..3 {
                let open = chat(mesh.pod(pod), &format!("{tag}-killed-open-{pod}"), &[]).await;
                assert_eq!(open.status, 200, "pod {pod}: {}", open.text());
                let closed = chat(mesh.pod(pod), &format!("{tag}-killed-closed-{pod}"), &[("x-team", "free")]).await;
                assert_eq!(closed.status, 503, "pod {pod}: {}", closed.text());
                assert_eq!(closed.json()["error"]["code"], "rate_limit_unavailable", "{}", closed.text());
            }
        }
    }
}
