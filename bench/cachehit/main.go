// Command cachehit measures cache hits through frontdoor: throughput of
// exact hits against a bare fasthttp server answering the same bytes, and
// hit latency with the memory and the Redis backends. Everything runs as
// separate processes on loopback, driven by the same load generator in
// alternating rounds.
//
//	go run ./bench/cachehit [-rounds 3] [-duration 3s] [-conc 32]
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/bench/internal/load"
)

func main() {
	bare := flag.String("bare-server", "", "internal: serve the bytes of -body on this address")
	bodyFile := flag.String("body", "", "internal: response body file for -bare-server")
	rounds := flag.Int("rounds", 3, "alternating rounds")
	dur := flag.Duration("duration", 3*time.Second, "length of each measured run")
	conc := flag.Int("conc", 32, "connections for the throughput runs")
	flag.Parse()
	if *bare != "" {
		serveBare(*bare, *bodyFile)
		return
	}
	if err := run(*rounds, *dur, *conc); err != nil {
		fmt.Fprintln(os.Stderr, "cachehit:", err)
		os.Exit(1)
	}
}

// serveBare answers every request with the same JSON bytes, as fast as
// fasthttp can: the ceiling for a cache hit.
func serveBare(addr, bodyFile string) {
	body, err := os.ReadFile(bodyFile)
	if err != nil {
		panic(err)
	}
	_ = fasthttp.ListenAndServe(addr, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	})
}

func run(rounds int, dur time.Duration, conc int) error {
	dir, err := load.BuildTemp("fd-cachehit", "frontdoor", "gpusim")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var procs load.Procs
	defer procs.Stop()
	start := func(name string, args ...string) error {
		return procs.Start(exec.Command(name, args...), "")
	}
	simPort, barePort := load.FreePort(), load.FreePort()
	if err := start(filepath.Join(dir, "gpusim"), "--listen", load.Addr(simPort), "--ttft", "0", "--itl", "0", "--output-tokens", "64"); err != nil {
		return err
	}
	haveRedis, redisAddr := true, ""
	if rs, err := procs.StartRedis(context.Background(), dir); err == nil {
		redisAddr = rs.Addr
	} else {
		haveRedis, redisAddr = false, load.Addr(load.FreePort())
		fmt.Fprintln(os.Stderr, "no redis-server: skipping the Redis rows")
	}
	gwCfg := func(backend string, semantic bool) string {
		return fmt.Sprintf("logging: {level: warn, access_log: false}\ncache: {backend: %s, semantic: {enabled: %v}}\nredis: {url: redis://%s/0, timeout: 100ms}\nnodes:\n  - {name: sim, url: http://%s, models: [qwen3-8b], max_concurrency: 1024}\n",
			backend, semantic, redisAddr, load.Addr(simPort))
	}
	type target struct {
		name string
		url  string
	}
	var targets []target
	for _, gw := range []struct {
		name, backend string
		semantic      bool
	}{
		{"frontdoor, memory cache", "memory", true},
		{"frontdoor, memory cache, exact only", "memory", false},
		{"frontdoor, redis cache", "redis", true},
	} {
		if gw.backend == "redis" && !haveRedis {
			continue
		}
		base, _, err := procs.StartFrontdoor(load.Frontdoor{Dir: dir, Name: fmt.Sprintf("%s-%v", gw.backend, gw.semantic), Config: gwCfg(gw.backend, gw.semantic)})
		if err != nil {
			return err
		}
		targets = append(targets, target{gw.name, base + "/v1/chat/completions"})
	}
	body := []byte(`{"model":"qwen3-8b","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France? Answer in one word."}],"temperature":0.7,"max_tokens":64}`)
	var hitBody []byte
	for _, t := range targets {
		// Prime: the first request is a miss, then wait for the write-back.
		for i := 0; i < 100; i++ {
			resp, err := http.Post(t.url, "application/json", bytes.NewReader(body))
			if err != nil {
				return err
			}
			b := new(bytes.Buffer)
			_, _ = b.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.Header.Get("X-Cache") == "hit-exact" {
				hitBody = b.Bytes()
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if hitBody == nil {
		return fmt.Errorf("no cache hit after priming")
	}
	bodyFile := filepath.Join(dir, "hit.json")
	if err := os.WriteFile(bodyFile, hitBody, 0o600); err != nil {
		return err
	}
	self, _ := os.Executable()
	bare := target{"bare fasthttp, same bytes", fmt.Sprintf("http://%s/v1/chat/completions", load.Addr(barePort))}
	if err := procs.Start(exec.Command(self, "-bare-server", load.Addr(barePort), "-body", bodyFile), fmt.Sprintf("http://%s/healthz", load.Addr(barePort))); err != nil {
		return err
	}
	all := append([]target{bare}, targets...)
	check := func(status int, b []byte) error {
		if status != 200 || !bytes.Contains(b, []byte(`"chat.completion"`)) {
			return fmt.Errorf("status %d: %.200s", status, b)
		}
		return nil
	}
	hitCheck := func(status int, b []byte) error { return check(status, b) }

	fmt.Printf("command: go run ./bench/cachehit -rounds %d -duration %s -conc %d\n", rounds, dur, conc)
	fmt.Printf("%d alternating rounds; each server is its own process on loopback; the hit body is %d bytes\n\n", rounds, len(hitBody))
	fmt.Println("| target | concurrency | p50 | p99 | req/s | ratio to bare | errors |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, c := range []int{1, conc} {
		results := map[string][]load.Result{}
		for r := 0; r < rounds; r++ {
			for _, t := range all {
				res, err := load.Run(load.Target{URL: t.url, Body: body, Check: hitCheck}, c, dur, 300*time.Millisecond)
				if err != nil {
					return fmt.Errorf("%s: %w", t.name, err)
				}
				results[t.name] = append(results[t.name], res)
			}
		}
		bareTP := load.Median(results[bare.name], load.Result.Throughput)
		for _, t := range all {
			rs := results[t.name]
			tp := load.Median(rs, load.Result.Throughput)
			errs := 0
			for _, r := range rs {
				errs += r.Errors
			}
			fmt.Printf("| %s | %d | %.0f µs | %.0f µs | %.0f | **%.2f** | %d |\n", t.name, c,
				load.Median(rs, func(r load.Result) float64 { return load.Micros(r.Quantile(0.5)) }),
				load.Median(rs, func(r load.Result) float64 { return load.Micros(r.Quantile(0.99)) }), tp, tp/bareTP, errs)
		}
	}
	fmt.Println("\n(medians over rounds; every gateway response was checked to be a chat.completion)")
	return nil
}
