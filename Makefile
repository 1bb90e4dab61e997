# redis-ratelimit — `make help` lists the targets.
SHELL := /bin/bash
CARGO ?= cargo
REDIS_SERVER ?= redis-server
MODULE_RELEASE := target/release/libredis_ratelimit.so
MODULE_DEBUG := target/debug/libredis_ratelimit.so

.DEFAULT_GOAL := help
.PHONY: help build build-debug run test test-unit test-integration lint fmt bench clean

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-18s %s\n", $$1, $$2}'

build: ## Build the release module (target/release/libredis_ratelimit.so)
	$(CARGO) build --release

build-debug: ## Build the debug module the integration tests load
	$(CARGO) build

run: build ## Build, then start redis-server with the module from redis.conf (127.0.0.1:6379)
	$(REDIS_SERVER) redis.conf

test: build-debug ## Build and run every test: unit, property and integration (real redis-server)
	RATELIMIT_MODULE=$(CURDIR)/$(MODULE_DEBUG) REDIS_SERVER=$(REDIS_SERVER) $(CARGO) test

test-unit: ## Only the unit and property tests (no server needed)
	$(CARGO) test --lib

test-integration: build-debug ## Only the integration tests against a real redis-server
	RATELIMIT_MODULE=$(CURDIR)/$(MODULE_DEBUG) REDIS_SERVER=$(REDIS_SERVER) $(CARGO) test --test '*'

lint: ## cargo fmt --check and cargo clippy -D warnings
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

fmt: ## Format the code
	$(CARGO) fmt --all

bench: build ## Benchmark every command vs SET … PX, INCR and Lua; writes bench/README.md
	python3 bench/bench.py --module $(CURDIR)/$(MODULE_RELEASE) --write-readme

clean: ## Remove build products
	$(CARGO) clean
