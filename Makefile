# frontdoor: build, test and benchmark.
GO       ?= go
PKGS     ?= ./...
BENCHTIME ?= 2s

.PHONY: test test-quick e2e docker crossbuild build lint bench fuzz redis-server chromium demo clean request-life

## test: the cross-builds, then every test with the race detector against a
## real redis-server, and the dashboard in a real headless Chromium, after
## 15 s of fuzzing that every JSON frontdoor writes to a client is valid.
## internal/testshard runs the packages, each named as it starts, and the
## router's tests in ROUTER_SHARDS shards at once (they mostly wait).
ROUTER_SHARDS ?= 6
test: crossbuild redis-server chromium
	$(GO) test -run '^$$' -fuzz '^FuzzAnswersAreValidJSON$$' -fuzztime 15s ./adapters
	FRONTDOOR_REQUIRE_REDIS=1 $(GO) run ./internal/testshard -split frontdoor/router=$(ROUTER_SHARDS) -- -race -count=1 $(PKGS)

## test-quick: every test once, -short and without the race detector, for
## the edit-test loop; it installs nothing (make test is what CI runs).
test-quick:
	$(GO) run ./internal/testshard -split frontdoor/router=$(ROUTER_SHARDS) -- -short -count=1 $(PKGS)

## e2e: the containers for real (deploy/e2e_test.go, TestE2E): build the
## images from deploy/Dockerfile on local stand-in base images (debootstrap,
## cached as frontdoor-local/*), run the image read-only, and run the Compose
## stack (nginx, both replicas, Redis with RediSearch, the simulators) in
## Docker. Not part of `make test`; CI runs it where Docker is (.ci/e2e).
e2e: docker
	FRONTDOOR_E2E=require $(GO) test -count=1 -v -run '^TestE2E$$' -timeout 30m ./deploy/

## docker: make sure Debian's docker.io, docker-compose and debootstrap are
## installed (apt-get, as root) and that dockerd runs (started as root when it
## does not; its log is /var/log/frontdoor-dockerd.log).
E2E_PKGS = docker.io docker-compose debootstrap
docker:
	@if [ ! -x /usr/bin/docker ] || ! command -v dockerd >/dev/null 2>&1 || ! command -v docker-compose >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing $(E2E_PKGS) with apt-get"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(E2E_PKGS) >/dev/null; \
		else \
			echo "missing packages; install them with: sudo apt-get install -y $(E2E_PKGS)"; exit 1; \
		fi; \
	fi
	@if ! /usr/bin/docker info >/dev/null 2>&1; then \
		if [ "$$(id -u)" != "0" ]; then echo "dockerd is not running and only root starts it here"; exit 1; fi; \
		echo "starting dockerd (log: /var/log/frontdoor-dockerd.log)"; \
		nohup dockerd >/var/log/frontdoor-dockerd.log 2>&1 & \
		for i in $$(seq 30); do /usr/bin/docker info >/dev/null 2>&1 && break; sleep 1; done; \
		/usr/bin/docker info >/dev/null || { tail -20 /var/log/frontdoor-dockerd.log; exit 1; }; \
	fi

## soak: make test RUNS times in a row (default 20) from a clean clone of
## HEAD in a temporary directory (beside a link to ../shared when there is
## one, as CI has it), one line per run (result, seconds, load); it stops
## at the first failure and keeps that run's log.
RUNS ?= 20
soak:
	@dir=$$(mktemp -d); git clone -q . "$$dir/repo" && \
	if [ -d ../shared ]; then ln -s "$(abspath ../shared)" "$$dir/shared"; fi && cd "$$dir/repo" && \
	for i in $$(seq 1 $(RUNS)); do \
		start=$$(date +%s); \
		if $(MAKE) -s test > "$$dir/run-$$i.log" 2>&1; then r=PASS; else r=FAIL; fi; \
		echo "run $$i $$r $$(( $$(date +%s) - start ))s $$(git rev-parse --short HEAD) load $$(cut -d' ' -f1-3 /proc/loadavg)"; \
		if [ $$r = FAIL ]; then echo "log: $$dir/run-$$i.log"; exit 1; fi; \
	done; rm -rf "$$dir"

