// Command misspath measures frontdoor's cache miss path with a large
// semantic scope against frontdoor with the cache off, side by side in one
// run (issue 18, "Done when" 2).
//
// One gpusim answers both (zero TTFT and ITL, 16 tokens). frontdoor runs
// twice: with `cache: {backend: off}` and with the default config (memory
// store, semantic cache on). Before the measured window the default one is
// preloaded with -preload unique prompts through its chat endpoint, all in
// the scope the load then hits (same tenant, model, system prompt and
// parameters), so each measured request is a miss that embeds, searches a
// scope of at least -preload entries and writes back. wrk (one thread,
// -conc connections) drives both targets in alternating rounds with a Lua
// script that makes every prompt unique; the table gives medians of
// requests/s and of each process's CPU time per request (from /proc).
//
//	go run ./bench/misspath [-preload 100000] [-rounds 5] [-duration 5s] [-conc 32] [-stream] [-dims 512,256] [-exact] [-profile cpu.pprof]
//
// -baseline adds a default-config frontdoor run from another binary (say,
// built from an earlier commit), preloaded alike, for a before/after
// comparison in one run. -exact adds frontdoor with the exact cache only, which shows what the
// semantic cache's part of a miss costs. -dims runs one default-config frontdoor per vector length listed (each
// preloaded alike), to compare embedding sizes side by side. -profile
// writes a CPU profile of each default-config frontdoor, taken from
// /debug/pprof/profile during one extra wrk run after the rounds.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/bench/internal/load"
)

type opts struct {
	preload, rounds, conc int
	dur                   time.Duration
	stream                bool
	profile               string
	dims                  []int
	dimsFlag              string
	exact                 bool
	baseline              string
}

func main() {
	var o opts
	flag.IntVar(&o.preload, "preload", 100000, "unique prompts stored in the scope before the measured rounds")
	flag.IntVar(&o.rounds, "rounds", 5, "alternating rounds")
	flag.DurationVar(&o.dur, "duration", 5*time.Second, "length of each wrk run")
	flag.IntVar(&o.conc, "conc", 32, "wrk connections (one thread)")
	flag.BoolVar(&o.stream, "stream", false, "also measure streaming requests")
	flag.StringVar(&o.dimsFlag, "dims", "0", "cache.embedder.dims of the default-config frontdoor (0: the default); a comma-separated list runs one frontdoor each")
	flag.BoolVar(&o.exact, "exact", false, "also measure frontdoor with the exact cache only (semantic off)")
	flag.StringVar(&o.baseline, "baseline", "", "also run a default-config frontdoor from this binary (e.g. built from an earlier commit)")
	flag.StringVar(&o.profile, "profile", "", "write a CPU profile of the default-config frontdoor under load to this file")
	flag.Parse()
	for _, f := range strings.Split(o.dimsFlag, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || d < 0 {
			fmt.Fprintf(os.Stderr, "misspath: -dims: %q is no vector length\n", f)
			os.Exit(2)
		}
		o.dims = append(o.dims, d)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "misspath:", err)
		os.Exit(1)
	}
}

// The request every wrk run sends, but for its prompt: the prompt differs
// in one number, unique over the whole run (run k counts from k*runStride),
// so it is never an exact hit, and the semantic cache's number guard
// rejects its near twins, so it is never a semantic hit either (checked:
// the run fails on any hit).
const (
	system = "You are a helpful assistant."
	model  = "qwen3-8b"
)

func body(prompt string, stream bool) []byte {
	b, _ := json.Marshal(map[string]any{
		"model":       model,
		"messages":    []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": prompt}},
		"temperature": 0.7, "max_tokens": 16, "stream": stream,
	})
	return b
}

const runStride = 10_000_000

func prompt(n uint64) string {
	return fmt.Sprintf("Order %d: what is the capital of France? Answer in one word.", n)
}

