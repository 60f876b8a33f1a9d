# manifold — `make demo` runs the lab demo, `make test` runs every test. Both install
# what they need on a Debian machine (run as root).

SHELL   := /bin/bash
GO      ?= go
BIN     := bin/manifold
CONNECT := bin/manifold-connect
BENCH   := bin/manifold-bench
# VERSION: the nearest tag and the commits since (git describe), or 0.0.0~COMMIT before
# the first tag; a Debian version either way (make deb uses it).
COMMIT  := $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo +dirty)
VERSION ?= $(shell v=$$(git describe --tags --match 'v[0-9]*' 2>/dev/null | sed 's/^v//; s/-/+/; s/-/./'); [ -n "$$v" ] && echo $$v || echo 0.0.0~git$$(git rev-parse --short HEAD 2>/dev/null))
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# Tests that need root (BPF, namespaces) skip with a reason without it.
TEST_FLAGS ?= -race -count=1 -timeout 25m

.PHONY: all deps bench-deps build connect-cross deb generate check-generated vet test unit fuzz lab demo demo-global bench soak clean kube-apiserver image connect-image

all: build

# deps installs the missing Debian packages of internal/hostprog's table, the one list
# of the programs the build, the tests, the demo and the benchmarks run. policy-rc.d
# keeps apt from starting the packaged nginx service: the lab runs its own nginx
# inside namespaces.
deps:
	@command -v $(GO) >/dev/null || { echo "Go is required (go.mod names the version); install it first"; exit 1; }
	@pkgs=$$($(GO) run ./internal/hostprog/debpkgs) || exit 1; \
	missing=""; for p in $$pkgs; do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; rc=$$?; \
		rm -f /usr/sbin/policy-rc.d; exit $$rc; \
	fi

# bench-deps installs the benchmarks' references that Debian does not package, from
# crates.io (internal/hostprog's crates): cargo builds each from source, once. With its
# own lock file first; a crate whose locked dependencies a newer rustc refuses (rathole
# 0.5.0 locks time 0.3.29, which Debian's current rustc does not compile) is built again
# with the newest compatible ones.
bench-deps:
	@command -v cargo >/dev/null || { echo "cargo is required for bench-deps: apt-get install cargo"; exit 1; }
	@for c in $$($(GO) run ./internal/hostprog/debpkgs -crates); do \
		cargo install --list --root /usr/local | grep -q "^$$c v" || cargo install --locked --root /usr/local $$c || \
			cargo install --root /usr/local $$c || exit 1; \
	done

# build builds the node's binary, the connector's (manifold-connect: `manifold connect`
# alone, for origins) and, apart, the benchmarks' (which link the test rig).
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/manifold
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(CONNECT) ./cmd/manifold-connect
	$(GO) build -o $(BENCH) ./cmd/manifold-bench

# connect-cross builds the connector for every OS an origin runs, as it is shipped
# (pure Go, stripped): bin/manifold-connect-$GOOS-$GOARCH[.exe]. cmd/manifold-connect's
# TestConnectorCrossBuilds checks them (at most 15 MB each).
CONNECT_TARGETS := linux/amd64 linux/arm64 darwin/arm64 windows/amd64
connect-cross:
	@for t in $(CONNECT_TARGETS); do os=$${t%/*}; arch=$${t#*/}; out=$(CONNECT)-$$os-$$arch; \
		[ $$os = windows ] && out=$$out.exe; \
		echo "GOOS=$$os GOARCH=$$arch go build -o $$out ./cmd/manifold-connect"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS) -s -w" -o $$out ./cmd/manifold-connect || exit 1; \
	done

# image builds the container image of deploy/kubernetes (Dockerfile: the static
# binary FROM scratch) with buildah; nothing is pulled. IMAGE names it, tagged with
# VERSION (an OCI tag has no ~ or +: they become -), never :latest, which would let a
# node pull another build than its neighbours.
IMAGE ?= ghcr.io/manifoldlb/manifold:$(subst +,-,$(subst ~,-,$(VERSION)))
image: deps
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/manifold-static ./cmd/manifold
	buildah bud --isolation chroot -t $(IMAGE) .

# connect-image builds the connector's image (Dockerfile.connect: manifold-connect
# FROM scratch), as image does; deploy/examples/kubernetes/connector-deployment.yaml runs it.
CONNECT_IMAGE ?= ghcr.io/manifoldlb/manifold-connect:latest
connect-image: deps
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/manifold-connect-static ./cmd/manifold-connect
	buildah bud --isolation chroot -f Dockerfile.connect -t $(CONNECT_IMAGE) .