## crossbuild: everything must build for the platforms people run it on.
crossbuild:
	GOOS=linux GOARCH=arm64 $(GO) build $(PKGS)
	GOOS=darwin GOARCH=arm64 $(GO) build $(PKGS)

## redis-server: make sure Debian's redis-server, redis-cli (a cluster is made
## with it) and redis-redisearch (RediSearch 1.2, the "no vector search" case)
## are installed; tests start their own servers. The RediSearch module with
## vector search is shared/redis-modules/redisearch-2.6.37.so beside the
## repository (or FRONTDOOR_REDISEARCH_MODULE); its tests skip without it.
REDIS_PKGS = redis-server redis-tools redis-redisearch
redis-server:
	@if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1 || [ ! -f /usr/lib/redis/modules/redisearch.so ]; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing $(REDIS_PKGS) with apt-get"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(REDIS_PKGS) >/dev/null; \
		else \
			echo "missing packages; install them with: sudo apt-get install -y $(REDIS_PKGS)"; exit 1; \
		fi; \
	fi

## chromium: make sure Debian's chromium is installed: the dashboard's browser
## test (router.TestDashboardInBrowser) drives it, and skips without it.
chromium:
	@if ! command -v chromium >/dev/null 2>&1 && [ -z "$$FRONTDOOR_CHROMIUM" ]; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing chromium with apt-get"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
		else \
			echo "chromium is missing: the dashboard's browser test will skip; install it with: sudo apt-get install -y chromium"; \
		fi; \
	fi

## build: build both binaries into ./bin, stamped with the version
## (git describe) and revision; without them frontdoor reads its module's
## build info.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  ?= -X frontdoor/internal/buildinfo.version=$(VERSION) -X frontdoor/internal/buildinfo.revision=$(REVISION)
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/frontdoor ./cmd/frontdoor
	$(GO) build -o bin/gpusim ./cmd/gpusim

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

## lint: the cross-builds, then gofmt, go vet and staticcheck must be clean.
lint: crossbuild
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

## bench: Go micro-benchmarks, then the gateway overhead benchmark.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)
	$(GO) run ./bench/overhead

## fuzz: fuzz the request parsers (chat and completions, Responses,
## embeddings), a node's Responses stream, the reader of a node's embeddings
## answer, the agreement of the cache's and an engine's reading of a
## request, the pass-through's model reader, the agreement of a body's
## pre-scan (scanBody) with validation, the warm-file parser and the
## validity of every JSON written to clients for 60s each.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParseRequest -fuzztime 60s ./adapters
	$(GO) test -run '^$$' -fuzz FuzzParseResponsesRequest -fuzztime 60s ./adapters
	$(GO) test -run '^$$' -fuzz FuzzResponseStream -fuzztime 60s ./adapters
	$(GO) test -run '^$$' -fuzz FuzzParseEmbeddingsRequest -fuzztime 60s ./adapters
	$(GO) test -run '^$$' -fuzz FuzzParseEmbeddingsAnswer -fuzztime 60s ./adapters
	$(GO) test -run '^$$' -fuzz FuzzAnswersAreValidJSON -fuzztime 60s ./adapters
	$(GO) test -run '^$$' -fuzz FuzzParsePassthrough -fuzztime 60s ./adapters
	$(GO) test -run '^$$' -fuzz FuzzScanBodyAgreesWithValidation -fuzztime 60s ./adapters
	$(GO) test -run '^$$' -fuzz FuzzRequestViewsAgree -fuzztime 60s ./router
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./internal/warm

## demo: run the self-contained demo.
demo:
	$(GO) run ./cmd/frontdoor demo

clean:
	rm -rf bin

## request-life: which files of the router tree one streamed miss runs,
## checked against router/doc.go's list (bench/requestlife; make test runs
## it as TestRequestLifeMatchesDoc).
request-life:
	$(GO) build -cover -covermode=atomic -coverpkg=frontdoor/router/...,frontdoor/bench/requestlife -o /tmp/frontdoor-requestlife ./bench/requestlife
	GOCOVERDIR=$$(mktemp -d) /tmp/frontdoor-requestlife -doc router/doc.go
