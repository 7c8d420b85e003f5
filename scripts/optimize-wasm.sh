#!/usr/bin/env bash
# Shrinks the cargo-built module in place with binaryen's wasm-opt (called by `make wasm`).
#
#   scripts/optimize-wasm.sh <module.wasm> <wasm-opt command or empty> <wasm-opt flags...>
#
# Cargo re-links its output on every build, even when nothing changed, so the optimized module is
# cached beside it (<module>.raw, <module>.opt, <module>.key): an unchanged build costs a compare
# and a copy, not another wasm-opt run. The module is replaced by rename, never written through:
# cargo's own copy in deps/ (a hard link of the output) stays the raw build.
# An empty command (`make wasm WASM_OPT=`) leaves the module unoptimized, with a warning.
set -euo pipefail

wasm=$1
tool=$2
shift 2

if [ -z "$tool" ]; then
    echo "optimize-wasm: WASM_OPT is empty: $wasm left unoptimized (about 0.1 MB larger)" >&2
    exit 0
fi

raw=$wasm.raw
opt=$wasm.opt
keyfile=$wasm.key
key="$(sha256sum <"$wasm" | cut -d' ' -f1) $tool $*"

replace() { cp "$1" "$wasm.tmp" && mv -f "$wasm.tmp" "$wasm"; }

if [ -f "$opt" ] && cmp -s "$wasm" "$opt"; then
    exit 0 # already the optimized module
fi
if [ -f "$raw" ] && [ -f "$opt" ] && [ -f "$keyfile" ] && [ "$(cat "$keyfile")" = "$key" ] && cmp -s "$wasm" "$raw"; then
    replace "$opt"
    exit 0
fi

# Binaryen from the distribution (Debian/Ubuntu: `binaryen`, wasm-opt 108 or newer), installed on
# first use when this is a Debian-like machine and we are root, as `make` does for other tools.
if ! command -v "$tool" >/dev/null 2>&1 && [ "$tool" = wasm-opt ] && command -v apt-get >/dev/null 2>&1 &&
    [ "$(id -u)" = 0 ]; then
    echo "optimize-wasm: installing binaryen (wasm-opt) with apt-get" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq binaryen) >&2 || true
fi
if ! command -v "$tool" >/dev/null 2>&1; then
    echo "optimize-wasm: '$tool' (binaryen's wasm-opt, version 108 or newer) not found and not installable here." >&2
    echo "  Install binaryen (e.g. 'apt-get install binaryen'), point WASM_OPT at a wasm-opt binary," >&2
    echo "  or build an unoptimized module with 'make wasm WASM_OPT='." >&2
    exit 1
fi

"$tool" "$@" "$wasm" -o "$wasm.tmp"
cp "$wasm" "$raw"
mv -f "$wasm.tmp" "$opt"
echo "$key" >"$keyfile"
replace "$opt"