# deb builds bin/manifold_$(VERSION)_amd64.deb (docs/install.md) with dpkg-deb:
# the binaries (stripped), the systemd units, example configs, completion. Both are
# PIE linked against libc as Debian wants (lintian: a static PIE "lacks prerequisites");
# the connector's downloads for other systems are connect-cross's, pure Go.
deb: deps
	@mkdir -p bin/deb
	$(GO) build -buildmode=pie -ldflags "$(LDFLAGS) -s -w" -o bin/deb/manifold ./cmd/manifold
	$(GO) build -buildmode=pie -ldflags "$(LDFLAGS) -s -w" -o bin/deb/manifold-connect ./cmd/manifold-connect
	$(GO) run ./deploy/debian/mkdeb --binary bin/deb/manifold --connect-binary bin/deb/manifold-connect --version $(VERSION) --out bin

# generate recompiles the BPF programs (bpf2go) into the committed Go bindings.
generate:
	$(GO) generate ./internal/datapath ./bench

# check-generated fails when the committed BPF objects differ from what the sources
# compile to with this machine's clang.
check-generated: generate
	@git diff --exit-code --stat -- ':(glob)**/*_bpfel.*' \
		|| { echo "generated BPF objects drifted from bpf/: run 'make generate' and commit"; exit 1; }

vet:
	$(GO) vet ./...

# The lab tests run after the rest, not beside them: they assert convergence bounds,
# and the other packages' tests include a packet flood (bench's packet-rate smoke test).
# internal/testenv/report turns go test's events into a line per package, the output
# of each failed test, and the skipped tests with their reasons at the end (under
# CI=true a skip for a missing program is a failure: internal/testenv); it writes
# where the time went to bin/test-times.md (docs/testing.md keeps that table).
REPORT := bin/test-report
test: deps check-generated vet build connect-cross kube-apiserver
	$(GO) build -o $(REPORT) ./internal/testenv/report
	set -o pipefail; { $(GO) test -json $(TEST_FLAGS) $$($(GO) list ./... | grep -v '/test/lab$$'); \
		$(GO) test -json $(TEST_FLAGS) ./test/lab/; } | ./$(REPORT) -times bin/test-times.md

# fuzz runs every native fuzz target (func FuzzXxx in a _test.go) for FUZZTIME each,
# one after the other: go test -fuzz takes one target per run. The targets are found,
# not listed here: the packages holding one, then go test -list in each. A crasher is
# written to the package's testdata/fuzz/FuzzXxx/, where make test runs it from then
# on; commit it with the fix. FUZZMINIMIZETIME bounds the minimizing of each input that
# finds new code (not counted in FUZZTIME's execs; at go's default of 60 s a short run on
# a busy machine can spend all of FUZZTIME minimizing). FUZZ_FLAGS: e.g. -parallel 1 on a
# shared machine.
FUZZTIME ?= 60s
FUZZMINIMIZETIME ?= 5s
FUZZ_FLAGS ?=
fuzz:
	@for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' internal cmd test 2>/dev/null | xargs -n1 dirname | sort -u); do \
		for t in $$($(GO) test -list '^Fuzz' ./$$pkg | grep '^Fuzz'); do \
			echo "== ./$$pkg $$t ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $(FUZZ_FLAGS) ./$$pkg || exit 1; \
		done; \
	done

unit:
	$(GO) test -race -count=1 ./internal/config ./internal/maglev ./internal/reconcile ./internal/health ./internal/clock ./internal/sysctl ./internal/store ./internal/api/... ./internal/metrics ./internal/hostprog/... ./internal/link ./test/arch

lab: deps build
	$(GO) test -count=1 -v ./test/lab/

demo: deps build
	$(GO) run ./test/lab/demo

# demo-global: the world of TestWorld narrated act by act (docs/global-accelerator.md)
demo-global: deps build
	$(GO) run ./test/lab/demoglobal -manifold $(BIN)

# soak: the chaos soak (test/lab/soak.go), ROUNDS rounds of at most 5 s, a fault each,
# drawn from SEED (from the clock when empty; printed first, to replay a failure). Not
# part of make test, which runs TestSoak's 20 rounds. Writes bench/results/soak.md and
# soak.json; fails when a goal is missed.
ROUNDS ?= 1000
SEED   ?=
soak: deps build
	$(GO) run ./test/lab/soak -manifold $(BIN) -rounds $(ROUNDS) $(if $(SEED),-seed $(SEED)) \
		-out bench/results -commit "$$(git rev-parse --short HEAD 2>/dev/null)"

