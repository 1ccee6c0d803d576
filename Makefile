# redlockd — build and run. `make help` lists the targets.
#
# Variables are overridden on the command line, e.g.
#   make up REDIS_IMAGE=redis:7 REDLOCKD_IMAGE=ghcr.io/redlockd/redlockd:latest
# (plain assignments on purpose: an exported REDIS_IMAGE=redis:7 in the shell
# must not make `make images` tag a local build as redis:7).

GO      = go
DOCKER  = docker
COMPOSE = docker-compose

# Images built by `make images` and run by `make up` (CHAOS_IMAGE: the drill
# overlay's fault proxies, docker/chaos.compose.yml).
REDIS_IMAGE    = redlockd/redis:local
REDLOCKD_IMAGE = redlockd/redlockd:local
CHAOS_IMAGE    = redlockd/chaos:local

# Static daemon binary copied into the redlockd image (see Dockerfile).
REDLOCKD_BIN = bin/redlockd-linux-amd64
# The commit `redlockd version` reports when the go command did not stamp one
# (GOFLAGS=-buildvcs=false, a git worktree, a copy without .git).
REVISION := $(shell git rev-parse HEAD 2>/dev/null)
VERSION_LDFLAGS = -X main.revision=$(REVISION)
# Build context of the drill image: the static redlock-chaos binary alone
# (see docker/chaos/Dockerfile).
CHAOS_CONTEXT = dist/chaos-image

# Redis image: rootfs tree (inspectable), and the build context holding its tar.
REDIS_ROOTFS  = dist/redis-rootfs
REDIS_CONTEXT = dist/redis-image
# Optional extra files for /usr/lib/redlock/ in the Redis image (e.g. an
# LD_PRELOAD clock shim), see docker/redis/mkrootfs.sh.
REDIS_EXTRA =

# Prometheus image for `make up-monitoring` (docker/monitoring.compose.yml),
# built from the host's Debian prometheus like the Redis image, and its
# host port on 127.0.0.1.
PROMETHEUS_IMAGE   = redlockd/prometheus:local
PROMETHEUS_ROOTFS  = dist/prometheus-rootfs
PROMETHEUS_CONTEXT = dist/prometheus-image
PROMETHEUS_PORT    = 9090

# Compose project: fixes the network name (redlockd_redlock) and container names.
COMPOSE_PROJECT = redlockd
# `make chaos` adds docker/chaos.compose.yml (clock shim, short max_ttl).
COMPOSE_FILES   = -f docker-compose.yml
COMPOSE_CMD     = $(COMPOSE) -p $(COMPOSE_PROJECT) $(COMPOSE_FILES)
# Host ports of redlockd-a and redlockd-b (docker-compose.yml), and how long
# `make up` waits for them to be ready (/readyz 200: a quorum of masters
# counting), in seconds.
REDLOCKD_PORTS = 7071 7072
UP_TIMEOUT     = 60

.DEFAULT_GOAL := help

# Fault drills against the compose deployment (see chaos/README.md): the
# gettimeofday shim the Redis image preloads, and the drill's arguments.
CLOCKSHIM_SO = dist/libclockshim.so
CHAOS_ARGS   = --scenario all --duration 10s --out chaos-report

.PHONY: help deps test-deps lint fuzz fuzz-faults rules test-chart test-dashboards test-api image-prometheus up-monitoring dev test tidy-check drills build images image-redis image-redlockd image-chaos redlockd-linux up down bench bench-groups chaos

# redis-server runs the masters; gcc builds the gettimeofday shim that the
# clock tests and drills preload into redis-server.
deps: ## Install redis-server and gcc (Debian/Ubuntu, as root) if missing
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v gcc >/dev/null 2>&1 || missing="$$missing gcc libc6-dev"; \
	if [ -n "$$missing" ]; then \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			echo "installing$$missing from Debian's packages"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else \
			echo "missing:$$missing — apt-get install$$missing (Debian/Ubuntu) or brew install redis (macOS)" >&2; exit 1; \
		fi; \
	fi

