# redis-ratelimit — `make help` lists the targets.
SHELL := /bin/bash
CARGO ?= cargo
REDIS_SERVER ?= redis-server
# Cargo's target directory: target/, or CARGO_TARGET_DIR when set (as cargo reads it).
TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))
MODULE_RELEASE := $(TARGET_DIR)/release/libredis_ratelimit.so
MODULE_DEBUG := $(TARGET_DIR)/debug/libredis_ratelimit.so

# make run listens on 127.0.0.1:PORT. Unset: 6379, or the first free port of 6380-6399 when
# 6379 is taken (Debian's redis-server service holds it); set: that port, or a clear failure.
PORT ?=
VERSION := $(shell sed -n 's/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -n 1)
ARCH := $(shell uname -m)
DEB_ARCH := $(shell dpkg --print-architecture 2>/dev/null || uname -m)
DIST_NAME := redis-ratelimit-$(VERSION)-linux-$(ARCH)

.DEFAULT_GOAL := help
.PHONY: help setup build build-debug run test test-release test-long test-unit test-integration mutants \
	test-examples test-python test-node test-packages test-memcheck compat lint fmt bench callgrind bench-gate bench-gate-update dist deb clean \
	build-rls run-rls test-rls bench-rls test-functions load-functions

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-18s %s\n", $$1, $$2}'

setup: ## Install with apt what the build and tests need (libclang-dev, redis-server, redis-tools), only what is missing
	@scripts/setup.sh core

build: setup ## Build the release module (target/release/libredis_ratelimit.so)
	$(CARGO) build --release

build-debug: setup ## Build the debug module the integration tests load
	$(CARGO) build

run: build ## Build, then start redis-server with the module on 127.0.0.1:6379 (taken: the first free port of 6380-6399; PORT=6390: that port or fail); prints the redis-cli -p line
	@port=$$(scripts/port-free.sh $(or $(PORT),--pick)) || exit 1; \
	  echo "make run: starting redis-server with the module on 127.0.0.1:$$port. Talk to it with: redis-cli -p $$port"; \
	  exec $(REDIS_SERVER) redis.conf --port $$port

# make load-functions: REDIS_URL, CLUSTER, REDIS_CLI_ARGS and PORT reach scripts/load-functions.sh
# through the environment, as make passes command-line variables (a password in REDIS_URL never
# goes through a shell's quoting).
load-functions: ## Load the Functions library (functions/ratelimit.lua: the limiters without the module) where it is absent or older: REDIS_URL=redis[s]://[user:password@]host:port (default 127.0.0.1:PORT, PORT 6379); CLUSTER=1: every primary; REDIS_CLI_ARGS: more redis-cli options (--cacert ca.pem)
	@scripts/load-functions.sh

# make run-rls: the Envoy rate limit service (rls/) in front of `make run`'s server.
RLS_CONFIG ?= rls/examples/config.yaml
RLS_GRPC_ADDR ?= 127.0.0.1:8081
RLS_HTTP_ADDR ?= 127.0.0.1:8080
RLS_RELEASE := $(TARGET_DIR)/release/ratelimit-rls

build-rls: setup ## Build the Envoy rate limit service (target/release/ratelimit-rls)
	$(CARGO) build --release -p ratelimit-rls

run-rls: build build-rls ## Start redis-server with the module (port as make run) and the Envoy rate limit service: gRPC 127.0.0.1:8081, /metrics on 8080, RLS_CONFIG=rls/examples/config.yaml; ENGINE=functions: a plain server, the service loads the Functions library
	@port=$$(scripts/port-free.sh $(or $(PORT),--pick)) || exit 1; \
	  echo "make run-rls: redis-server ($(or $(ENGINE),module)) on 127.0.0.1:$$port (redis-cli -p $$port)"; \
	  ENGINE=$(or $(ENGINE),module) REDIS_SERVER=$(REDIS_SERVER) scripts/run-rls.sh $(RLS_RELEASE) $$port $(RLS_CONFIG) --grpc-addr $(RLS_GRPC_ADDR) --http-addr $(RLS_HTTP_ADDR)

# The gRPC reflection test's client (rls/tests/reflection.rs): PyPI's grpcio-reflection in a
# virtualenv (grpcurl is not in Debian); python3-venv comes with setup's python-clients.
RLS_REFLECTION_VENV := build/rls-reflection
$(RLS_REFLECTION_VENV)/.stamp:
	@scripts/setup.sh python-clients
	rm -rf $(RLS_REFLECTION_VENV) && python3 -m venv $(RLS_REFLECTION_VENV)
	$(RLS_REFLECTION_VENV)/bin/python -m pip install -q grpcio grpcio-reflection protobuf
	touch $@

test-rls: build-debug $(RLS_REFLECTION_VENV)/.stamp ## Build the module, then run the Envoy rate limit service's tests (rls/: unit, and against a real redis-server) on each engine: the module, then servers without it (the Functions library, then its EVALSHA form)
	RATELIMIT_MODULE=$(MODULE_DEBUG) REDIS_SERVER=$(REDIS_SERVER) $(CARGO) test -p ratelimit-rls
	RATELIMIT_TEST_ENGINE=functions RATELIMIT_MODULE=$(MODULE_DEBUG) REDIS_SERVER=$(REDIS_SERVER) $(CARGO) test -p ratelimit-rls --test '*'
	RATELIMIT_TEST_ENGINE=eval RATELIMIT_MODULE=$(MODULE_DEBUG) REDIS_SERVER=$(REDIS_SERVER) $(CARGO) test -p ratelimit-rls --test '*'

# bench-rls's gate (issue 47: the reached ratio with room for a shared machine's noise; rls/README.md).
RLS_MAX_RATIO ?= 1.8

bench-rls: build build-rls ## Envoy service benchmark: Redis cost per decision, RL.ALL vs INCRBY+EXPIRE (1, 3, 5 descriptors; time, and instructions under callgrind); the service at a fixed rate (ARGS='--rate 2000 --seconds 5'); fails when, at 64 streams, one limit costs the service more than RLS_MAX_RATIO (1.8; 0: no check) times the CPU per decision of a request answered without Redis
	@scripts/setup.sh memcheck
	@scripts/servers.sh memcheck >/dev/null
	REDIS_SERVER=$(REDIS_SERVER) scripts/bench-rls.sh $(MODULE_RELEASE) $(TARGET_DIR)/release/rls-bench --max-ratio $(RLS_MAX_RATIO) $(ARGS)

test: build-debug ## Build and run every test: unit, property and integration (real redis-server)
	RATELIMIT_MODULE=$(MODULE_DEBUG) REDIS_SERVER=$(REDIS_SERVER) $(CARGO) test
	$(CARGO) test -p ratelimit-core
	# The pure core once more in the release profile: no panic in any build profile.
	$(CARGO) test --release -p ratelimit-core

test-release: build ## The integration tests against the release module (what users load)
	RATELIMIT_MODULE=$(MODULE_RELEASE) REDIS_SERVER=$(REDIS_SERVER) $(CARGO) test --release --test '*'

test-examples: build ## Run examples/python and examples/node against a real server with the module
	@scripts/setup.sh examples
	scripts/test-examples.sh $(MODULE_RELEASE)

test-python: build ## Test the Python package clients/python (client, limits storage for flask-limiter/slowapi, middleware) and limits' own tests on both engines: a server with the module, then one without it (the Functions library)
	@scripts/setup.sh python-clients
	build/python-clients/bin/python -m pip install -q --no-deps --no-build-isolation --force-reinstall ./clients/python
	cd clients/python && RATELIMIT_MODULE=$(MODULE_RELEASE) REDIS_SERVER=$(REDIS_SERVER) ../../build/python-clients/bin/python -m pytest -q -p no:cacheprovider tests
	cd clients/python && RATELIMIT_MODULE=$(MODULE_RELEASE) REDIS_SERVER=$(REDIS_SERVER) ../../build/python-clients/bin/python -m limits_suite.run -q
	cd clients/python && RATELIMIT_TEST_ENGINE=functions RATELIMIT_MODULE=$(MODULE_RELEASE) REDIS_SERVER=$(REDIS_SERVER) ../../build/python-clients/bin/python -m pytest -q -p no:cacheprovider tests
	cd clients/python && RATELIMIT_TEST_ENGINE=functions RATELIMIT_MODULE=$(MODULE_RELEASE) REDIS_SERVER=$(REDIS_SERVER) ../../build/python-clients/bin/python -m limits_suite.run -q

test-node: build ## Run clients/node's tests (node --test: node-redis and ioredis, Express, express-rate-limit) on both engines: a server with the module, then one without it (the Functions library)
	@scripts/setup.sh node
	cd clients/node && npm ci --no-audit --no-fund --loglevel=error && RATELIMIT_MODULE=$(MODULE_RELEASE) REDIS_SERVER=$(REDIS_SERVER) npm test
	cd clients/node && RATELIMIT_TEST_ENGINE=functions RATELIMIT_MODULE=$(MODULE_RELEASE) REDIS_SERVER=$(REDIS_SERVER) npm test

dist: build ## Write dist/redis-ratelimit-<version>-linux-<arch>.tar.gz (module, README, docs/, LICENSE, config snippet) and dist/SHA256SUMS
	@scripts/setup.sh packages
	scripts/dist.sh tarball $(VERSION) $(ARCH) $(MODULE_RELEASE)

deb: build ## Build dist/redis-ratelimit_<version>_<arch>.deb (module in /usr/lib/redis/modules/, snippet /etc/redis/ratelimit.conf, README and docs/ in /usr/share/doc/redis-ratelimit/)
	@scripts/setup.sh packages
	scripts/dist.sh deb $(VERSION) $(DEB_ARCH) $(MODULE_RELEASE)

test-packages: dist deb ## Install the .deb, load the module from its installed path, call it, remove it; check the tarball; both carry docs/; the npm tarball of clients/node and the Python wheel and sdist of clients/python (name, LICENSE, metadata, installs and loads)
	scripts/test-packages.sh $(VERSION) $(ARCH) $(DEB_ARCH)
	scripts/check-node-artifacts.sh
	scripts/check-python-artifacts.sh

test-long: build-debug ## The long variants (e.g. 2,000,000 fuzzed calls), ignored by make test
	RATELIMIT_MODULE=$(MODULE_DEBUG) REDIS_SERVER=$(REDIS_SERVER) $(CARGO) test --test '*' -- --ignored

test-unit: setup ## Only the unit and property tests (no server needed): the core crate's, the module's and rls/'s
	$(CARGO) test -p ratelimit-core
	$(CARGO) test --lib
	$(CARGO) test -p ratelimit-rls --lib

test-integration: build-debug ## Only the integration tests against a real redis-server
	RATELIMIT_MODULE=$(MODULE_DEBUG) REDIS_SERVER=$(REDIS_SERVER) $(CARGO) test --test '*'

# The servers `make compat` runs the integration tests against: the default one
# (Debian 12: Redis 7.0), then those scripts/servers.sh prepares under build/servers/.
COMPAT_SERVERS = $(REDIS_SERVER) $(CURDIR)/build/servers/valkey-8.0/valkey-server $(CURDIR)/build/servers/redis-8.0/redis-server \
	$(CURDIR)/build/servers/valkey-9.1/valkey-server

compat: build-debug ## Integration tests against Redis 7.0 (system), Valkey 8.0, Redis 8.0 and Valkey 9.1 (prepared by scripts/servers.sh)
	scripts/servers.sh
	@failed=(); \
	for server in $(COMPAT_SERVERS); do \
	  echo "== compat: $$server: $$($$server --version 2>&1)"; \
	  if RATELIMIT_MODULE=$(MODULE_DEBUG) REDIS_SERVER=$$server $(CARGO) test --test '*'; then \
	    echo "== compat: $$server: ok"; \
	  else \
	    echo "== compat: $$server: FAILED"; failed+=("$$server"); \
	  fi; \
	done; \
	if [ $${#failed[@]} -gt 0 ]; then echo "compat: failed on: $${failed[*]}"; exit 1; fi; \
	echo "compat: all servers passed"

# make test-functions: the Functions library (functions/ratelimit.lua) on every server of
# make compat: the shared integration tests against it (RATELIMIT_ENGINE=functions; module-only
# tests skip themselves); then its EVAL form through EVALSHA on Redis 6.2. The differential
# suite (module vs library, tests/differential.rs) is part of make test and make compat.
REDIS_62 := $(CURDIR)/build/servers/redis-6.2/redis-server

test-functions: build-debug ## The Functions library: its version (scripts/check-library-version.sh), the shared integration tests against it on Redis 7.0, Valkey 8.0, Redis 8.0 and Valkey 9.1; its EVAL form through EVALSHA on Redis 6.2 (built by scripts/servers.sh redis-6.2). The differential suite runs in make test and make compat
	scripts/servers.sh >/dev/null
	scripts/servers.sh redis-6.2 >/dev/null
	scripts/check-library-version.sh
	@failed=(); \
	for server in $(COMPAT_SERVERS); do \
	  echo "== test-functions: $$server: $$($$server --version 2>&1)"; \
	  if RATELIMIT_ENGINE=functions RATELIMIT_MODULE=$(MODULE_DEBUG) REDIS_SERVER=$$server $(CARGO) test --test '*'; then \
	    echo "== test-functions: $$server: ok"; \
	  else \
	    echo "== test-functions: $$server: FAILED"; failed+=("$$server"); \
	  fi; \
	done; \
	echo "== test-functions: the EVAL form on $$($(REDIS_62) --version 2>&1)"; \
	if ! EVAL_SERVER=$(REDIS_62) RATELIMIT_MODULE=$(MODULE_DEBUG) REDIS_SERVER=$(REDIS_SERVER) $(CARGO) test --test eval_form -- --nocapture; then \
	  failed+=("$(REDIS_62) (EVAL form)"); \
	fi; \
	if [ $${#failed[@]} -gt 0 ]; then echo "test-functions: failed on: $${failed[*]}"; exit 1; fi; \
	echo "test-functions: all servers passed"

test-memcheck: build-debug ## The fuzz test (reduced) against Redis 7.0 (MALLOC=libc) under valgrind memcheck: 0 errors
	@scripts/setup.sh memcheck
	scripts/memcheck.sh $(MODULE_DEBUG)

lint: setup ## cargo fmt --check, cargo clippy -D warnings (the module, core/, rls/), the layering and import circles (scripts/check-layers.sh), the Functions library's version (scripts/check-library-version.sh) and commit subjects of at most 72 characters (scripts/check-commit-subjects.sh)
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) clippy -p ratelimit-core --all-targets -- -D warnings
	$(CARGO) clippy -p ratelimit-rls --all-targets -- -D warnings
	scripts/check-layers.sh
	scripts/check-library-version.sh
	scripts/check-commit-subjects.sh

fmt: ## Format the code
	$(CARGO) fmt --all

mutants: setup ## Mutation testing of core/src/algorithm/ (cargo-mutants, lib tests; installs it if missing): fails if a mutant survives
	@command -v cargo-mutants >/dev/null || cargo install --locked cargo-mutants
	@# A mutant that makes a test loop (or a property test shrink) past the time limit did not
	@# pass: it counts as caught. cargo-mutants exits 3 for timeouts even when some mutant was
	@# also missed (2), so the verdict on 3 is read from mutants.out/missed.txt.
	@cargo mutants --jobs $${MUTANTS_JOBS:-2} $(or $(MUTANTS_ARGS),-f 'core/src/algorithm/*.rs'); rc=$$?; \
	  if [ $$rc -eq 3 ] && [ -f mutants.out/missed.txt ]; then \
	    if [ -s mutants.out/missed.txt ]; then echo "mutants: missed:"; cat mutants.out/missed.txt; rc=2; \
	    else echo "mutants: none missed; the timeouts (mutants.out/timeout.txt) count as caught"; rc=0; fi; \
	  fi; exit $$rc

bench: build ## Benchmark every command vs SET … PX, INCR and Lua; the Functions library vs the peers' Lua and the module (callgrind); writes bench/README.md
	python3 bench/bench.py --module $(MODULE_RELEASE) --write-readme
	@scripts/setup.sh memcheck
	@scripts/servers.sh memcheck >/dev/null
	python3 bench/peers.py --module $(MODULE_RELEASE) --write-readme

# One command's instructions per call under callgrind (repeatable, unlike time): the module's
# own code and each server API it calls. ARGS is the command (__rand_int__ → key numbers).
CALLGRIND_ARGS ?= RL.GCRA k:__rand_int__ 99 1 6
callgrind: build ## Instructions per call of one command (ARGS='RL.GCRA k:__rand_int__ 99 1 6'; BACKLOG=1: effects propagate)
	@scripts/setup.sh memcheck
	@scripts/servers.sh memcheck >/dev/null
	python3 bench/callgrind.py $(if $(BACKLOG),--backlog) --module $(MODULE_RELEASE) -- $(or $(ARGS),$(CALLGRIND_ARGS))

# The instruction-count gate (issue 37): instructions per call of every command (common form,
# PEEK), RL.ALL of 1, 2 and 5 limits, RL.LIMIT, with and without a replication backlog, under
# callgrind, against bench/baseline.tsv (2 % tolerance). Rows: ROWS in bench/gate.py.
bench-gate: build ## Instruction counts per call under callgrind vs bench/baseline.tsv: fails on a rise over 2 % (GATE_ARGS='--only RL.ALL')
	@scripts/setup.sh memcheck
	@scripts/servers.sh memcheck >/dev/null
	python3 bench/gate.py --module $(MODULE_RELEASE) $(GATE_ARGS)

bench-gate-update: build ## Rewrite bench/baseline.tsv (and the gate's table in bench/README.md, docs/operations.md) from a run: commit it with the change that moved the counts, and why
	@scripts/setup.sh memcheck
	@scripts/servers.sh memcheck >/dev/null
	python3 bench/gate.py --module $(MODULE_RELEASE) --update --write-docs

clean: ## Remove build products (target/, dist/)
	$(CARGO) clean
	rm -rf dist
