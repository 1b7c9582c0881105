# Meridian: the Makefile targets are the project's vocabulary. `make help` lists them.
SHELL := /usr/bin/env bash
GO ?= go
BIN := bin
PKGS := ./...
TEST_TIMEOUT ?= 20m
DURATION ?= 3m
SEED ?=
RATE ?= 500

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build every command into ./bin
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

# Images: IMAGE_REPO/meridian-agent and IMAGE_REPO/meridian-hub, tagged with
# the chart's appVersion (the tag the chart deploys by default).
IMAGE_REPO ?= ghcr.io/meridian-gpu
IMAGE_TAG ?= $(shell awk '/^appVersion:/{gsub(/"/, "", $$2); print $$2}' charts/meridian-agent/Chart.yaml)
IMAGE_BUILDER ?=

.PHONY: image
image: ## Build the meridian-agent and meridian-hub images (docker, podman or buildah; skipped loudly when none)
	@builder="$(IMAGE_BUILDER)"; \
	if [ -z "$$builder" ]; then \
	  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then builder=docker; \
	  elif command -v podman >/dev/null 2>&1; then builder=podman; \
	  elif command -v buildah >/dev/null 2>&1; then builder=buildah; fi; \
	fi; \
	if [ -z "$$builder" ]; then \
	  echo "**********************************************************************"; \
	  echo "image: SKIPPED: no container builder (a running docker, podman or buildah)."; \
	  echo "image: nothing was built. Install one, or set IMAGE_BUILDER."; \
	  echo "**********************************************************************"; \
	  if [ "$${MERIDIAN_REQUIRE_IMAGE:-0}" = 1 ]; then echo "image: MERIDIAN_REQUIRE_IMAGE=1: failing"; exit 1; fi; \
	  exit 0; \
	fi; \
	build="$$builder build"; [ "$$builder" = buildah ] && build="buildah bud"; \
	for t in agent hub; do \
	  echo "image: $$build --target $$t -t $(IMAGE_REPO)/meridian-$$t:$(IMAGE_TAG)"; \
	  $$build --target $$t --build-arg VERSION=$(IMAGE_TAG) -t $(IMAGE_REPO)/meridian-$$t:$(IMAGE_TAG) . || exit 1; \
	done

.PHONY: demo
# The demo targets build the binary and run it, not `go run`: go run exits
# 1 when it sees Ctrl-C even though the demo stopped cleanly, and make then
# reports the stop as an error.
DEMO_BIN := $(BIN)/meridian-demo

.PHONY: demo-bin
demo-bin:
	@mkdir -p $(BIN)
	$(GO) build -o $(DEMO_BIN) ./cmd/meridian-demo

demo: demo-bin ## Run Meridian end to end: hub on embedded etcd+NATS, 3 simulated clusters, 300 workloads (< 2 min)
	$(DEMO_BIN)

.PHONY: demo-forever
demo-forever: demo-bin ## The demo, kept running afterwards so you can explore it with meridianctl and curl
	$(DEMO_BIN) --forever

.PHONY: demo-slurm
demo-slurm: demo-bin ## The demo with a real Slurm cluster in place of one simulated cluster (needs root)
	$(DEMO_BIN) --slurm

.PHONY: demo-k8s
demo-k8s: demo-bin ## The demo with a real local Kubernetes control plane (KWOK GPU nodes) beside the simulated clusters (root; else skipped)
	$(DEMO_BIN) --k8s

.PHONY: test
test: ## Run all tests: embedded etcd+NATS; real Slurm and kube-apiserver when root (else skipped loudly); trace slices
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

.PHONY: test-race
test-race: ## Run all tests with the race detector
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

.PHONY: bench
bench: ## Run the benchmarks: throughput, p50/p99 and memory, each beside its in-process baseline
	$(GO) test -run '^$$' -bench 'BenchmarkPlan' -benchtime 100x -timeout 60m ./hub/scheduler/
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 1s ./hub/scheduler/gpufit/ ./hub/quota/ ./hub/convert/ ./internal/protofast/
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2s ./hub/store ./transport/natsbus
	$(GO) test -run '^$$' -bench CycleWithBacklog -benchtime 30x -timeout 30m ./hub/dispatch/
	$(GO) test -run '^$$' -bench LeadAfterRestart -benchtime 5x -timeout 20m ./hub/server/
	$(GO) test -run '^$$' -bench . -benchtime 1x ./internal/bench/
	$(GO) test -run '^$$' -bench WorkloadsViewFirstPage -benchtime 20x -timeout 20m ./hub/ui/
	@if [ "$$(id -u)" = 0 ]; then $(GO) test -run '^$$' -bench DispatchVsSbatch -benchtime 200x ./internal/e2e/slurmhub/; else echo "bench: not root, skipping the Meridian-vs-sbatch benchmark (it needs the local Slurm cluster)"; fi

