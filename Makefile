# auditlens: the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
MODULES := lib proto deploy deploy/images deploy/release deploy/kubetest deploy/node deploy/nodetest services/ingest services/classify services/report services/auditlens
BIN := $(CURDIR)/.bin
CHDB_VERSION := 26.7.3-stable.1
## the npm tarball's SHA-512 in hex (the registry's integrity sha512-XP97mMqn...pw== is the same
## digest in base64), checked on every fetch: a changed or substituted package is refused
CHDB_SHA512 := 5cff7b98caa7739b59a4a432c11f0dedc2d3b073624e61ebdf4a42e66ce8de35a6ba48ca9f62016bad1cd81fe059435cb858ce3235a8a2b408082a81563e70a7
CHDB_DIR := $(CURDIR)/.cache/chdb
## CACHE_DIR: what every clone may share, beside Go's build cache: libchdb by version, the
## Kubernetes binaries by version and go.mod (deploy/kubetest/kubeapiserver.CacheDir).
CACHE_DIR := $(or $(AUDITLENS_CACHE_DIR),$(shell go env GOCACHE 2>/dev/null | xargs -r dirname)/auditlens)
export AUDITLENS_CACHE_DIR := $(CACHE_DIR)
export CHDB_LIB_PATH ?= $(CHDB_DIR)/libchdb.so
## The one version source is deploy/VERSION; every binary built here is stamped with it, the
## commit and the commit's time (--version, auditlens_build_info), so the same commit gives the
## same bytes.
VERSION := $(shell cat deploy/VERSION)
COMMIT := $(shell git rev-parse HEAD 2>/dev/null)
BUILD_DATE := $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
BUILDINFO := github.com/auditlens/auditlens/lib/buildinfo
LDFLAGS := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) -X $(BUILDINFO).date=$(BUILD_DATE)

.PHONY: run test date-check build mod-check vet fmt-check lint proto proto-check tools chdb bench bench-10m bench-capacity fuzz clean images kube-apiserver release notice sign verify

## run: the whole pipeline in one process on embedded defaults (embedded NATS, embedded ClickHouse),
## fed with the genuine events of examples/audit.log (kept forever: they are from 2017 to 2025).
run: build chdb
	$(BIN)/auditlens --data-root .data --audit-log examples/audit.log --retention-days 0

## build: every binary into .bin/
build:
	@mkdir -p $(BIN)
	cd services/ingest && go build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/ingest
	cd services/classify && go build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/classify
	cd services/report && go build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/report
	cd services/auditlens && go build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/auditlens

## RACE_<module>: the packages that run goroutines (bus, daemon, pipelines, writer, webhook, tail, ...);
## `make test` runs them under the race detector, the rest without it (each package runs once).
RACE_lib := ./bus/... ./daemon/... ./telemetry/... ./transport/...
RACE_services/ingest := . ./file/... ./webhook/... ./tail/... ./checkpoint/... ./firehose/... ./pubsub/... ./kafka/... ./cloudwatch/...
RACE_services/classify := . ./scan/... ./dedup/...
RACE_services/report := . ./writer/... ./page/... ./weekly/schedule/... ./weekly/mail/...
RACE_services/auditlens :=

## test: every module's tests on its own (GOWORK=off), gofmt, lint (with go vet's analyzers), the generated-file
## checks and the date check. Its jobs run TEST_LANES at a time (most tests wait on servers,
## processes and the network more than they compute), the longest first; each job's output is
## printed whole when it ends. Every job runs even when one fails (the failures are named at
## the end); each job's seconds and CPU seconds (and each check's seconds) are written to
## $(TIMES), which .ci/run prints.
## vet is not among them: golangci-lint's govet (make lint) runs go vet's analyzers, the same
## list as cmd/vet of the Go release, on the same packages and tests; make vet stays for a
## quick look at one change.
CHECKS := fmt-check mod-check lint proto-check catalogue-check
TIMES := $(BIN)/test-times.tsv
TEST_LANES ?= 2
## the jobs, longest first as measured in .ci/run's table, those that need PREBUILT last
JOBS := services/report date-check deploy/release checks services/ingest lib services/classify deploy/images deploy proto services/auditlens deploy/kubetest deploy/nodetest deploy/node
## PREBUILT: the jobs whose tests run the Kubernetes binaries or the images. When PREBUILD_RC
## names a file, they first wait for it to hold the exit code of that build: .ci/run builds them
## beside the first jobs.
PREBUILT := services/auditlens deploy/nodetest deploy/kubetest deploy/node
test:
	@mkdir -p $(BIN)/test-logs; : > $(TIMES)
	@test "$$(echo $(JOBS) | tr ' ' '\n' | sort)" = "$$(echo $(MODULES) checks date-check | tr ' ' '\n' | sort)" || { echo "JOBS must list every module of MODULES, checks and date-check"; exit 1; }
	@$(MAKE) --no-print-directory test-job J=compile || true
	@printf '%s\n' $(JOBS) | xargs -P $(TEST_LANES) -I{} $(MAKE) --no-print-directory test-job J={} || true
	@failed=$$(awk -F'\t' '$$3 == "FAIL" { printf " %s", $$1 }' $(TIMES)); \
	  if [ -n "$$failed" ]; then echo "FAIL:$$failed"; exit 1; fi; echo "every job of make test passed"