# The test suite also needs promtool (Debian's prometheus package: the
# rules' unit tests, and the real Prometheus the dashboard queries are
# checked against), chromium (the dashboard's browser test), python3
# and php-cli (the examples/ run against a real daemon in apitest/), and zsh
# (the curl lines of the README and docs/api.md run in bash and zsh).
test-deps: deps ## Install prometheus (promtool), chromium, python3, php-cli and zsh for the test suite (Debian/Ubuntu, as root) if missing
	@missing=""; \
	command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v python3 >/dev/null 2>&1 || missing="$$missing python3"; \
	command -v php >/dev/null 2>&1 || missing="$$missing php-cli"; \
	command -v zsh >/dev/null 2>&1 || missing="$$missing zsh"; \
	if [ -n "$$missing" ]; then \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			echo "installing$$missing from Debian's packages"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
		else \
			echo "missing:$$missing — apt-get install$$missing (Debian/Ubuntu)" >&2; exit 1; \
		fi; \
	fi

# Prometheus rules: syntax and templates, then the unit tests that make
# every alert fire and not fire.
RULES = deploy/prometheus/redlockd.rules.yml
rules: ## Check the Prometheus rules and run their unit tests (promtool)
	promtool check rules $(RULES)
	cd $(dir $(RULES)) && promtool test rules redlockd.rules.test.yml

dev: deps ## Run five local redis-server masters and the daemon on 127.0.0.1:7070
	@echo "make dev: building bin/redlockd (a first build compiles the dependencies: 1-2 minutes; each package is listed as it compiles)"
	$(GO) build -v -ldflags='$(VERSION_LDFLAGS)' -o bin/redlockd ./cmd/redlockd
	@echo "make dev: starting five redis-server masters and the daemon"
	exec bin/redlockd dev $(DEV_ARGS)

# The modules: the product (this directory), the drills (chaos/), the
# benchmark (bench/), the test-only dashtest/ and apitest/ and the example
# examples/idempotency-orders/ (SQLite), each with its
# own go.mod. `go test ./...` here does not enter the others, so each step
# names them.
MODULES = . chaos bench dashtest apitest tools/testprogress examples/idempotency-orders
# The Helm chart's offline checks (deploy/kubernetes/charttest): a test-only
# module too, kept out of MODULES' staticcheck run because Helm and the
# Kubernetes libraries make that run minutes longer; tidy-check covers it.
CHARTTEST = deploy/kubernetes/charttest

# staticcheck, pinned, run from the module proxy: it never enters a go.mod.
STATICCHECK = honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint: ## Run staticcheck on every module
	@for m in $(MODULES); do echo "staticcheck ($$m)"; (cd $$m && $(GO) run $(STATICCHECK) ./...) || exit 1; done

# Each fuzz target for FUZZTIME (the seed corpus, and failures the fuzzer
# finds, live in the package's testdata/fuzz): the request decoder never
# panics and every accepted request re-encodes to an equal one; the Redis
# key encoding is injective over (account, namespace, key).
# FUZZTIME is a count of executions, not a duration: a duration-based
# -fuzztime can fail a clean run with a bare "context deadline exceeded"
# when its deadline races a worker's last call (golang/go#75804, fixed only
# in Go 1.27; CI hit it at stop 34). 60000 runs take 5–10 s here; -timeout
# turns a real hang into a failure.
FUZZTIME = 60000x
fuzz: ## Fuzz the request decoder and the lock-key encoding for FUZZTIME executions each
	$(GO) test -run '^$$' -fuzz '^FuzzParseLockRequest$$' -fuzztime $(FUZZTIME) -timeout 5m ./daemon
	$(GO) test -run '^$$' -fuzz '^FuzzKeyInjective$$' -fuzztime $(FUZZTIME) -timeout 5m ./daemon

# The fault fuzzer (chaos/README.md, "Fault fuzzing") for DURATION: runs of
# FUZZ_RUN each, seed after seed from FUZZ_SEED (0: a random one, printed),
# on local redis-server masters, every guard on; it stops at the first
# safety violation, shrinks it and writes a Go test reproducing it into
# fuzz-report/. Before a release: make fuzz-faults DURATION=1h. (`make
# fuzz` is Go's native fuzzing of the request decoder; `make test` runs
# TestFuzz, about 1.5 minutes with every guard on, and TestFuzzControls,
# about 2 minutes of negative controls.)
DURATION  = 10m
FUZZ_RUN  = 5m
FUZZ_SEED = 0
FUZZ_ARGS =
fuzz-faults: deps ## Fault-fuzz local masters for DURATION (make fuzz-faults DURATION=1h; FUZZ_ARGS="--control nogranted")
	cd chaos && $(GO) build -o $(CURDIR)/bin/redlock-chaos ./cmd/redlock-chaos
	bin/redlock-chaos fuzz --runs 0 --total $(DURATION) --duration $(FUZZ_RUN) --seed $(FUZZ_SEED) --out fuzz-report $(FUZZ_ARGS)

