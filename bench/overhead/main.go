// Command overhead measures what frontdoor adds to a request: the same load
// generator drives gpusim directly and through frontdoor (pass-through, no
// cache), alternating in rounds so both see the same machine noise. gpusim
// answers with zero TTFT and ITL, so the difference is the gateway.
//
//	go run ./bench/overhead [-rounds 3] [-duration 3s] [-conc 32]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"frontdoor/bench/internal/load"
)

func main() {
	rounds := flag.Int("rounds", 3, "alternating rounds per mode")
	dur := flag.Duration("duration", 3*time.Second, "length of each measured run")
	conc := flag.Int("conc", 32, "connections for the throughput runs")
	stream := flag.Bool("stream", false, "also measure streaming requests")
	accessLog := flag.Bool("access-log", false, "keep frontdoor's access log on (written to a file)")
	flag.Parse()
	if err := run(*rounds, *dur, *conc, *stream, *accessLog); err != nil {
		fmt.Fprintln(os.Stderr, "overhead:", err)
		os.Exit(1)
	}
}

func run(rounds int, dur time.Duration, conc int, stream, accessLog bool) error {
	dir, err := os.MkdirTemp("", "fd-overhead")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := load.Build(dir, "frontdoor", "gpusim"); err != nil {
		return err
	}
	simPort, fdPort := load.FreePort(), load.FreePort()
	sim := exec.Command(filepath.Join(dir, "gpusim"), "--listen", fmt.Sprintf("127.0.0.1:%d", simPort),
		"--ttft", "0", "--itl", "0", "--output-tokens", "16", "--max-num-seqs", "4096", "--model", "qwen3-8b")
	cfg := fmt.Sprintf(`listen: 127.0.0.1:%d
logging: {level: warn, access_log: %v}
cache: {backend: off}
nodes:
  - {name: sim, url: http://127.0.0.1:%d, models: [qwen3-8b], max_concurrency: 4096}
`, fdPort, accessLog, simPort)
	cfgPath := filepath.Join(dir, "fd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}
	logFile, _ := os.Create(filepath.Join(dir, "fd.log"))
	defer logFile.Close()
	fd := exec.Command(filepath.Join(dir, "frontdoor"), "serve", "--config", cfgPath)
	fd.Stderr = logFile
	for _, c := range []*exec.Cmd{sim, fd} {
		if err := c.Start(); err != nil {
			return err
		}
		defer func(c *exec.Cmd) { _ = c.Process.Kill(); _ = c.Wait() }(c)
	}
	direct := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", simPort)
	gateway := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", fdPort)
	for _, u := range []string{direct, gateway} {
		if err := load.WaitUp(strings.Split(u, "/v1/")[0]); err != nil {
			return err
		}
	}
	body := []byte(`{"model":"qwen3-8b","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France? Answer in one word."}],"temperature":0.7,"max_tokens":16}`)
	check := func(status int, b []byte) error {
		if status != 200 || !bytes.Contains(b, []byte(`"chat.completion"`)) {
			return fmt.Errorf("status %d: %.200s", status, b)
		}
		return nil
	}
	fmt.Printf("command: go run ./bench/overhead -rounds %d -duration %s -conc %d -stream=%v -access-log=%v\n", rounds, dur, conc, stream, accessLog)
	fmt.Printf("machine: %d rounds alternating direct/gateway; gpusim --ttft 0 --itl 0 --output-tokens 16; separate processes on loopback\n\n", rounds)

	type scenario struct {
		name string
		body []byte
		c    int
	}
	scenarios := []scenario{{"non-streaming, concurrency 1", body, 1}, {fmt.Sprintf("non-streaming, concurrency %d", conc), body, conc}}
	if stream {
		sb := bytes.Replace(body, []byte(`"max_tokens":16}`), []byte(`"max_tokens":16,"stream":true}`), 1)
		scenarios = append(scenarios, scenario{"streaming (16 chunks), concurrency 1", sb, 1}, scenario{fmt.Sprintf("streaming (16 chunks), concurrency %d", conc), sb, conc})
	}
	fmt.Println("| scenario | direct p50 | gateway p50 | added p50 | direct p99 | gateway p99 | added p99 | direct req/s | gateway req/s | throughput ratio | errors |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, sc := range scenarios {
		var d, g []load.Result
		for r := 0; r < rounds; r++ {
			for _, mode := range []string{"direct", "gateway"} {
				u := direct
				if mode == "gateway" {
					u = gateway
				}
				ck := check
				if bytes.Contains(sc.body, []byte(`"stream":true`)) {
					ck = func(status int, b []byte) error {
						if status != 200 || !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
							return fmt.Errorf("status %d: %.200s", status, b)
						}
						return nil
					}
				}
				res, err := load.Run(load.Target{URL: u, Body: sc.body, Check: ck}, sc.c, dur, 300*time.Millisecond)
				if err != nil {
					return fmt.Errorf("%s %s: %w", sc.name, mode, err)
				}
				if mode == "direct" {
					d = append(d, res)
				} else {
					g = append(g, res)
				}
			}
		}
		dp50, gp50 := load.Median(d, func(r load.Result) float64 { return load.Micros(r.Quantile(0.5)) }), load.Median(g, func(r load.Result) float64 { return load.Micros(r.Quantile(0.5)) })
		dp99, gp99 := load.Median(d, func(r load.Result) float64 { return load.Micros(r.Quantile(0.99)) }), load.Median(g, func(r load.Result) float64 { return load.Micros(r.Quantile(0.99)) })
		dt, gt := load.Median(d, load.Result.Throughput), load.Median(g, load.Result.Throughput)
		errs := 0
		for _, r := range append(d, g...) {
			errs += r.Errors
		}
		fmt.Printf("| %s | %.0f µs | %.0f µs | **%+.0f µs** | %.0f µs | %.0f µs | %+.0f µs | %.0f | %.0f | **%.2f** | %d |\n",
			sc.name, dp50, gp50, gp50-dp50, dp99, gp99, gp99-dp99, dt, gt, gt/dt, errs)
	}
	fmt.Println("\n(medians over rounds; added = gateway − direct)")
	return nil
}