// wrkScript sends body(prompt(n), stream) with n counting up from the
// first script argument times runStride: the body is cut around the number
// here, so the load and the preload share one scope by construction.
func wrkScript(stream bool) string {
	const mark = 987654321
	b := string(body(prompt(mark), stream))
	k := strings.Index(b, strconv.Itoa(mark))
	return `wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local n = 0
function init(args)
  n = tonumber(args[1]) * ` + strconv.Itoa(runStride) + `
end
function request()
  n = n + 1
  return wrk.format(nil, nil, nil, ` + strconv.Quote(b[:k]) + ` .. string.format("%d", n) .. ` + strconv.Quote(b[k+len(strconv.Itoa(mark)):]) + `)
end
`
}

type target struct {
	name string
	url  string // base, http://host:port
	pid  int
	log  string // the process's log file
}

func run(o opts) error {
	if _, err := exec.LookPath("wrk"); err != nil {
		return fmt.Errorf("wrk is not installed (apt-get install wrk): %w", err)
	}
	dir, err := load.BuildTemp("fd-misspath", "frontdoor", "gpusim")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var procs load.Procs
	defer procs.Stop()
	start := procs.Start
	simAddr := load.Addr(load.FreePort())
	sim := exec.Command(filepath.Join(dir, "gpusim"), "--listen", simAddr, "--ttft", "0", "--itl", "0",
		"--output-tokens", "16", "--max-num-seqs", "4096", "--model", model)
	if err := start(sim, "http://"+simAddr+"/health"); err != nil {
		return err
	}
	frontdoorBin := func(name, cache, bin string) (target, error) {
		base, p, err := procs.StartFrontdoor(load.Frontdoor{Dir: dir, Name: name, Bin: bin,
			Config: fmt.Sprintf("logging: {level: info}\nadmin: {allow_cidrs: [127.0.0.1/32]}\n%snodes:\n  - {name: sim, url: http://%s, models: [%s], max_concurrency: 4096}\n",
				cache, simAddr, model)})
		if err != nil {
			return target{}, err
		}
		return target{name: name, url: base, pid: p.Pid(), log: p.Log}, nil
	}
	frontdoor := func(name, cache string) (target, error) { return frontdoorBin(name, cache, "") }
	off, err := frontdoor("cache-off", "cache: {backend: off}\n")
	if err != nil {
		return err
	}
	var defs []target
	for _, d := range o.dims {
		name, cache := "default", ""
		if d > 0 {
			name, cache = fmt.Sprintf("default, dims %d", d), fmt.Sprintf("cache: {embedder: {dims: %d}}\n", d)
		}
		t, err := frontdoor(fmt.Sprintf("default-%d", d), cache)
		if err != nil {
			return err
		}
		t.name = name
		defs = append(defs, t)
	}
	if o.baseline != "" {
		t, err := frontdoorBin("baseline", "", o.baseline)
		if err != nil {
			return err
		}
		t.name = "default (baseline binary)"
		defs = append(defs, t)
	}

	var exact []target
	if o.exact {
		// Exact cache only: a miss is a hash lookup and a stored entry, so
		// a preload would change nothing.
		t, err := frontdoor("exact-only", "cache: {semantic: {enabled: false}}\n")
		if err != nil {
			return err
		}
		t.name = "exact cache only"
		exact = append(exact, t)
	}

	fmt.Printf("command: go run ./bench/misspath -preload %d -rounds %d -duration %s -conc %d -stream=%v -dims %s -exact=%v -baseline %q\n",
		o.preload, o.rounds, o.dur, o.conc, o.stream, o.dimsFlag, o.exact, o.baseline)
	for _, def := range defs {
		t0 := time.Now()
		cpu0, _ := load.CPUTime(def.pid)
		if err := preload(def.url+"/v1/chat/completions", o.preload); err != nil {
			return fmt.Errorf("%s: %w; its warnings:\n%s", def.name, err, warnings(def.log))
		}
		cpu1, _ := load.CPUTime(def.pid)
		vecs, err := vectorEntries(def.url)
		if err != nil {
			return err
		}
		fmt.Printf("preload of %s: %d unique prompts in %.1f s (%.0f µs of frontdoor CPU each); vector entries after: %d; RSS %d MB\n",
			def.name, o.preload, time.Since(t0).Seconds(), load.Micros(cpu1-cpu0)/float64(o.preload), vecs, rssMB(def.pid))
	}
	targets := append(append([]target{off}, exact...), defs...)

	modes := []bool{false}
	if o.stream {
		modes = append(modes, true)
	}
	fmt.Printf("\nwrk -t1 -c%d -d%s, every prompt unique; medians of %d alternating rounds\n\n", o.conc, o.dur, o.rounds)
	fmt.Println("| requests | target | req/s | ratio to cache off | frontdoor CPU/req | gpusim CPU/req | write-backs dropped | vector entries at the end |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	runID := 0 // 0 is the preload's
	for _, stream := range modes {
		script := filepath.Join(dir, fmt.Sprintf("unique-%v.lua", stream))
		if err := os.WriteFile(script, []byte(wrkScript(stream)), 0o600); err != nil {
			return err
		}
		type sample struct{ rps, cpu, simCPU, dropped float64 }
		samples := map[string][]sample{}
		for r := 0; r < o.rounds; r++ {
			for _, t := range targets {
				runID++
				d0, _ := drops(t.url)
				h0, _ := hits(t.url)
				sc0, _ := load.CPUTime(sim.Process.Pid)
				c0, _ := load.CPUTime(t.pid)
				res, err := load.Wrk(script, t.url+"/v1/chat/completions", o.conc, o.dur, strconv.Itoa(runID))
				if err != nil {
					return fmt.Errorf("wrk %s: %w", t.name, err)
				}
				c1, _ := load.CPUTime(t.pid)
				sc1, _ := load.CPUTime(sim.Process.Pid)
				// Write-backs still queued when the run ends may be dropped
				// after it: wait for the queue to drain before counting.
				time.Sleep(time.Second)
				d1, _ := drops(t.url)
				if h1, _ := hits(t.url); h1 != h0 {
					return fmt.Errorf("%s: %.0f cache hits in a run of unique prompts", t.name, h1-h0)
				}
				s := sample{res.Rate, load.Micros(c1-c0) / float64(res.Requests), load.Micros(sc1-sc0) / float64(res.Requests),
					float64(d1-d0) / float64(res.Requests)}
				samples[t.name] = append(samples[t.name], s)
				fmt.Fprintf(os.Stderr, "round %d, %s: %.0f req/s, frontdoor %.1f µs/req\n", r+1, t.name, s.rps, s.cpu)
			}
		}
		med := func(name string, f func(sample) float64) float64 { return load.Median(samples[name], f) }
		kind := "non-streaming"
		if stream {
			kind = "streaming (16 chunks)"
		}
		base := med(off.name, func(s sample) float64 { return s.rps })
		for _, t := range targets {
			rps := med(t.name, func(s sample) float64 { return s.rps })
			n, dropped := "–", "–"
			if t.name != off.name {
				dropped = fmt.Sprintf("%.0f%%", 100*med(t.name, func(s sample) float64 { return s.dropped }))
				v, err := vectorEntries(t.url)
				if err != nil {
					return err
				}
				n = strconv.FormatInt(v, 10)
			}
			fmt.Printf("| %s | %s | %.0f | **%.2f** | %.1f µs | %.1f µs | %s | %s |\n", kind, t.name, rps, rps/base,
				med(t.name, func(s sample) float64 { return s.cpu }), med(t.name, func(s sample) float64 { return s.simCPU }), dropped, n)
		}
	}
	fmt.Printf("\nRSS at the end: cache off %d MB", rssMB(off.pid))
	for _, def := range defs {
		fmt.Printf(", %s %d MB", def.name, rssMB(def.pid))
	}
	fmt.Println()

	if o.profile != "" {
		for i, def := range defs {
			path := o.profile
			switch {
			case i >= len(o.dims):
				path = o.profile + ".baseline"
			case len(defs) > 1:
				path = fmt.Sprintf("%s.%d", o.profile, o.dims[i])
			}
			if err := profile(o, dir, def, path); err != nil {
				return err
			}
			fmt.Printf("CPU profile of %s under the same load: %s\n", def.name, path)
		}
	}
	return nil
}

// warnings is the last WARN and ERROR lines of the log file at path.
func warnings(path string) string {
	b, _ := os.ReadFile(path)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "WARN") || strings.Contains(l, "ERROR") {
			out = append(out, l)
		}
	}
	return strings.Join(out[max(0, len(out)-10):], "\n")
}