# -p 1: one package at a time. The fault drills (chaos/) and the redlock
# tests each start their own masters and pause, kill and partition them with
# tight per-master timeouts; run side by side on two cores under -race they
# starve each other into timeouts that say nothing about the code.
#
# `make test` includes the fault-drill matrices: TestDrills (process
# back-end, ~2 min), TestGroupDrills (two master groups, process back-end,
# ~1 min) and TestDockerDrills (the compose images, ~3 min, plus
# ~1 min to build the images the first time; skipped when no Docker engine
# answers unless REDLOCK_REQUIRE_DOCKER=1). `make drills` runs only them.
DRILLS = ^(TestDrills|TestGroupDrills|TestDockerDrills)$$
# `go test -json` through tools/testprogress: each package as it starts,
# each test and drill row as it ends, and go test's own ok/FAIL line per
# package. The go test exit status is checked too (a timeout, a vet error).
TESTPROGRESS = bin/testprogress
TEST_STATUS  = bin/.go-test-status

$(TESTPROGRESS): tools/testprogress/main.go tools/testprogress/go.mod
	cd tools/testprogress && $(GO) build -o $(CURDIR)/$(TESTPROGRESS) .

test: test-deps rules tidy-check lint fuzz $(TESTPROGRESS) ## Run the whole test suite (real redis-server masters, -race, fault drills, rules, dashboards, OpenAPI contract, examples)
	@for m in . chaos bench; do echo "go vet ($$m)"; (cd $$m && $(GO) vet ./...) || exit 1; done
	{ $(GO) test -json -race -count=1 -p 1 -timeout 40m ./... 2>&1; echo $$? >$(TEST_STATUS); } | $(TESTPROGRESS) && [ "$$(cat $(TEST_STATUS))" = 0 ]
	cd chaos && { $(GO) test -json -race -count=1 -p 1 -timeout 40m ./... 2>&1; echo $$? >$(CURDIR)/$(TEST_STATUS); } | $(CURDIR)/$(TESTPROGRESS) && [ "$$(cat $(CURDIR)/$(TEST_STATUS))" = 0 ]
	$(MAKE) test-dashboards
	$(MAKE) test-api
	$(MAKE) test-chart

tidy-check: ## Fail when a module's go.mod or go.sum is not tidy (go mod tidy -diff)
	@for m in $(MODULES) $(CHARTTEST); do (cd $$m && $(GO) mod tidy -diff) || { echo "$$m: go.mod is not tidy: run go mod tidy there" >&2; exit 1; }; done

# The dashboards against the real things, in the test-only dashtest module
# (its own go.mod: chromedp and the Prometheus libraries stay out of ours;
# `go test ./...` above does not enter it): a real Prometheus evaluates
# every query of the rules and the Grafana dashboard, headless Chromium
# drives the page at /. Screenshots go to dist/screenshots. -mod=mod: its
# go.sum follows ours through the replace directive, so a dependency added
# to the product does not break it.
test-dashboards: test-deps ## Check every dashboard and rule query on a real Prometheus, and the page at / in Chromium
	cd dashtest && $(GO) vet -mod=mod ./... && $(GO) test -mod=mod -count=1 -timeout 10m -v ./...

# The HTTP contract and the examples, in the test-only apitest module (its
# own go.mod: the OpenAPI validator stays out of ours): api/openapi.yaml
# against the real daemon's answers, and examples/ (Go, Python, shell,
# PHP) run against a real daemon on real masters.
test-api: test-deps ## Check api/openapi.yaml against the real daemon and run examples/
	cd apitest && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 10m ./...
	cd examples/idempotency-orders && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

