#!/usr/bin/env bash
# Measurement only: where Envoy's CPU goes per request, by variant of the generated bootstrap
# (see README "Hot path: where the time goes"). Runs switchyard-probe with one round of the
# given variants, records every Envoy it starts with perf (dwarf call graphs), then prints the
# attribution table (scripts/perf_attribute.py). Needs root (perf), perf, objdump, readelf.
#
#   scripts/perf-attribute.sh <out-dir> [variants, default plain,noopwasm,wasmonly,full]
#
# Env: SECONDS_PER_VARIANT (10), FREQ (499 Hz).
set -euo pipefail
OUT=${1:?usage: scripts/perf-attribute.sh <out-dir> [variants]}
VARS=${2:-plain,noopwasm,wasmonly,full}
SECS=${SECONDS_PER_VARIANT:-10}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
cargo build -q --release -p switchyard-tools --bin switchyard-probe
N=$(echo "$VARS" | tr ',' '\n' | wc -l)
PROBE_VARIANTS=$VARS PROBE_ROUNDS=1 PROBE_SECONDS=$SECS ./target/release/switchyard-probe > "$OUT/probe.txt" 2>&1 &
PROBE=$!
# Envoys are started in the order of the variants (the wrapper script execs the binary).
PIDS=""
for _ in $(seq 1 120); do
  PIDS=$(pgrep -P $PROBE -x envoy | sort -n | paste -sd, || true)
  [ -n "$PIDS" ] && [ "$(echo "$PIDS" | tr ',' '\n' | wc -l)" -ge "$N" ] && break
  sleep 0.5
done
: > "$OUT/pids.txt"
paste -d' ' <(echo "$PIDS" | tr ',' '\n') <(echo "$VARS" | tr ',' '\n') >> "$OUT/pids.txt"
sleep 2
for p in $(echo "$PIDS" | tr ',' ' '); do cat "/proc/$p/maps" > "$OUT/maps.$p"; done
# Long enough for every variant's warm-up, loaded run and one-connection run.
perf record -F "${FREQ:-499}" --call-graph dwarf -p "$PIDS" -o "$OUT/perf.data" -- sleep $(( N * (SECS + 3) )) > "$OUT/perf.log" 2>&1 || true
wait $PROBE
cat "$OUT/probe.txt"
python3 scripts/perf_attribute.py "$OUT"