## compile: every module's packages and tests compiled into Go's build cache (go list -export
## compiles without linking), the race packages with the race detector too, module after
## module, each go command on both cores. make test runs it before its lanes: on a new machine
## two lanes starting together compiled the same packages side by side, each unaware of the
## other.
compile:
	@rc=0; $(foreach m,$(MODULES),(cd $(m) && GOWORK=off $(TEST_ENV) $(COMPILE_GC) go list -export -deps -test ./... >/dev/null $(if $(strip $(RACE_$(m))),&& GOWORK=off $(RACE_ENV) $(COMPILE_GC) go list -race -export -deps -test $(RACE_$(m)) >/dev/null)) || rc=1;) exit $$rc

## checks: gofmt, tidy go.mod files, lint (govet included), the generated files (one of make test's jobs).
.PHONY: checks test-job compile
checks:
	@mkdir -p $(BIN); set -e; for c in $(CHECKS); do s=$$(date +%s); $(MAKE) --no-print-directory $$c; \
	  printf '  make %s\t%d\n' $$c $$(( $$(date +%s) - s )) >> $(TIMES); done

## test-job J=<job>: one job of make test (a module's tests, checks or date-check), its output
## kept in .bin/test-logs and printed when it ends.
test-job:
	@log=$(BIN)/test-logs/$(subst /,_,$(J)).log; \
	if [ -n "$(PREBUILD_RC)" ] && [ -n "$(filter $(J),$(PREBUILT))" ]; then echo "== $(J) waits for the prebuild"; \
	  while [ ! -s "$(PREBUILD_RC)" ]; do sleep 5; done; fi; \
	s=$$(date +%s); echo "== $(J) (started $$(date -u +%T))"; \
	if [ -n "$(PREBUILD_RC)" ] && [ -n "$(filter $(J),$(PREBUILT))" ] && [ "$$(cat $(PREBUILD_RC))" != 0 ]; then echo "the prebuild failed (.bin/prebuild.log)" > $$log; r=FAIL; \
	elif $(if $(filter checks date-check compile,$(J)),$(MAKE) --no-print-directory $(J),(cd $(J) && $(call gotest,$(RACE_$(J))))) > $$log 2>&1; then r=ok; else r=FAIL; fi; \
	times > $$log.times; cpu=$$(.ci/cpu-seconds $$log.times); \
	printf '%s\t%d\t%s\t%d\n' $(J) $$(( $$(date +%s) - s )) $$r $$cpu >> $(TIMES); \
	flock $(BIN)/test-logs/.print sh -c "echo '== $(J): $$r in $$(( $$(date +%s) - s ))s ($$cpu s of CPU)'; cat $$log"

## date-check: the date-sensitive tests again at each "now" of .ci/test-dates (AUDITLENS_TEST_NOW,
## read by lib/testkit.Now): every day of next week, a Sunday's last second, a Monday's first
## minute, a month's and a year's last minute, the next 29 February; the rollup and the
## console pages, which turn on days, months and years but not on the weekday, at the last
## five only. .ci/date-check links each package's tests once and runs them at every date.
## It is one of make test's jobs.
date-check:
	@$(TEST_ENV) .ci/date-check

## TEST_GOFLAGS: make test builds every test, and golangci-lint and the date check load every
## package, as deploy/release (gobuild.Build) builds the linux/amd64 release and the images:
## no cgo, -trimpath, the timetzdata tag. So one compile of each package serves the tests, the
## release, the images and the binaries the tests build (they inherit GOFLAGS and CGO_ENABLED),
## where a second set of flags compiled the whole graph twice on a new machine. The race
## detector needs cgo: those packages are compiled with it (RACE_ENV), their test binaries run
## without it (-exec), so what they build is shared too. deploy/release TestSharedBuildFlags holds the
## two lists equal.
TEST_GOFLAGS := -trimpath -tags=timetzdata
TEST_ENV := CGO_ENABLED=0 GOFLAGS='$(TEST_GOFLAGS)'
RACE_ENV := CGO_ENABLED=1 GOFLAGS='$(TEST_GOFLAGS)'
## COMPILE_GC: the compilers of make compile (and of .ci/run's prebuild) collect garbage four
## times less often, each under a 3 GiB soft limit: compiling deploy/release's 252 packages
## from nothing took 7-12% less CPU than at the default GOGC=100 (two rounds, 2026-12-06).
COMPILE_GC := GOGC=400 GOMEMLIMIT=3GiB