# bench: every benchmark, each next to its references in the same run; numbers and
# ratios, never pass/fail. Each part writes bench/results/parts/*.json; the report
# merges them into latest.json and latest.md, and the plots are drawn from latest.json.
PARTS = bench/results/parts
# the fleet100 part's fleet: nodes (each a `manifold run` in a namespace; fewer start
# when the machine runs short of memory, and the results say so) and services in the store
FLEET_NODES    ?= 100
FLEET_SERVICES ?= 10000
bench: deps bench-deps build kube-apiserver
	@mkdir -p $(PARTS)
	./$(BENCH) dataplane --json $(PARTS)/dataplane.json
	./$(BENCH) pktrate --json $(PARTS)/pktrate.json
	./$(BENCH) transit --json $(PARTS)/transit.json
	./$(BENCH) sizes --json $(PARTS)/sizes.json
	$(GO) run ./test/lab/httpbench -manifold $(BIN) -json $(PARTS)/http.json
	./$(BENCH) controlplane --json $(PARTS)/controlplane.json
	./$(BENCH) apiwrite --json $(PARTS)/apiwrite.json
	./$(BENCH) kubewrite --json $(PARTS)/kubewrite.json
	./$(BENCH) steerscale --json $(PARTS)/steerscale.json
	$(GO) run ./test/lab/cpbench -manifold $(BIN) -json $(PARTS)/convergence.json
	$(GO) run ./test/lab/fleetbench -manifold $(BIN) -json $(PARTS)/fleet.json
	set -o pipefail; $(GO) run ./test/lab/fleet100 -manifold $(BIN) -nodes $(FLEET_NODES) -services $(FLEET_SERVICES) \
		-json $(PARTS)/fleet100.json | tee bench/results/fleet100.txt
	$(GO) run ./test/lab/linkbench -manifold $(BIN) -json $(PARTS)/link.json
	$(GO) run ./test/lab/linkbench -part linkpaths -manifold $(BIN) -json $(PARTS)/linkpaths.json
	$(GO) run ./test/lab/tunnelbench -connect $(CONNECT) -json $(PARTS)/tunnel.json
	./$(BENCH) report --out bench/results --commit "$$(git rev-parse --short HEAD 2>/dev/null)" \
		$(PARTS)/dataplane.json $(PARTS)/pktrate.json $(PARTS)/transit.json $(PARTS)/sizes.json $(PARTS)/http.json $(PARTS)/controlplane.json $(PARTS)/apiwrite.json $(PARTS)/kubewrite.json $(PARTS)/steerscale.json $(PARTS)/convergence.json $(PARTS)/fleet.json $(PARTS)/fleet100.json $(PARTS)/link.json $(PARTS)/linkpaths.json $(PARTS)/tunnel.json
	/usr/bin/python3 bench/plot.py bench/results/latest.json bench/results
	@mkdir -p bench/results/steer && for f in bench/steer/*.yaml; do n=$$(basename $$f .yaml); ./$(BIN) steer simulate --scenario $$f --json bench/results/steer/$$n.json --plot bench/results/steer/$$n.png > bench/results/steer/$$n.txt || exit 1; done

# kube-apiserver is the real API server the Kubernetes tests run against. Debian has no
# package of it, so it is built from the k8s.io/kubernetes module at KUBE_VERSION in a
# throw-away module under KUBE_CACHE (outside the tracked tree): the module zip lacks
# the staging directories its go.mod replaces the k8s.io/* modules with, so each of
# those replace lines points at the published module of the matching v0 version. About
# 10 minutes on 2 cores, once per version: bin/kube-apiserver links the cached binary.
KUBE_VERSION := 1.37.2
KUBE_CACHE   := $(HOME)/.cache/manifold/kube-apiserver-v$(KUBE_VERSION)

kube-apiserver: bin/kube-apiserver

bin/kube-apiserver: $(KUBE_CACHE)/kube-apiserver
	@mkdir -p bin
	ln -sfn $< $@

$(KUBE_CACHE)/kube-apiserver:
	@mkdir -p $(KUBE_CACHE)/src
	@printf 'package main\n\nimport (\n\t"os"\n\n\t"k8s.io/component-base/cli"\n\t"k8s.io/kubernetes/cmd/kube-apiserver/app"\n)\n\nfunc main() { os.Exit(cli.Run(app.NewAPIServerCommand())) }\n' > $(KUBE_CACHE)/src/main.go
	@printf 'module manifold.local/kube-apiserver\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes v$(KUBE_VERSION)\n' > $(KUBE_CACHE)/src/go.mod
	cd $(KUBE_CACHE)/src && modfile=$$(GOFLAGS=-mod=mod $(GO) mod download -json k8s.io/kubernetes@v$(KUBE_VERSION) | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$$/\1/p') && \
		for m in $$(sed -n 's|^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/.*|\1|p' $$modfile); do \
			$(GO) mod edit -replace=$$m=$$m@v0.$(patsubst 1.%,%,$(KUBE_VERSION)); done && \
		GOFLAGS=-mod=mod $(GO) mod tidy && \
		CGO_ENABLED=0 GOFLAGS=-mod=mod $(GO) build -o ../kube-apiserver.tmp . && mv ../kube-apiserver.tmp ../kube-apiserver

clean:
	rm -rf bin
