// Command overhead measures what frontdoor adds to a request. The same load
// generator drives gpusim directly, through two reference proxies and
// through frontdoor (pass-through, cache off) on each of its engines, and
// on the loop engine without io_uring, alternating in rounds so all see the
// same machine noise. The references are bench/epollrelay, a one-thread
// epoll byte relay that parses nothing (the floor of a proxy that makes a
// system call per socket operation), and bench/bareproxy, the smallest
// fasthttp reverse proxy (the floor of a goroutine-per-connection one).
// gpusim answers with zero TTFT and ITL, so the differences are the
// proxies. Besides latency and throughput it reports each process's CPU
// time per request, read from /proc, which moves far less with noise from
// other tenants than throughput does.
//
//	go run ./bench/overhead [-rounds 3] [-duration 3s] [-conc 32] [-stream] [-wrk]
//
// -wrk adds runs driven by wrk (Debian package wrk), one thread: throughput
// with -conc connections, the setup the peer numbers used, and
// latency with one connection.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"frontdoor/bench/internal/load"
)

func main() {
	rounds := flag.Int("rounds", 3, "alternating rounds per mode")
	dur := flag.Duration("duration", 3*time.Second, "length of each measured run")
	conc := flag.Int("conc", 32, "connections for the throughput runs")
	stream := flag.Bool("stream", false, "also measure streaming requests")
	withWrk := flag.Bool("wrk", false, "also measure throughput with wrk (must be on PATH)")
	accessLog := flag.Bool("access-log", false, "keep frontdoor's access log on (written to a file)")
	flag.Parse()
	if err := run(*rounds, *dur, *conc, *stream, *withWrk, *accessLog); err != nil {
		fmt.Fprintln(os.Stderr, "overhead:", err)
		os.Exit(1)
	}
}

type target struct {
	name string
	url  string
	pid  int
}

type sample struct {
	res     load.Result
	cpuNode float64 // gpusim CPU µs per request
	cpuProx float64 // the proxy's CPU µs per request (0 for direct)
}

