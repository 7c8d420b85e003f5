//! The report: the table, the targets against plain Envoy, and when a run counts.

use super::*;

pub(super) struct Params<'a> {
    pub(super) seconds: f64,
    pub(super) idle_seconds: f64,
    pub(super) warmup: f64,
    pub(super) rounds: usize,
    pub(super) connections: usize,
    pub(super) cores: &'a Cores,
    pub(super) elapsed: Duration,
}

/// Bound by the proxy's own core (and not by the generator + mock).
pub(super) fn proxy_bound(s: &Summary) -> bool {
    s.proxy_core.is_some_and(|p| p >= SATURATED) && s.client_core < SATURATED
}

// The hot-path targets (full path over plain Envoy, 1 KB unless named), and when a run counts:
// plain Envoy at most 40 us per request and other processes at most 10 % of its core.
pub(super) const TARGET_CPU_US: f64 = 30.0;
/// A mesh-wide limit's check: at most this much CPU per request over the same build's
/// unlimited full path (1 KB JSON).
pub(super) const TARGET_LIMIT_CPU_US: f64 = 30.0;
pub(super) const TARGET_P50_US: f64 = 60.0;
pub(super) const TARGET_TTFB_US: f64 = 80.0;
pub(super) const TARGET_100K_RATIO: f64 = 0.5;
pub(super) const TARGET_RSS_MB: f64 = 35.0;
pub(super) const TARGET_NATIVE_RSS_MB: f64 = 10.0;
pub(super) const TARGET_WASM_BYTES: u64 = 600_000;
// The native build's targets (1 KB): CPU as a ratio to plain Envoy's (a ratio holds on any
// machine `make bench` runs on), p50 at one connection, SSE time to first byte.
pub(super) const TARGET_NATIVE_CPU_RATIO: f64 = 2.0;
pub(super) const TARGET_NATIVE_P50_US: f64 = 60.0;
pub(super) const TARGET_NATIVE_TTFB_US: f64 = 60.0;
pub(super) const QUIET_PLAIN_CPU_US: f64 = 40.0;
pub(super) const QUIET_OTHERS: f64 = 0.10;

/// A target row "at most +`limit` us over plain" for a latency measured on both rows.
pub(super) fn latency_target(what: &str, switchyard: f64, plain: f64, limit: f64) -> String {
    let d = switchyard - plain;
    let verdict = if d <= limit { "met".to_string() } else { format!("missed by {:.0} us", d - limit) };
    format!("| {what}: at most +{limit:.0} us | {switchyard:.0} vs {plain:.0} us: {} us | {verdict} |", signed(d, 0))
}

/// The throughput target's line: by req/s when both rows were bound by Envoy's core, else by the
/// CPU per request (req/s then measure the machine, not Envoy).
pub(super) fn throughput_target(b: Summary, s: Summary, label: &str, min: f64) -> String {
    let r = s.rps / b.rps.max(1e-9);
    let cpu = b.cpu.zip(s.cpu).filter(|(_, sc)| *sc > 0.0).map(|(bc, sc)| bc / sc);
    let (x, basis) = match cpu {
        Some(c) if !(proxy_bound(&b) && proxy_bound(&s)) => {
            (c, "by CPU per request: the rows were not bound by Envoy's own core")
        }
        _ => (r, "by req/s: both rows bound by Envoy's core"),
    };
    let goal = format!("at least {min}x plain");
    let verdict = if x >= min { "met".to_string() } else { format!("missed by {:.2}x", min - x) };
    format!(
        "| Throughput at {label}: {goal} | {r:.2}x by req/s; {} by CPU per request | {verdict} ({basis}) |",
        cpu.map_or("-".into(), |c| format!("{c:.2}x"))
    )
}

pub(super) fn envoy_version() -> String {
    Command::new(switchyard_integration::envoy::envoy_binary())
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            let s = String::from_utf8_lossy(&o.stdout).into_owned();
            s.split_whitespace()
                .find(|w| w.contains('/') && w.chars().next().is_some_and(|c| c.is_ascii_hexdigit()))
                .map(|w| w.split('/').nth(1).unwrap_or(w).to_string())
        })
        .unwrap_or_else(|| "?".into())
}