.PHONY: sim
sim: build ## Run the multi-team contention scenario and replay the Alibaba OpenB trace (seeds 42-51)
	./$(BIN)/meridian-sim contention --hours 48
	./$(BIN)/meridian-sim openb --seeds 42-51 --policy bestfit,fgd,meridian

.PHONY: soak
soak: ## Chaos soak: 3 etcd, 3 NATS (R3), 3 hubs, 4 agents on loopback under load while seeded faults hit them; JSON summary last (DURATION=3m SEED= RATE=500)
	DURATION=$(DURATION) SEED=$(SEED) RATE=$(RATE) scripts/soak.sh

.PHONY: slurm-up
slurm-up: ## Start the local Slurm cluster (root: 4 nodes x 8 fake H100, slurmrestd on 127.0.0.1:6820)
	scripts/slurm-up.sh

.PHONY: slurm-down
slurm-down: ## Stop the local Slurm cluster (ARGS=--purge also deletes its state)
	scripts/slurm-down.sh $(ARGS)

.PHONY: k8s-up
k8s-up: ## Start a local Kubernetes control plane with 3 KWOK GPU nodes (root; first run builds kube v1.37.2 once, ~18 min)
	scripts/k8s-up.sh

.PHONY: k8s-down
k8s-down: ## Stop the local Kubernetes control plane (ARGS=--purge also deletes its state)
	scripts/k8s-down.sh $(ARGS)

.PHONY: vault-build
vault-build: ## Build the Vault test server once into ~/.cache/meridian (BUSL: tests only, never shipped)
	bash tools/vault/build.sh

.PHONY: vault-up
vault-up: ## Start a local Vault dev server on loopback (KV v2 at secret/, root token "root"; builds it first when missing)
	scripts/vault-up.sh

.PHONY: vault-down
vault-down: ## Stop the local Vault dev server (ARGS=--purge also deletes its state)
	scripts/vault-down.sh $(ARGS)

.PHONY: helm-lint
helm-lint: ## Lint and render charts/meridian-agent and charts/meridian-hub with the pinned Helm CLI (installed by scripts/helm.sh) and run their tests
	@HELM="$$(bash scripts/helm.sh)" && \
	  "$$HELM" lint --strict charts/meridian-agent --set clusterID=lint,hub.natsURL=nats://hub:4222 && \
	  "$$HELM" template lint charts/meridian-agent --set clusterID=lint,hub.natsURL=nats://hub:4222 >/dev/null && \
	  "$$HELM" lint --strict charts/meridian-hub --set api.insecurePlaintext=true && \
	  "$$HELM" template lint charts/meridian-hub --set api.insecurePlaintext=true >/dev/null
	MERIDIAN_REQUIRE_HELM=1 $(GO) test -count=1 ./internal/helmtest/

.PHONY: fuzz
fuzz: ## Run each fuzz target briefly (FUZZTIME=30s per target)
	@scripts/fuzz.sh $${FUZZTIME:-20s}

.PHONY: lint
lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

.PHONY: verify
verify: lint ## Check formatting, vet, go.mod tidiness, and that generated code and dashboards are up to date
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	bash scripts/verify-generated.sh
	$(GO) run ./dashboards/gen -check
	$(GO) run ./terraform/internal/docgen -check

.PHONY: dashboards
dashboards: ## Regenerate the Grafana dashboards (dashboards/grafana/*.json) from dashboards/boards.go
	$(GO) run ./dashboards/gen

.PHONY: tf-docs
tf-docs: ## Regenerate the Terraform provider's registry docs (terraform/docs) with tfplugindocs, from the provider's schema and terraform/examples
	$(GO) run ./terraform/internal/docgen

.PHONY: tf-demo
tf-demo: ## Build the Terraform provider and apply terraform/examples/organisation to the running `make demo-forever` hub (ARGS=destroy removes it)
	bash scripts/tf-demo.sh $(ARGS)

.PHONY: generate
generate: ## Regenerate protobuf, gRPC, gateway and OpenAPI code (installs pinned tools)
	bash scripts/generate.sh

.PHONY: tools
tools: ## Install the pinned code generators into ~/.cache/meridian/tools
	bash scripts/tools.sh