// preload stores n unique prompts through url. The write-back queue drops
// what it cannot store in time (a miss path at full speed writes faster
// than the index inserts), so prompts go in chunks, each waiting for the
// store to settle, until it holds n vectors.
func preload(url string, n int) error {
	base := url[:len(url)-len("/v1/chat/completions")]
	client := &fasthttp.Client{MaxConnsPerHost: 64, ReadTimeout: 30 * time.Second}
	var next atomic.Uint64
	have := int64(0)
	for stalls := 0; have < int64(n); {
		chunk := min(int64(n)-have, 4000)
		if err := send(client, url, &next, next.Load()+uint64(chunk), 8); err != nil {
			return err
		}
		// Wait until the count stops moving.
		for prev := int64(-1); ; {
			v, err := vectorEntries(base)
			if err != nil {
				return err
			}
			if v == prev {
				break
			}
			prev = v
		}
		v, _ := vectorEntries(base)
		if v == have {
			if stalls++; stalls > 3 {
				return fmt.Errorf("preload: the store stays at %d vectors", v)
			}
		}
		have = v
	}
	return nil
}

// send posts the prompts numbered up to last with c workers; every answer
// must be a miss.
func send(client *fasthttp.Client, url string, next *atomic.Uint64, last uint64, c int) error {
	errc := make(chan error, c)
	load.Workers(c, func(req *fasthttp.Request, resp *fasthttp.Response) {
		for {
			i := next.Add(1)
			if i > last {
				next.Store(last)
				return
			}
			req.Reset()
			req.SetRequestURI(url)
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.SetContentType("application/json")
			req.SetBodyRaw(body(prompt(i), false))
			if err := client.Do(req, resp); err != nil {
				errc <- err
				return
			}
			if resp.StatusCode() != 200 || string(resp.Header.Peek("X-Cache")) != "miss" {
				errc <- fmt.Errorf("preload: status %d, X-Cache %q: %.200s", resp.StatusCode(), resp.Header.Peek("X-Cache"), resp.Body())
				return
			}
		}
	})
	close(errc)
	return <-errc
}