#[allow(clippy::too_many_arguments)]
pub(super) fn render(
    rows: &[Row],
    loads: &[Load],
    cells: &[Vec<Cell>],
    sums: &[Vec<Summary>],
    rss: &[Option<u64>],
    rss_c2: Option<RssC2>,
    p: Params<'_>,
) -> String {
    let mut o = String::new();
    let wasm_bytes = std::fs::metadata(wasm_path()).map(|m| m.len()).unwrap_or(0);
    let pinning = match (p.cores.proxy, p.cores.client) {
        (Some(a), Some(b)) => {
            format!("proxy pinned to CPU {a}; load generator + mock (one thread each, own processes) pinned to CPU {b}")
        }
        _ => "no pinning (fewer than 2 CPUs allowed)".into(),
    };
    let pinning = match nice_level() {
        0 => pinning,
        n => format!("{pinning}; all at nice {n}"),
    };
    let _ = writeln!(o, "## Switchyard benchmark\n");
    let _ = writeln!(
        o,
        "Envoy {} `--concurrency 1`; {pinning}. {} connections for the loaded runs ({} s each), 1 connection for the latency runs ({} s each), {} rounds, rows rotated per round and load, {} s warm-up per row and load; medians over rounds. `.wasm` {} bytes. Whole run {:.0} s.\n",
        envoy_version(), p.connections, p.seconds, p.idle_seconds, p.rounds, p.warmup, wasm_bytes, p.elapsed.as_secs_f64()
    );
    let _ = writeln!(o, "| load | path | req/s | vs plain | p50 / p99 us @{c} | p50 us @1 conn | SSE TTFB us @1 conn | proxy CPU us/req | proxy core | gen+mock core (gen + mock) | bound by | others on proxy / gen core | RSS MiB | errors |", c = p.connections);
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut notes: Vec<String> = Vec::new();
    for (li, load) in loads.iter().enumerate() {
        let base = sums[li][1];
        for (i, row) in rows.iter().enumerate() {
            let s = sums[li][i];
            if let Target::Down(why) = &row.target {
                if li == 0 {
                    let _ = writeln!(o, "| {} | {} | {why} | | | | | | | | | | | |", load.label(), row.name);
                }
                continue;
            }
            if !s.measured {
                continue;
            }
            let delta =
                |v: f64, b: f64| if i == 1 || i == 0 { String::new() } else { format!(" ({})", signed(v - b, 0)) };
            let ttfb = if load.stream {
                format!("{:.0}{}", s.idle_ttfb, delta(s.idle_ttfb, base.idle_ttfb))
            } else {
                "".into()
            };
            let cpu = match (s.cpu, base.cpu) {
                (Some(c), Some(b)) if i > 1 => format!("{c:.1} ({})", signed(c - b, 1)),
                (Some(c), _) => format!("{c:.1}"),
                _ => "-".into(),
            };
            let _ = writeln!(
                o,
                "| {} | {} | {:.0} | {} | {:.0} / {:.0} | {:.0}{} | {ttfb} | {cpu} | {} | {:.0}% ({:.0} + {:.0}) | {} | {} / {} | {} | {} |",
                load.label(),
                row.name,
                s.rps,
                if i == 0 { "-".into() } else { format!("{:.2}x", s.rps / base.rps.max(1e-9)) },
                s.p50,
                s.p99,
                s.idle_p50,
                delta(s.idle_p50, base.idle_p50),
                s.proxy_core.map_or("-".into(), |c| format!("{:.0}%", c * 100.0)),
                s.client_core * 100.0,
                s.gen_core * 100.0,
                (s.client_core - s.gen_core) * 100.0,
                if i == 0 { "gen+mock (no proxy)".into() } else { bound_by(&s) },
                pct(s.others_proxy_core),
                pct(s.others_client_core),
                rss[i].map_or("-".into(), |k| format!("{:.0}", k as f64 / 1024.0)),
                s.errors,
            );
            if s.errors > 0 {
                notes.push(format!(
                    "{} / {}: {} errors, first: {}",
                    load.label(),
                    row.name,
                    s.errors,
                    cells[li][i].first_error().unwrap_or("?")
                ));
            }
        }
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "proxy core / gen+mock core: share of one core used during the loaded runs (the proxy's from /proc, the load generator's and the mock's from their own processes; they share one core, so their sum is what saturates). \"bound by\": which side was above {:.0}% of its core; only rows bound by the proxy compare proxies by req/s, the CPU per request compares them always. RSS: after the run, `--concurrency 1` (LiteLLM: all its processes).\n", SATURATED * 100.0);
    let client_bound: Vec<String> = loads
        .iter()
        .enumerate()
        .flat_map(|(li, l)| {
            rows.iter()
                .enumerate()
                .skip(1)
                .filter(move |(i, _)| sums[li][*i].measured && sums[li][*i].client_core >= SATURATED)
                .map(move |(_, r)| format!("{} / {}", l.label(), r.name))
        })
        .collect();
    let others: Vec<f64> = sums.iter().flatten().filter(|x| x.measured).filter_map(|x| x.others_proxy_core).collect();
    let disturbed = others.iter().filter(|&&x| x > 0.10).count();
    if disturbed > 0 {
        let _ = writeln!(
            o,
            "Other processes took more than 10% of the proxy's core in {disturbed} of {} rows (median {:.0}%, at most {:.0}%): the machine was not quiet, so req/s and latencies are lower than on an idle machine; the CPU per request is less affected.\n",
            others.len(),
            median(others.clone()).unwrap_or(0.0) * 100.0,
            others.iter().copied().fold(0.0, f64::max) * 100.0
        );
    }
    if client_bound.is_empty() {
        let _ = writeln!(o, "The load generator and the mock stayed below {:.0}% of their core on every proxied row: they did not hold the proxies back.\n", SATURATED * 100.0);
    } else {
        let _ = writeln!(o, "The load generator + mock were saturated on: {}. Their req/s understate what the proxy could do; use the CPU per request there.\n", client_bound.join("; "));
    }
    for n in &notes {
        let _ = writeln!(o, "- errors: {n}");
    }
    if !notes.is_empty() {
        let _ = writeln!(o);
    }

    // The hot-path targets, Switchyard full path vs plain Envoy (docs/performance.md).
    let find = |size: usize, stream: bool| loads.iter().position(|l| l.size == size && l.stream == stream);
    let _ = writeln!(o, "### Targets (Switchyard full path vs plain Envoy, this run)\n");
    if let Some(li) = find(1024, false) {
        let plain = sums[li][1];
        let others = plain.others_proxy_core.unwrap_or(0.0);
        let counts = plain.cpu.is_some_and(|c| c <= QUIET_PLAIN_CPU_US) && others <= QUIET_OTHERS;
        let _ = writeln!(
            o,
            "{} plain Envoy {} us per request at 1 KB, other processes {:.0}% of its core (a run counts when plain costs at most {QUIET_PLAIN_CPU_US:.0} us and others at most {:.0}%).\n",
            if counts { "This run counts:" } else { "This run does not count (the machine was not quiet):" },
            plain.cpu.map_or("-".to_string(), |c| format!("{c:.1}")),
            others * 100.0,
            QUIET_OTHERS * 100.0
        );
    }
    let _ = writeln!(o, "| target | measured | verdict |");
    let _ = writeln!(o, "|---|---|---|");
    let verdict = |ok: bool, by: String| if ok { "met".to_string() } else { format!("missed by {by}") };
    if let Some(li) = find(1024, false) {
        let (b, s) = (sums[li][1], sums[li][2]);
        if let (Some(bc), Some(sc)) = (b.cpu, s.cpu) {
            let d = sc - bc;
            let _ = writeln!(
                o,
                "| Envoy CPU per request at 1 KB: at most +{TARGET_CPU_US:.0} us over plain | {sc:.1} vs {bc:.1} us: {} us | {} |",
                signed(d, 1),
                verdict(d <= TARGET_CPU_US, format!("{:.1} us", d - TARGET_CPU_US))
            );
        }
        let _ = writeln!(o, "{}", latency_target("p50 at one connection, 1 KB", s.idle_p50, b.idle_p50, TARGET_P50_US));
    }
    if let Some(li) = find(1024, true) {
        let (b, s) = (sums[li][1], sums[li][2]);
        let _ = writeln!(
            o,
            "{}",
            latency_target("SSE time to first byte, 1 KB, one connection", s.idle_ttfb, b.idle_ttfb, TARGET_TTFB_US)
        );
    }
    if let Some(li) = find(102_400, false) {
        let _ = writeln!(o, "{}", throughput_target(sums[li][1], sums[li][2], "100 KB", TARGET_100K_RATIO));
    }
    // The native build's row, when it ran.
    if let Some(ni) = rows.iter().position(|r| r.name == NATIVE_ROW) {
        if let Some(li) = find(1024, false) {
            let (b, n) = (sums[li][1], sums[li][ni]);
            if let (Some(bc), Some(nc)) = (b.cpu, n.cpu) {
                let ratio = nc / bc;
                let _ = writeln!(
                    o,
                    "| native: Envoy CPU per request at 1 KB: at most {TARGET_NATIVE_CPU_RATIO:.1}x plain | {nc:.1} vs {bc:.1} us: {ratio:.2}x ({} us) | {} |",
                    signed(nc - bc, 1),
                    verdict(ratio <= TARGET_NATIVE_CPU_RATIO, format!("{:.2}x ({:.1} us)", ratio - TARGET_NATIVE_CPU_RATIO, nc - TARGET_NATIVE_CPU_RATIO * bc))
                );
            }
            let _ = writeln!(
                o,
                "{}",
                latency_target("native: p50 at one connection, 1 KB", n.idle_p50, b.idle_p50, TARGET_NATIVE_P50_US)
            );
        }
        if let Some(li) = find(1024, true) {
            let (b, n) = (sums[li][1], sums[li][ni]);
            let _ = writeln!(
                o,
                "{}",
                latency_target("native: SSE time to first byte, 1 KB", n.idle_ttfb, b.idle_ttfb, TARGET_NATIVE_TTFB_US)
            );
        }
    }
    // A mesh-wide limit's check against the same build's unlimited full path, when those rows ran.
    if let Some(li) = find(1024, false) {
        let row = |name: &str| rows.iter().position(|r| r.name == name).and_then(|i| sums[li][i].cpu);
        for (what, limited, unlimited) in [
            ("under a token limit", LIMITS_ROW, FULL_ROW),
            ("under a spend limit", SPEND_ROW, FULL_ROW),
            ("native: under a token limit", NATIVE_LIMITS_ROW, NATIVE_ROW),
        ] {
            if let (Some(l), Some(u)) = (row(limited), row(unlimited)) {
                let d = l - u;
                let _ = writeln!(
                    o,
                    "| {what}: at most +{TARGET_LIMIT_CPU_US:.0} us CPU over the unlimited full path | {l:.1} vs {u:.1} us: {} us | {} |",
                    signed(d, 1),
                    verdict(d <= TARGET_LIMIT_CPU_US, format!("{:.1} us", d - TARGET_LIMIT_CPU_US))
                );
            }
        }
    }
    if let Some(r) = rss_c2 {
        let mb = |kib: u64| kib as f64 * 1024.0 / 1e6;
        let d_mb = mb(r.switchyard) - mb(r.plain);
        let _ = writeln!(
            o,
            "| Envoy RSS at `--concurrency 2`: at most +{TARGET_RSS_MB:.0} MB over plain | {:.1} vs {:.1} MB: {} MB (a no-op Wasm module in its place: {} MB) | {} |",
            mb(r.switchyard),
            mb(r.plain),
            signed(d_mb, 1),
            signed(mb(r.noop) - mb(r.plain), 1),
            verdict(d_mb <= TARGET_RSS_MB, format!("{:.1} MB", d_mb - TARGET_RSS_MB))
        );
        if let Some(n) = r.native {
            let d_mb = mb(n) - mb(r.plain);
            let native_bytes = std::fs::metadata(native_path()).map(|m| m.len()).unwrap_or(0);
            let _ = writeln!(
                o,
                "| native: Envoy RSS at `--concurrency 2`: at most +{TARGET_NATIVE_RSS_MB:.0} MB over plain | {:.1} vs {:.1} MB: {} MB (library {native_bytes} bytes) | {} |",
                mb(n),
                mb(r.plain),
                signed(d_mb, 1),
                verdict(d_mb <= TARGET_NATIVE_RSS_MB, format!("{:.1} MB", d_mb - TARGET_NATIVE_RSS_MB))
            );
        }
    }
    let _ = writeln!(
        o,
        "| release `.wasm`: at most {} KB ({TARGET_WASM_BYTES} bytes) | {wasm_bytes} bytes | {} |",
        TARGET_WASM_BYTES / 1000,
        verdict(wasm_bytes <= TARGET_WASM_BYTES, format!("{} bytes", wasm_bytes.saturating_sub(TARGET_WASM_BYTES)))
    );
    let _ = writeln!(o);

    // Per-round figures for the two rows compared, so the spread is visible.
    let _ = writeln!(o, "Per-round req/s and CPU us/req (plain Envoy | Switchyard full path):");
    for (li, load) in loads.iter().enumerate() {
        let fmt = |i: usize| {
            cells[li][i]
                .loaded
                .iter()
                .map(|s| format!("{:.0}/{:.1}", s.rps, s.cpu_per_req.unwrap_or(0.0)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let _ = writeln!(o, "- {}: {} | {}", load.label(), fmt(1), fmt(2));
    }
    o
}
