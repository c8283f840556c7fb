# frontdoor: build, test and benchmark.
GO       ?= go
PKGS     ?= ./...
BENCHTIME ?= 2s

.PHONY: test crossbuild build lint bench fuzz redis-server demo clean

## test: the cross-builds, then every test with the race detector against a
## real redis-server.
test: crossbuild redis-server
	FRONTDOOR_REQUIRE_REDIS=1 $(GO) test -race -count=1 $(PKGS)

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

## build: build both binaries into ./bin.
build:
	$(GO) build -o bin/frontdoor ./cmd/frontdoor
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

## fuzz: fuzz the request parser and the warm-file parser for 60s each.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParseRequest -fuzztime 60s ./adapters
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./internal/warm

## demo: run the self-contained demo.
demo:
	$(GO) run ./cmd/frontdoor demo

clean:
	rm -rf bin