// vectorEntries reads frontdoor_cache_vector_entries, after waiting for
// its refresh (every 2 s).
func vectorEntries(base string) (int64, error) {
	time.Sleep(2100 * time.Millisecond)
	m, err := load.ScrapeMetrics(base)
	if err != nil {
		return 0, err
	}
	v, ok := m.Sum("frontdoor_cache_vector_entries", nil)
	if !ok {
		return 0, fmt.Errorf("no frontdoor_cache_vector_entries in /metrics")
	}
	return int64(v), nil
}

// drops is frontdoor_cache_writes_dropped_total summed over its reasons.
func drops(base string) (int64, error) {
	m, err := load.ScrapeMetrics(base)
	if err != nil {
		return 0, err
	}
	n, _ := m.Sum("frontdoor_cache_writes_dropped_total", nil)
	return int64(n), nil
}

// hits sums the cache's hit counters, frontdoor_cache_requests_total with
// result hit_exact or hit_semantic; a target without them counts 0.
func hits(base string) (float64, error) {
	m, err := load.ScrapeMetrics(base)
	if err != nil {
		return 0, err
	}
	by, _ := m.By("frontdoor_cache_requests_total", "result", nil)
	var n float64
	for result, v := range by {
		if strings.HasPrefix(result, "hit_") {
			n += v
		}
	}
	return n, nil
}

// rssMB is the process's VmRSS in MB, or -1.
func rssMB(pid int) int64 {
	kb, err := load.ProcStatus(pid, "VmRSS")
	if err != nil {
		return -1
	}
	return kb >> 10
}

// profile takes a CPU profile of t while wrk drives it with unique prompts.
func profile(o opts, dir string, t target, path string) error {
	script := filepath.Join(dir, "unique-false.lua")
	secs := max(int(o.dur.Seconds())-1, 1)
	done := make(chan error, 1)
	go func() {
		_, err := load.Wrk(script, t.url+"/v1/chat/completions", o.conc, o.dur+2*time.Second, "99")
		done <- err
	}()
	time.Sleep(time.Second)
	resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", t.url, secs))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("profile: status %d", resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return <-done
}