# gotest runs a module's packages once each: those named in $(1) with -race, the others without.
# TEST_TIMEOUT catches a hang, not slowness: deploy/release's reproducibility test took 1175 s
# of its old 20 minutes beside the other lane (CI run of 2026-12-05), and on a new machine
# (nothing in Go's build cache, 2026-12-06) its 16 cold builds for four platforms beside the
# other lane and the prebuild passed 45 minutes: TEST_TIMEOUT_<job> overrides it for one job.
TEST_TIMEOUT ?= 45m
TEST_TIMEOUT_deploy/release ?= 85m
define gotest
all=$$(GOWORK=off go list ./...); race=$$( [ -z "$(strip $(1))" ] || GOWORK=off go list $(1)); \
rest=$$(comm -23 <(echo "$$all" | sort) <(echo "$$race" | sort)); \
ok=0; if [ -n "$$race" ]; then GOWORK=off $(RACE_ENV) go test -race -exec 'env CGO_ENABLED=0' -count=1 -timeout $(or $(TEST_TIMEOUT_$(J)),$(TEST_TIMEOUT)) $$race || ok=1; fi; \
if [ -n "$$rest" ]; then GOWORK=off $(TEST_ENV) go test -count=1 -timeout $(or $(TEST_TIMEOUT_$(J)),$(TEST_TIMEOUT)) $$rest || ok=1; fi; exit $$ok
endef

## mod-check: every go.mod is tidy on its own (no requirement only go.work provides), and the
## modules agree on every dependency's version (go work sync would change no go.mod): a package
## at two versions is compiled twice, with everything above it (the tests of the twelve modules
## compiled 3,013 packages for 2,299 import paths before they agreed, 2,335 after).
mod-check:
	@set -e; for m in $(MODULES) tools tools/catalogue; do (cd $$m && GOWORK=off go mod tidy -diff >/dev/null) || { echo "$$m: go.mod/go.sum not tidy: run GOWORK=off go mod tidy there"; exit 1; }; done
	@set -e; t=$$(mktemp -d); for m in $(MODULES); do mkdir -p $$t/$$m; cp $$m/go.mod $$m/go.sum $$t/$$m/; done; \
	  go work sync; bad=; for m in $(MODULES); do cmp -s $$m/go.mod $$t/$$m/go.mod || bad="$$bad $$m"; cp $$t/$$m/go.mod $$t/$$m/go.sum $$m/; done; rm -rf $$t; \
	  [ -z "$$bad" ] || { echo "go work sync would raise versions in:$$bad: run it, then GOWORK=off go mod tidy in each (every module at one version of each dependency)"; exit 1; }

vet:
	@set -e; for m in $(MODULES); do echo "== go vet $$m"; (cd $$m && GOWORK=off go vet ./...); done

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