func run(rounds int, dur time.Duration, conc int, stream, withWrk, accessLog bool) error {
	if withWrk {
		if _, err := exec.LookPath("wrk"); err != nil {
			return fmt.Errorf("-wrk: wrk is not installed (apt-get install wrk): %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "fd-overhead")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := load.Build(dir, "frontdoor", "gpusim", "./bench/bareproxy", "./bench/epollrelay"); err != nil {
		return err
	}
	simPort, barePort, relayPort, fdPort, fhPort, plainPort := load.FreePort(), load.FreePort(), load.FreePort(), load.FreePort(), load.FreePort(), load.FreePort()
	simAddr := fmt.Sprintf("127.0.0.1:%d", simPort)
	sim := exec.Command(filepath.Join(dir, "gpusim"), "--listen", simAddr,
		"--ttft", "0", "--itl", "0", "--output-tokens", "16", "--max-num-seqs", "4096", "--model", "qwen3-8b")
	bare := exec.Command(filepath.Join(dir, "bareproxy"), "-listen", fmt.Sprintf("127.0.0.1:%d", barePort), "-upstream", simAddr)
	relay := exec.Command(filepath.Join(dir, "epollrelay"), "-listen", fmt.Sprintf("127.0.0.1:%d", relayPort), "-upstream", simAddr)
	var cmds []*exec.Cmd
	startFrontdoor := func(port int, engine, ioUring string) (*exec.Cmd, error) {
		cfg := fmt.Sprintf(`listen: 127.0.0.1:%d
server: {engine: %s, io_uring: %s}
logging: {level: warn, access_log: %v}
cache: {backend: off}
nodes:
  - {name: sim, url: http://%s, models: [qwen3-8b], max_concurrency: 4096}
`, port, engine, ioUring, accessLog, simAddr)
		cfgPath := filepath.Join(dir, engine+"-"+ioUring+".yaml")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			return nil, err
		}
		logFile, err := os.Create(filepath.Join(dir, engine+"-"+ioUring+".log"))
		if err != nil {
			return nil, err
		}
		c := exec.Command(filepath.Join(dir, "frontdoor"), "serve", "--config", cfgPath)
		c.Stderr = logFile
		return c, nil
	}
	fd, err := startFrontdoor(fdPort, "loop", "auto")
	if err != nil {
		return err
	}
	plain, err := startFrontdoor(plainPort, "loop", "off")
	if err != nil {
		return err
	}
	fh, err := startFrontdoor(fhPort, "fasthttp", "auto")
	if err != nil {
		return err
	}
	cmds = append(cmds, sim, bare, relay, fd, plain, fh)
	for _, c := range cmds {
		if err := c.Start(); err != nil {
			return err
		}
		defer func(c *exec.Cmd) { _ = c.Process.Kill(); _ = c.Wait() }(c)
	}
	direct := target{"direct", fmt.Sprintf("http://%s/v1/chat/completions", simAddr), 0}
	bareT := target{"bare proxy", fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", barePort), bare.Process.Pid}
	relayT := target{"epoll relay", fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", relayPort), relay.Process.Pid}
	gateway := target{"frontdoor", fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", fdPort), fd.Process.Pid}
	gatewayPlain := target{"frontdoor, io_uring off", fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", plainPort), plain.Process.Pid}
	gatewayFH := target{"frontdoor, fasthttp engine", fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", fhPort), fh.Process.Pid}
	for _, health := range []string{"http://" + simAddr + "/health", fmt.Sprintf("http://127.0.0.1:%d/healthz", barePort),
		fmt.Sprintf("http://127.0.0.1:%d/health", relayPort), // relayed to gpusim
		fmt.Sprintf("http://127.0.0.1:%d/healthz", fdPort), fmt.Sprintf("http://127.0.0.1:%d/healthz", plainPort),
		fmt.Sprintf("http://127.0.0.1:%d/healthz", fhPort)} {
		if err := load.WaitUp(health); err != nil {
			return err
		}
	}
	body := []byte(`{"model":"qwen3-8b","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France? Answer in one word."}],"temperature":0.7,"max_tokens":16}`)
	checkJSON := func(status int, b []byte) error {
		if status != 200 || !bytes.Contains(b, []byte(`"chat.completion"`)) {
			return fmt.Errorf("status %d: %.200s", status, b)
		}
		return nil
	}
	checkSSE := func(status int, b []byte) error {
		if status != 200 || !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
			return fmt.Errorf("status %d: %.200s", status, b)
		}
		return nil
	}
	fmt.Printf("command: go run ./bench/overhead -rounds %d -duration %s -conc %d -stream=%v -wrk=%v -access-log=%v\n", rounds, dur, conc, stream, withWrk, accessLog)
	fmt.Printf("setup: %d alternating rounds of direct / epoll relay / bare fasthttp proxy / frontdoor (server.engine: loop, io_uring: auto, the defaults) / frontdoor (loop, io_uring: off) / frontdoor (server.engine: fasthttp); gpusim --ttft 0 --itl 0 --output-tokens 16; separate processes on loopback; medians over rounds\n\n", rounds)

	type scenario struct {
		name    string
		body    []byte
		c       int
		check   func(int, []byte) error
		targets []target
	}
	scenarios := []scenario{
		{"non-streaming, concurrency 1", body, 1, checkJSON, []target{direct, relayT, bareT, gateway, gatewayPlain, gatewayFH}},
		{fmt.Sprintf("non-streaming, concurrency %d", conc), body, conc, checkJSON, []target{direct, relayT, bareT, gateway, gatewayPlain, gatewayFH}},
	}
	if stream {
		sb := bytes.Replace(body, []byte(`"max_tokens":16}`), []byte(`"max_tokens":16,"stream":true}`), 1)
		// The bare proxy buffers whole answers, so it is no floor for streams.
		scenarios = append(scenarios,
			scenario{"streaming (16 chunks), concurrency 1", sb, 1, checkSSE, []target{direct, gateway}},
			scenario{fmt.Sprintf("streaming (16 chunks), concurrency %d", conc), sb, conc, checkSSE, []target{direct, gateway}})
	}
	fmt.Println("Go load generator (bench/internal/load):")
	fmt.Println()
	fmt.Println("| scenario | target | p50 | p99 | added p50 | req/s | ratio to direct | gpusim CPU/req | proxy CPU/req | errors |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, sc := range scenarios {
		samples := map[string][]sample{}
		for r := 0; r < rounds; r++ {
			for _, t := range sc.targets {
				watch := []int{sim.Process.Pid}
				if t.pid != 0 {
					watch = append(watch, t.pid)
				}
				res, err := load.Run(load.Target{URL: t.url, Body: sc.body, Check: sc.check, Watch: watch}, sc.c, dur, 300*time.Millisecond)
				if err != nil {
					return fmt.Errorf("%s %s: %w", sc.name, t.name, err)
				}
				s := sample{res: res, cpuNode: perReq(res.CPU[0], res.Requests)}
				if t.pid != 0 {
					s.cpuProx = perReq(res.CPU[1], res.Requests)
				}
				samples[t.name] = append(samples[t.name], s)
			}
		}
		med := func(name string, f func(sample) float64) float64 {
			var v []float64
			for _, s := range samples[name] {
				v = append(v, f(s))
			}
			return load.MedianOf(v)
		}
		dp50 := med("direct", func(s sample) float64 { return load.Micros(s.res.Quantile(0.5)) })
		dRate := med("direct", func(s sample) float64 { return s.res.Throughput() })
		for _, t := range sc.targets {
			p50 := med(t.name, func(s sample) float64 { return load.Micros(s.res.Quantile(0.5)) })
			p99 := med(t.name, func(s sample) float64 { return load.Micros(s.res.Quantile(0.99)) })
			rate := med(t.name, func(s sample) float64 { return s.res.Throughput() })
			ratio := rate / dRate
			node := med(t.name, func(s sample) float64 { return s.cpuNode })
			prox := "–"
			if t.pid != 0 {
				prox = fmt.Sprintf("%.1f µs", med(t.name, func(s sample) float64 { return s.cpuProx }))
			}
			errs := 0
			for _, s := range samples[t.name] {
				errs += s.res.Errors
			}
			added := "–"
			if t.name != "direct" {
				added = fmt.Sprintf("**%+.0f µs**", p50-dp50)
			}
			fmt.Printf("| %s | %s | %.0f µs | %.0f µs | %s | %.0f | **%.2f** | %.1f µs | %s | %d |\n",
				sc.name, t.name, p50, p99, added, rate, ratio, node, prox, errs)
		}
	}
	if withWrk {
		fmt.Printf("\nwrk -t1 -c%d -d%s, non-streaming (throughput only):\n\n", conc, dur)
		fmt.Println("| target | req/s (median) | ratio to direct |")
		fmt.Println("|---|---|---|")
		luaPath := filepath.Join(dir, "post.lua")
		lua := "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.body = " + strconv.Quote(string(body)) + "\n"
		if err := os.WriteFile(luaPath, []byte(lua), 0o600); err != nil {
			return err
		}
		rates := map[string][]float64{}
		p50s, p99s := map[string][]float64{}, map[string][]float64{}
		for r := 0; r < rounds; r++ {
			for _, t := range []target{direct, relayT, bareT, gateway, gatewayPlain, gatewayFH} {
				res, err := wrkRun(luaPath, t.url, conc, dur)
				if err != nil {
					return fmt.Errorf("wrk %s: %w", t.name, err)
				}
				rates[t.name] = append(rates[t.name], res.rps)
				if res, err = wrkRun(luaPath, t.url, 1, dur); err != nil {
					return fmt.Errorf("wrk -c1 %s: %w", t.name, err)
				}
				p50s[t.name], p99s[t.name] = append(p50s[t.name], res.p50), append(p99s[t.name], res.p99)
			}
		}
		d := load.MedianOf(rates["direct"])
		for _, t := range []target{direct, relayT, bareT, gateway, gatewayPlain, gatewayFH} {
			fmt.Printf("| %s | %.0f | **%.2f** |\n", t.name, load.MedianOf(rates[t.name]), load.MedianOf(rates[t.name])/d)
		}
		fmt.Printf("\nwrk -t1 -c1 -d%s --latency, non-streaming:\n\n", dur)
		fmt.Println("| target | p50 | p99 | added p50 |")
		fmt.Println("|---|---|---|---|")
		dp50 := load.MedianOf(p50s["direct"])
		for _, t := range []target{direct, relayT, bareT, gateway, gatewayPlain, gatewayFH} {
			added := "–"
			if t.name != "direct" {
				added = fmt.Sprintf("**%+.0f µs**", load.MedianOf(p50s[t.name])-dp50)
			}
			fmt.Printf("| %s | %.0f µs | %.0f µs | %s |\n", t.name, load.MedianOf(p50s[t.name]), load.MedianOf(p99s[t.name]), added)
		}
	}
	fmt.Println("\n(added = target − direct; CPU/req = user+system CPU time of the process over the run ÷ requests)")
	return nil
}

func perReq(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return load.Micros(d) / float64(n)
}

var (
	wrkRate    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkErrors  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)|Socket errors: .*`)
	wrkLatency = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
)

type wrkResult struct{ rps, p50, p99 float64 } // latencies in µs

// wrkRun drives url with wrk and returns its rate and latencies; any
// non-2xx answer or socket error fails the run.
func wrkRun(luaPath, url string, conc int, dur time.Duration) (wrkResult, error) {
	out, err := exec.Command("wrk", "-t1", fmt.Sprintf("-c%d", conc), fmt.Sprintf("-d%ds", int(dur.Seconds())), "--latency", "-s", luaPath, url).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("%w: %s", err, out)
	}
	if m := wrkErrors.Find(out); m != nil {
		return wrkResult{}, fmt.Errorf("wrk saw errors: %s", m)
	}
	m := wrkRate.FindSubmatch(out)
	if m == nil {
		return wrkResult{}, fmt.Errorf("no Requests/sec in wrk output: %s", out)
	}
	var r wrkResult
	r.rps, _ = strconv.ParseFloat(string(m[1]), 64)
	for _, l := range wrkLatency.FindAllSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(string(l[2]), 64)
		switch string(l[3]) {
		case "ms":
			v *= 1e3
		case "s":
			v *= 1e6
		}
		if string(l[1]) == "50" {
			r.p50 = v
		} else {
			r.p99 = v
		}
	}
	return r, nil
}
