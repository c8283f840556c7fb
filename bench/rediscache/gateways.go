package main

// The processes of one run: Redis and the frontdoor replicas, and their
// config.

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"frontdoor/bench/internal/load"
)

// keyPrefix is the gateways' redis.key_prefix; cache keys live under
// keyPrefix+"c:", vectors in HASHes under keyPrefix+"c:v:".
const keyPrefix = "fdbench:"

// startGateways starts the processes of one run in dir: Redis, unless
// backend is memory, and n frontdoor replicas, each added to *started as
// soon as it runs. It returns the replicas' base URLs and, for Redis, a
// client, also when it fails later.
func startGateways(ctx context.Context, o opts, e *env, backend, dir string, n int, started *[]*load.Proc) (urls []string, rdb *redis.Client, err error) {
	redisPort := 0
	if backend != "memory" {
		rs, err := e.procs.StartRedis(ctx, dir, "--loadmodule", e.module, "--latency-monitor-threshold", "10")
		if err != nil {
			return nil, nil, err
		}
		*started = append(*started, rs.Proc)
		redisPort = rs.Port
		rdb = redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: -1})
	}
	var env []string
	for _, t := range tenants {
		env = append(env, t.env+"="+t.key)
	}
	for i := range n {
		// Named by number: its files are dir/0.yaml and dir/0.log, its
		// errors say "frontdoor 0".
		base, p, err := e.procs.StartFrontdoor(load.Frontdoor{Dir: dir, Name: strconv.Itoa(i), Bin: filepath.Join(e.dir, "frontdoor"),
			Config: gatewayConfig(o, backend, e.simPort, redisPort), Env: env, Ready: "/readyz"})
		if p != nil {
			p.Name = fmt.Sprintf("frontdoor %d", i)
			*started = append(*started, p)
		}
		if err != nil {
			return nil, rdb, err
		}
		urls = append(urls, base)
	}
	return urls, rdb, nil
}

// gatewayConfig is one replica's config file, but for its listen line.
func gatewayConfig(o opts, backend string, simPort, redisPort int) string {
	var b strings.Builder
	b.WriteString("logging: {level: warn, access_log: false}\n")
	b.WriteString("admin: {allow_cidrs: [127.0.0.1/32]}\n") // /status, read from loopback
	b.WriteString("auth: {required: true}\n")
	b.WriteString("admission: {backend: local}\n")
	b.WriteString("spillover: {enabled: false}\n")
	b.WriteString("tenants:\n")
	for _, t := range tenants {
		fmt.Fprintf(&b, "  - {name: %s, api_keys_env: %s}\n", t.name, t.env)
	}
	b.WriteString("nodes:\n")
	fmt.Fprintf(&b, "  - {name: sim, url: http://%s, models: [qwen3-8b], max_concurrency: 1024}\n", load.Addr(simPort))
	if backend != "memory" {
		fmt.Fprintf(&b, "redis:\n  url: redis://%s/0\n  key_prefix: %q\n", load.Addr(redisPort), keyPrefix)
		if o.redisTimeout != "" {
			fmt.Fprintf(&b, "  timeout: %s\n", o.redisTimeout)
		}
	}
	b.WriteString("cache:\n")
	switch backend {
	case "memory":
		b.WriteString("  backend: memory\n  max_bytes: 4GiB\n") // no eviction at these sizes
	case "redis-local":
		b.WriteString("  backend: redis\n  vector_search: local\n")
	case "redisearch":
		b.WriteString("  backend: redis\n  vector_search: redisearch\n")
	}
	if backend == "redisearch" && (o.index != "" || o.hnswM > 0 || o.efConstruction > 0 || o.efRun > 0) {
		b.WriteString("  redis_index:\n")
		if o.index != "" {
			fmt.Fprintf(&b, "    type: %s\n", o.index)
		}
		for _, kv := range []struct {
			k string
			v int
		}{{"m", o.hnswM}, {"ef_construction", o.efConstruction}, {"ef_runtime", o.efRun}} {
			if kv.v > 0 {
				fmt.Fprintf(&b, "    %s: %d\n", kv.k, kv.v)
			}
		}
	}
	for _, line := range strings.Split(o.cacheYAML, "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  " + line + "\n")
		}
	}
	return b.String()
}