tools: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/golangci-lint
$(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/golangci-lint: tools/go.mod tools/go.sum
	@mkdir -p $(BIN)
	cd tools && GOWORK=off go build -o $(BIN)/ github.com/bufbuild/buf/cmd/buf google.golang.org/protobuf/cmd/protoc-gen-go github.com/golangci/golangci-lint/v2/cmd/golangci-lint

## lint: buf lint on the protobuf files, and golangci-lint (.golangci.yml: staticcheck, errorlint,
## bodyclose, sloglint, ...) on every Go module, tests included; clean means no finding at all.
## Another checkout's lint on this machine is waited for (--allow-serial-runners), not a failure.
lint: tools
	cd proto && $(BIN)/buf lint
	@set -e; for m in $(MODULES) tools/catalogue; do echo "== golangci-lint $$m"; (cd $$m && GOWORK=off $(TEST_ENV) $(BIN)/golangci-lint run --allow-serial-runners --config $(CURDIR)/.golangci.yml ./...); done

proto: tools
	cd proto && PATH=$(BIN):$$PATH $(BIN)/buf generate

## proto-check: regenerating the Go code from the .proto files must change nothing.
proto-check: proto
	@git diff --exit-code -- proto || { echo "generated proto code is stale: run make proto and commit"; exit 1; }

## images: OCI archives .bin/images/<binary>.tar: ingest, classify and report as image indexes
## for linux/amd64 and linux/arm64, the all-in-one auditlens for linux/amd64 with libchdb inside;
## named $(REGISTRY)/<binary>:$(VERSION), as deploy/kubernetes uses them (REGISTRY is set here
## only: make images REGISTRY=registry.example.com/auditlens). Built offline and reproducibly
## (same commit, same digests). See docs/install.md to load or push them.
REGISTRY ?= ghcr.io/auditlens
IMAGES := ingest classify report auditlens
images: chdb
	cd deploy/images && GOWORK=off go run . -repo ../.. -out $(BIN)/images -registry $(REGISTRY) -libchdb $(CHDB_LIB_PATH) $(IMAGES)
	@if [ -n "$(SIGNING_KEY)" ]; then cd deploy/release && GOWORK=off go run . sign -repo ../.. -key $(abspath $(SIGNING_KEY)) -images $(BIN)/images; fi

## release: dist/ for the commit you are on (see docs/install.md): a tar.gz per platform
## (linux/amd64 with libchdb.so), the krew plugin's archives, a CycloneDX SBOM, SHA256SUMS, and
## generated, not published, the krew manifest and the Homebrew formula carrying the checksums.
## Reproducible: the same commit gives the same SHA256SUMS (deploy/release TestDist).
release: chdb
	cd deploy/release && GOWORK=off go run . dist -repo ../.. -out ../../dist -libchdb $(CHDB_LIB_PATH) -libchdb-version $(CHDB_VERSION)
	@if [ -n "$(SIGNING_KEY)" ]; then cd deploy/release && GOWORK=off go run . sign -repo ../.. -key $(abspath $(SIGNING_KEY)) -dist ../../dist -libchdb-version $(CHDB_VERSION); fi
	cat dist/SHA256SUMS

## Signatures (docs/install.md, "Verify what you download"): make release and make images sign
## what they write when SIGNING_KEY names the release's private key (PEM; cosign's encrypted
## format with AUDITLENS_SIGNING_PASSWORD or COSIGN_PASSWORD); the maintainers keep it offline.
## verify checks dist/ and the image archives, whichever exist, against VERIFY_KEY (default: the
## project's public key, deploy/release/auditlens-release.pub); sign signs them afterwards.
VERIFY_KEY ?= deploy/release/auditlens-release.pub
sign:
	@test -n "$(SIGNING_KEY)" || { echo "make sign SIGNING_KEY=path/to/private.key"; exit 2; }
	cd deploy/release && GOWORK=off go run . sign -repo ../.. -key $(abspath $(SIGNING_KEY)) $(if $(wildcard dist/SHA256SUMS),-dist ../../dist -libchdb-version $(CHDB_VERSION)) $(if $(wildcard $(BIN)/images/*.tar),-images $(BIN)/images)
verify:
	@test -n "$(wildcard dist/SHA256SUMS)$(wildcard $(BIN)/images/*.tar)" || { echo "nothing to verify: make release or make images first"; exit 2; }
	cd deploy/release && GOWORK=off go run . verify -repo ../.. -key $(abspath $(VERIFY_KEY)) $(if $(wildcard dist/SHA256SUMS),-dist ../../dist) $(if $(wildcard $(BIN)/images/*.tar),-images $(BIN)/images)

## notice: regenerate NOTICE from the module graph of the shipped binaries (a test fails when stale).
notice:
	cd deploy/release && GOWORK=off go run . notice -repo ../.. -out ../../NOTICE

## kube-apiserver: build the real kube-apiserver deploy/kubetest runs alone (cached in
## $(CACHE_DIR)/kube-apiserver; the tests build it themselves when missing, and take make
## kube-node's when that is built).
kube-apiserver:
	cd deploy/kubetest && GOWORK=off go run ./cmd/build-kube-apiserver

## node-up: a one-node Kubernetes cluster on this machine (etcd, the apiserver, controller-manager,
## scheduler, kubelet and kube-proxy of k8s.io/kubernetes, containerd, runc, the CNI bridge) with
## auditlens deployed from deploy/nodetest/overlay; returns once every pod is Ready and writes
## .cache/node/kubeconfig. node-down stops it all. See docs/node.md. Run as root.
.PHONY: node-up node-down kube-node
node-up: $(BIN)/images/ingest.tar
	@mkdir -p $(BIN)
	cd deploy/node && GOWORK=off go build -o $(BIN)/node ./cmd/node
	$(BIN)/node up -repo $(CURDIR)
node-down:
	@mkdir -p $(BIN)
	cd deploy/node && GOWORK=off go build -o $(BIN)/node ./cmd/node
	$(BIN)/node down -repo $(CURDIR)
$(BIN)/images/ingest.tar:
	$(MAKE) images

## kube-node: build the node's Kubernetes binaries (deploy/node) in one go build, cached in
## $(CACHE_DIR)/kubernetes (about 10 minutes on two cores after the apiserver's build, seconds after).
kube-node:
	cd deploy/kubetest && GOWORK=off go run ./cmd/build-kube-node

## chdb: fetch libchdb.so (embedded ClickHouse) from the npm registry into the shared cache
## ($(CACHE_DIR)/chdb/<version>, once for every clone) and link it into .cache/chdb.
chdb: $(CHDB_DIR)/libchdb.so
$(CHDB_DIR)/libchdb.so:
	@mkdir -p $(CHDB_DIR) $(CACHE_DIR)/chdb/$(CHDB_VERSION)
	@set -e; c=$(CACHE_DIR)/chdb/$(CHDB_VERSION); if [ ! -f $$c/libchdb.so ]; then \
	  t=$$(mktemp -d $$c/.fetch.XXXXXX); \
	  (cd $$t && npm pack --silent @chdb/lib-linux-x64-gnu@$(CHDB_VERSION) >/dev/null && \
	   got=$$(sha512sum chdb-lib-linux-x64-gnu-$(CHDB_VERSION).tgz | cut -d" " -f1) && \
	   { [ "$$got" = "$(CHDB_SHA512)" ] || { echo "libchdb $(CHDB_VERSION): sha512 $$got, want $(CHDB_SHA512): refused"; exit 1; }; } && \
	   tar xzf chdb-lib-linux-x64-gnu-$(CHDB_VERSION).tgz) || { rm -rf $$t; exit 1; }; \
	  mv $$t/package/libchdb.so $$c/libchdb.so; rm -rf $$t; fi; \
	ln -f $$c/libchdb.so $@ 2>/dev/null || cp $$c/libchdb.so $@

## bench: the benchmarks of every module, except the 10-million-finding ones (bench-10m).
bench:
	@set -e; for m in $(MODULES); do (cd $$m && GOWORK=off go test -run '^$$' -bench . -skip '10M|Capacity' -benchmem ./...); done

## bench-capacity: the simulated fleet on a JetStream cluster and a ClickHouse cluster (about 20
## minutes; README "Capacity, measured").
bench-capacity:
	cd services/auditlens && GOWORK=off go test -run '^$$' -bench Capacity -benchtime 1x -timeout 2h ./e2e/

## bench-10m: the weekly report and the week's aggregation over 10 M findings on ClickHouse 18.16
## (generating them server-side takes 2 to 4 minutes).
bench-10m:
	cd services/report && GOWORK=off go test -run '^$$' -bench '10M' -benchtime 3x ./store/ ./weekly/

## fuzz: every fuzz target of every module for FUZZTIME each (seed corpora also run in `make test`).
FUZZTIME ?= 30s
fuzz:
	@set -e; for m in $(MODULES); do (cd $$m && for d in $$(GOWORK=off go list -f '{{.Dir}}' ./...); do \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$d/*_test.go 2>/dev/null | cut -c6-); do \
	    echo "== fuzz $$m $${d#$$PWD/} $$f ($(FUZZTIME))"; \
	    GOWORK=off go test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) "$$d" || exit 1; \
	  done; done); done

clean:
	rm -rf $(BIN) .data dist

.PHONY: catalogue catalogue-check
## catalogue: regenerate the API section of the classify rule catalogue
## (services/classify/rules/apis.generated.yaml) from the prerelease lifecycle data of k8s.io/api,
## k8s.io/apiextensions-apiserver and k8s.io/kube-aggregator (tools/catalogue/modules.txt; their zips
## come through the Go module proxy into the module cache: ~105 MB of zips, ~750 MB unpacked, ~2 min
## the first time, seconds after) and
## tools/catalogue/overlay.yaml.
catalogue:
	cd tools/catalogue && GOWORK=off go test -count=1 . && GOWORK=off go run . -out ../../services/classify/rules/apis.generated.yaml

## catalogue-check: regenerating the API catalogue must change nothing.
catalogue-check:
	cd tools/catalogue && GOWORK=off go test -count=1 . && GOWORK=off go run . -check -out ../../services/classify/rules/apis.generated.yaml