# The Helm chart (deploy/kubernetes/redlockd), offline: rendered for every
# values file in $(CHARTTEST)/testdata, every manifest strictly decoded into
# the Kubernetes API types, cross-checked (probe ports, Secret names, label
# selectors, master addresses), the daemon config loaded by config.Load,
# and helm lint --strict. No -race: the renders run on one goroutine, and
# -race would compile Helm twice. A cold run compiles Helm and client-go
# (about 2 minutes on 2 cores); warm, about 20 seconds.
test-chart: ## Render and check the Helm chart offline (no cluster)
	cd $(CHARTTEST) && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

drills: deps ## Run only the fault-drill matrices (process back-end, and Docker when an engine is up)
	cd chaos && $(GO) test -race -count=1 -p 1 -timeout 30m -run '$(DRILLS)' -v ./...

bench: deps ## Benchmark lib, daemon, go-redsync and one-Redis floor side by side (BENCH_ARGS="-quick")
	cd bench && $(GO) run . $(BENCH_ARGS)

# The master-groups scale cell alone (bench/groups.go): 1, 2 and 3 groups of
# five fresh masters at c=256, through the library and through the daemon
# (master_groups), with ops/s and CPU per cycle per master, per daemon and
# per client; docs/performance.md ("Master groups: capacity") models from it.
GROUPS_DURATION = 3s
bench-groups: deps ## Master-groups scale cell: 1, 2, 3 groups of five masters at c=256, library and HTTP, with CPU per cycle
	cd bench && $(GO) run . -groups 1,2,3 -conc 256 -duration $(GROUPS_DURATION)

build: ## Build bin/redlockd for this machine
	$(GO) build -ldflags='$(VERSION_LDFLAGS)' -o bin/redlockd ./cmd/redlockd

help: ## Show this list
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_.-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

images: image-redis image-redlockd image-chaos ## Build the local images (REDIS_IMAGE, REDLOCKD_IMAGE, and CHAOS_IMAGE for the drill overlay)

redlockd-linux: ## Build the static linux/amd64 daemon binary into bin/
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags='-s -w $(VERSION_LDFLAGS)' -o $(REDLOCKD_BIN) ./cmd/redlockd

image-redlockd: redlockd-linux ## Build the redlockd image FROM scratch
	$(DOCKER) build -t $(REDLOCKD_IMAGE) .

image-chaos: ## Build the drill image FROM scratch: redlock-chaos, whose proxy the drill overlay runs
	@mkdir -p $(CHAOS_CONTEXT)
	cd chaos && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags='-s -w' -o $(CURDIR)/$(CHAOS_CONTEXT)/redlock-chaos ./cmd/redlock-chaos
	$(DOCKER) build -f docker/chaos/Dockerfile -t $(CHAOS_IMAGE) $(CHAOS_CONTEXT)

image-redis: ## Build the Redis image from the host's Debian redis-server
	docker/redis/mkrootfs.sh --tar $(REDIS_CONTEXT)/rootfs.tar $(REDIS_ROOTFS) $(REDIS_EXTRA)
	$(DOCKER) build -f docker/redis/Dockerfile -t $(REDIS_IMAGE) $(REDIS_CONTEXT)

up: ## Start 5 masters + 2 daemons, wait until both are ready (/readyz 200) on 127.0.0.1:7071 and :7072
	@# docker-compose v1 `up` pulls any image it does not have; never let it.
	@for image in $(REDIS_IMAGE) $(REDLOCKD_IMAGE) $(if $(findstring chaos.compose,$(COMPOSE_FILES)),$(CHAOS_IMAGE)); do \
		$(DOCKER) image inspect $$image >/dev/null 2>&1 || { \
			echo "make up: image $$image is not present locally: run 'make images'," \
				"or 'docker pull $$image' if you can reach its registry" >&2; exit 1; }; \
	done
	REDIS_IMAGE=$(REDIS_IMAGE) REDLOCKD_IMAGE=$(REDLOCKD_IMAGE) CHAOS_IMAGE=$(CHAOS_IMAGE) $(COMPOSE_CMD) up -d
	@command -v curl >/dev/null || { echo "make up: curl is needed to wait for /readyz" >&2; exit 1; }; \
	deadline=$$(( $$(date +%s) + $(UP_TIMEOUT) )); \
	for port in $(REDLOCKD_PORTS); do \
		echo "make up: waiting for http://127.0.0.1:$$port/readyz (ready = a quorum of masters counting)"; \
		until curl -fsS -o /dev/null --max-time 2 http://127.0.0.1:$$port/readyz 2>/dev/null; do \
			if [ $$(date +%s) -ge $$deadline ]; then \
				echo "make up: http://127.0.0.1:$$port/readyz not ready after $(UP_TIMEOUT)s:" >&2; \
				curl -sS --max-time 2 http://127.0.0.1:$$port/readyz >&2; echo >&2; \
				$(COMPOSE_CMD) ps; $(COMPOSE_CMD) logs --no-color --tail=30 redlockd-a redlockd-b; \
				exit 1; \
			fi; \
			sleep 1; \
		done; \
		echo "redlockd ready on http://127.0.0.1:$$port (quorum counting; /readyz 200)"; \
	done

