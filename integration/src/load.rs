//! A small closed-loop HTTP/1.1 load generator (keep-alive connections, fixed duration) so
//! benchmarks measure Envoy and the filter rather than a slow client.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

#[derive(Debug, Clone)]
pub struct LoadResult {
    pub requests: u64,
    pub errors: u64,
    pub elapsed: Duration,
    /// Sorted latencies in microseconds.
    pub latencies_us: Vec<u32>,
}

impl LoadResult {
    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn percentile_us(&self, q: f64) -> u32 {
        if self.latencies_us.is_empty() {
            return 0;
        }
        let i = ((self.latencies_us.len() as f64 - 1.0) * q).round() as usize;
        self.latencies_us.get(i).copied().unwrap_or(0)
    }
}

async fn connection(
    addr: SocketAddr,
    path: String,
    headers: Vec<(String, String)>,
    body: Bytes,
    until: Instant,
) -> (u64, u64, Vec<u32>) {
    let (mut ok, mut errors, mut lat) = (0u64, 0u64, Vec::new());
    while Instant::now() < until {
        let Ok(stream) = TcpStream::connect(addr).await else {
            errors += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let Ok((mut sender, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await else {
            errors += 1;
            continue;
        };
        tokio::spawn(conn);
        while Instant::now() < until {
            let mut b = Request::builder().method("POST").uri(path.as_str()).header("host", "bench.local");
            for (k, v) in &headers {
                b = b.header(k.as_str(), v.as_str());
            }
            let Ok(req) = b.body(Full::new(body.clone())) else { return (ok, errors + 1, lat) };
            let t0 = Instant::now();
            match sender.send_request(req).await {
                Ok(resp) => {
                    let status = resp.status();
                    let done = resp.into_body().collect().await.is_ok();
                    if done && status.is_success() {
                        ok += 1;
                        lat.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                    } else {
                        errors += 1;
                    }
                }
                Err(_) => {
                    errors += 1;
                    break;
                }
            }
        }
    }
    (ok, errors, lat)
}

/// Runs `connections` closed-loop clients against `addr` for `duration`.
pub async fn run(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    connections: usize,
    duration: Duration,
) -> LoadResult {
    let until = Instant::now() + duration;
    let start = Instant::now();
    let headers: Vec<(String, String)> = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let body = Bytes::copy_from_slice(body);
    let tasks: Vec<_> = (0..connections)
        .map(|_| tokio::spawn(connection(addr, path.to_string(), headers.clone(), body.clone(), until)))
        .collect();
    let mut out = LoadResult { requests: 0, errors: 0, elapsed: Duration::ZERO, latencies_us: Vec::new() };
    for t in tasks {
        if let Ok((ok, err, lat)) = t.await {
            out.requests += ok;
            out.errors += err;
            out.latencies_us.extend(lat);
        }
    }
    out.elapsed = start.elapsed();
    out.latencies_us.sort_unstable();
    out
}