image-prometheus: ## Build the Prometheus image from the host's Debian prometheus (PROMETHEUS_IMAGE)
	@command -v prometheus >/dev/null || { echo "image-prometheus: needs Debian's prometheus package: apt-get install prometheus (or make test-deps)" >&2; exit 1; }
	docker/prometheus/mkrootfs.sh --tar $(PROMETHEUS_CONTEXT)/rootfs.tar $(PROMETHEUS_ROOTFS)
	$(DOCKER) build -f docker/prometheus/Dockerfile -t $(PROMETHEUS_IMAGE) $(PROMETHEUS_CONTEXT)

up-monitoring: image-prometheus ## make up plus Prometheus (rules loaded) scraping both daemons on 127.0.0.1:9090
	PROMETHEUS_IMAGE=$(PROMETHEUS_IMAGE) PROMETHEUS_PORT=$(PROMETHEUS_PORT) \
		$(MAKE) up COMPOSE_FILES="-f docker-compose.yml -f docker/monitoring.compose.yml"
	@deadline=$$(( $$(date +%s) + $(UP_TIMEOUT) )); \
	until curl -fsS -o /dev/null --max-time 2 http://127.0.0.1:$(PROMETHEUS_PORT)/-/ready 2>/dev/null; do \
		if [ $$(date +%s) -ge $$deadline ]; then \
			echo "make up-monitoring: Prometheus not ready on 127.0.0.1:$(PROMETHEUS_PORT) after $(UP_TIMEOUT)s" >&2; \
			$(COMPOSE_CMD) -f docker/monitoring.compose.yml logs --no-color --tail=30 prometheus; exit 1; \
		fi; \
		sleep 1; \
	done; \
	echo "Prometheus ready on http://127.0.0.1:$(PROMETHEUS_PORT) (targets: /targets, alerts: /alerts)"

down: ## Stop and remove the compose containers, network and volumes
	$(COMPOSE_CMD) down -v --remove-orphans

$(CLOCKSHIM_SO): internal/clockshim/csrc/shim.c
	@mkdir -p $(dir $@)
	$${CC:-gcc} -O2 -fPIC -shared -Wall -Wextra -o $@ $< -ldl

chaos: deps $(CLOCKSHIM_SO) ## Drill a fresh compose deployment: images with the clock shim, down, up with docker/chaos.compose.yml, every scenario (CHAOS_ARGS)
	$(MAKE) images REDIS_EXTRA=$(CLOCKSHIM_SO)
	@# A fresh deployment: daemons started by a plain `make up` (max_ttl 600)
	@# register that max TTL on the masters, and every client keeps masters
	@# repaired after a loss out for the longest registered: 600 s, where the
	@# drill waits for its own max TTL after kill-3's repair-fences.
	$(MAKE) down
	REDIS_LD_PRELOAD=/usr/lib/redlock/$(notdir $(CLOCKSHIM_SO)) \
		$(MAKE) up COMPOSE_FILES="-f docker-compose.yml -f docker/chaos.compose.yml"
	cd chaos && $(GO) build -o $(CURDIR)/bin/redlock-chaos ./cmd/redlock-chaos
	bin/redlock-chaos drill --target compose --compose-project $(COMPOSE_PROJECT) $(CHAOS_ARGS)
