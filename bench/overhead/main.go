// Command overhead measures what frontdoor adds to a request, in the
// configurations people run. The same load generator drives, in
// alternating rounds so all see the same machine noise:
//
//   - gpusim directly;
//   - bench/bareproxy, the smallest fasthttp reverse proxy (the floor of
//     any proxy built on fasthttp);
//   - frontdoor in pass-through (cache off);
//   - frontdoor with the default config (memory cache, semantic cache on):
//     the miss path (a unique prompt per request) and the hit path (one
//     repeated prompt).
//
// gpusim answers with zero TTFT and ITL, so the differences are the
// proxies. Besides latency and throughput it reports each process's CPU
// time per request, read from /proc, which moves far less with noise from
// other tenants than throughput does.
//
//	go run ./bench/overhead [-rounds 3] [-duration 3s] [-conc 32] [-stream] [-wrk] [-verify] [-responses] [-embeddings=false] [-baseline REV]
//
// -responses adds exact hits of the Responses API (POST /v1/responses,
// the same question as instructions and input) on the default config:
// what a replayed response object or response.* stream costs beside a
// chat hit.
//
// -verify adds semantic hits (a reworded question) on the default config
// and on the default config with a judge auditing every hit
// (cache.semantic.verify, audit_rate 1; the judge is gpusim): what the
// audit costs a client.
//
// -baseline adds frontdoor built from the git revision REV, in
// pass-through and on the default config's miss path, to the same
// alternating rounds: a change's cost measured side by side with what it
// changed.
//
// -embeddings (on by default) adds /v1/embeddings batches of 8 inputs:
// gpusim directly, the bare proxy, pass-through, and the default config
// missing every input, hitting every input, and with 5 of the 8 cached
// (X-Cache partial: 3 inputs go to gpusim).
//
// -wrk adds throughput runs of the pass-through targets driven by wrk
// (Debian package wrk), one thread, -conc connections.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"frontdoor/bench/internal/load"
)

func main() {
	o := opts{}
	flag.IntVar(&o.rounds, "rounds", 3, "alternating rounds per scenario")
	flag.DurationVar(&o.dur, "duration", 3*time.Second, "length of each measured run")
	flag.IntVar(&o.conc, "conc", 32, "connections for the throughput runs")
	flag.BoolVar(&o.stream, "stream", false, "also measure streaming requests")
	flag.BoolVar(&o.wrk, "wrk", false, "also measure pass-through throughput with wrk (must be on PATH)")
	flag.BoolVar(&o.accessLog, "access-log", true, "keep frontdoor's access log on (the default config; written to a file)")
	flag.BoolVar(&o.verify, "verify", false, "also measure semantic hits with and without a judge auditing each (cache.semantic.verify)")
	flag.BoolVar(&o.responses, "responses", false, "also measure exact hits of the Responses API (/v1/responses)")
	flag.StringVar(&o.baseline, "baseline", "", "also run frontdoor built from this git revision (e.g. main~3), side by side")
	flag.BoolVar(&o.embeddings, "embeddings", true, "also measure /v1/embeddings batches: missed, hit, and partly cached")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "overhead:", err)
		os.Exit(1)
	}
}

type opts struct {
	rounds                 int
	dur                    time.Duration
	conc                   int
	stream, wrk, accessLog bool
	verify, responses      bool
	embeddings             bool
	baseline               string
}

// target is one process and how to drive it.
type target struct {
	name   string
	url    string
	pid    int
	xcache string // the X-Cache every answer must carry, when set
	prompt string // the user turn sent, when not the shared prompt
	unique bool   // a new prompt per request
	bare   bool   // the bare proxy: no floor for streams (it buffers)
	api    string // "responses": the Responses API; "": chat
}

// promptOr is the target's prompt, or p.
func (t target) promptOr(p string) string {
	if t.prompt != "" {
		return t.prompt
	}
	return p
}

type sample struct {
	res     load.Result
	cpuNode float64 // gpusim CPU µs per request
	cpuProx float64 // the proxy's CPU µs per request (0 for direct)
}

func run(o opts) error {
	if o.wrk {
		if _, err := exec.LookPath("wrk"); err != nil {
			return fmt.Errorf("-wrk: wrk is not installed (apt-get install wrk): %w", err)
		}
	}
	dir, err := load.BuildTemp("fd-overhead", "frontdoor", "gpusim", "./bench/bareproxy")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	simAddr := load.Addr(load.FreePort())
	var procs load.Procs
	defer procs.Stop()
	start := procs.Start
	sim := exec.Command(filepath.Join(dir, "gpusim"), "--listen", simAddr, "--ttft", "0", "--itl", "0",
		"--output-tokens", "16", "--max-num-seqs", "4096", "--model", "qwen3-8b", "--model", "judge")
	if err := start(sim, "http://"+simAddr+"/health"); err != nil {
		return err
	}
	barePort := load.FreePort()
	bare := exec.Command(filepath.Join(dir, "bareproxy"), "-listen", load.Addr(barePort), "-upstream", simAddr)
	if err := start(bare, fmt.Sprintf("http://%s/healthz", load.Addr(barePort))); err != nil {
		return err
	}
	// frontdoor runs with the defaults but for listen, logging level and
	// the cache backend; its log goes to a file.
	frontdoor := func(name, cache, bin string) (target, error) {
		base, p, err := procs.StartFrontdoor(load.Frontdoor{Dir: dir, Name: name, Bin: bin,
			Config: fmt.Sprintf("logging: {level: info, access_log: %v}\n%snodes:\n  - {name: sim, url: http://%s, models: [qwen3-8b, judge], max_concurrency: 4096}\n",
				o.accessLog, cache, simAddr)})
		if err != nil {
			return target{}, err
		}
		return target{name: name, url: base + "/v1/chat/completions", pid: p.Pid()}, nil
	}
	pass, err := frontdoor("pass-through", "cache: {backend: off}\n", "")
	if err != nil {
		return err
	}
	def, err := frontdoor("default config", "", "")
	if err != nil {
		return err
	}
	direct := target{name: "direct", url: fmt.Sprintf("http://%s/v1/chat/completions", simAddr)}
	bareT := target{name: "bare proxy", url: fmt.Sprintf("http://%s/v1/chat/completions", load.Addr(barePort)), pid: bare.Process.Pid, bare: true}
	miss, hit := def, def
	miss.name, miss.xcache, miss.unique = "default config, miss", "miss", true
	hit.name, hit.xcache = "default config, hit", "hit-exact"
	targets := []target{direct, bareT, pass, miss, hit}
	// A reworded question: the local embedder puts it at about 1.0 from
	// the prompt (case, punctuation), the guards pass it.
	const reworded = "what is the capital of france answer in one word"
	if o.verify {
		// Processes of their own: the miss target fills the default
		// config's index with its unique prompts.
		sem, err := frontdoor("semantic", "", "")
		if err != nil {
			return err
		}
		sem.name, sem.xcache, sem.prompt = "default config, semantic hit", "hit-semantic", reworded
		ver, err := frontdoor("judge", "cache: {semantic: {verify: {judge_model: judge, audit_rate: 1, max_judge_rps: 50}}}\n", "")
		if err != nil {
			return err
		}
		ver.name, ver.xcache, ver.prompt = "semantic hit, every one audited", "hit-semantic", reworded
		targets = append(targets, sem, ver)
	}
	if o.responses {
		rh := def
		rh.name, rh.xcache, rh.api = "default config, Responses hit", "hit-exact", "responses"
		rh.url = strings.Replace(def.url, "/v1/chat/completions", "/v1/responses", 1)
		targets = append(targets, rh)
	}
	if o.baseline != "" {
		bin, err := buildRevision(dir, o.baseline)
		if err != nil {
			return err
		}
		bpass, err := frontdoor("pass-through@"+o.baseline, "cache: {backend: off}\n", bin)
		if err != nil {
			return err
		}
		bdef, err := frontdoor("default config@"+o.baseline, "", bin)
		if err != nil {
			return err
		}
		bdef.name, bdef.xcache, bdef.unique = "default config, miss@"+o.baseline, "miss", true
		targets = append(targets, bpass, bdef)
	}

	const prompt = "What is the capital of France? Answer in one word."
	body := func(p string, stream bool) []byte {
		s := ""
		if stream {
			s = `,"stream":true`
		}
		return []byte(`{"model":"qwen3-8b","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"` +
			p + `"}],"temperature":0.7,"max_tokens":16` + s + `}`)
	}
	// bodyFor is t's request: chat, or the same question to the Responses
	// API.
	bodyFor := func(t target, p string, stream bool) []byte {
		if t.api != "responses" {
			return body(p, stream)
		}
		s := ""
		if stream {
			s = `,"stream":true`
		}
		return []byte(`{"model":"qwen3-8b","instructions":"You are a helpful assistant.","input":"` + p + `","temperature":0.7,"max_output_tokens":16` + s + `}`)
	}
	// Unique prompts differ in a number, which the semantic cache's number
	// guard keeps apart: every one is a miss after a semantic lookup.
	var seq atomic.Uint64
	uniqueBody := func(stream bool) func() []byte {
		return func() []byte {
			return body(fmt.Sprintf("Order %d: what is the capital of France? Answer in one word.", seq.Add(1)), stream)
		}
	}
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
	checkFor := func(t target, stream bool) func(int, []byte) error {
		switch {
		case t.api == "responses" && stream:
			return func(status int, b []byte) error {
				if status != 200 || !bytes.Contains(b, []byte("event: response.completed\n")) {
					return fmt.Errorf("status %d: %.200s", status, b)
				}
				return nil
			}
		case t.api == "responses":
			return func(status int, b []byte) error {
				if status != 200 || !bytes.Contains(b, []byte(`"object":"response"`)) {
					return fmt.Errorf("status %d: %.200s", status, b)
				}
				return nil
			}
		case stream:
			return checkSSE
		}
		return checkJSON
	}
	// Prime the hit paths, streamed and not (each has its own entry): a
	// semantic hit's target asks the prompt first, as the stored question.
	for _, t := range targets {
		if t.xcache != "hit-exact" && t.xcache != "hit-semantic" {
			continue
		}
		for _, stream := range []bool{false, true} {
			check := checkFor(t, stream)
			var err error
			for i := 0; i < 100; i++ {
				var res load.Result
				if t.prompt != "" {
					_, _ = load.Run(load.Target{URL: t.url, Body: body(prompt, stream), Check: check}, 1, 50*time.Millisecond, 0)
				}
				res, err = load.Run(load.Target{URL: t.url, Body: bodyFor(t, t.promptOr(prompt), stream), Check: check, Header: [2]string{"X-Cache", t.xcache}}, 1, 50*time.Millisecond, 0)
				if err == nil && res.Errors == 0 {
					break
				}
				if err == nil {
					err = fmt.Errorf("%d of %d answers were no hit", res.Errors, res.Errors+res.Requests)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				return fmt.Errorf("priming %s: %w", t.name, err)
			}
		}
	}

	fmt.Printf("command: go run ./bench/overhead -rounds %d -duration %s -conc %d -stream=%v -wrk=%v -access-log=%v -verify=%v -responses=%v -embeddings=%v -baseline=%q\n",
		o.rounds, o.dur, o.conc, o.stream, o.wrk, o.accessLog, o.verify, o.responses, o.embeddings, o.baseline)
	fmt.Printf("setup: %d alternating rounds; gpusim --ttft 0 --itl 0 --output-tokens 16; separate processes on loopback; frontdoor with the default config but for `cache` (off for pass-through) and `logging.level: info`; medians over rounds\n\n", o.rounds)

	type scenario struct {
		name   string
		stream bool
		c      int
	}
	scenarios := []scenario{{"non-streaming", false, 1}, {"non-streaming", false, o.conc}}
	if o.stream {
		scenarios = append(scenarios, scenario{"streaming (16 chunks)", true, 1}, scenario{"streaming (16 chunks)", true, o.conc})
	}
	fmt.Println("Go load generator (bench/internal/load):")
	fmt.Println()
	printHeader()
	for _, sc := range scenarios {
		var ts []target
		for _, t := range targets {
			if !(sc.stream && t.bare) { // the bare proxy buffers: no floor for streams
				ts = append(ts, t)
			}
		}
		err := measure(o, sim.Process.Pid, sc.name, sc.c, ts, direct.name, bareT.name, func(t target) load.Target {
			lt := load.Target{URL: t.url, Body: bodyFor(t, t.promptOr(prompt), sc.stream), Check: checkFor(t, sc.stream)}
			if t.unique {
				lt.NextBody = uniqueBody(sc.stream)
			}
			return lt
		})
		if err != nil {
			return err
		}
	}
	if o.embeddings {
		if err := embeddingRuns(o, sim.Process.Pid, []target{direct, bareT, pass, def}); err != nil {
			return err
		}
	}
	if o.wrk {
		if err := wrkRuns(o, dir, body(prompt, false), targets); err != nil {
			return err
		}
	}
	fmt.Println("\n(added = target − direct; CPU/req = user+system CPU time of the process over the run ÷ requests)")
	return nil
}

func printHeader() {
	fmt.Println("| scenario | concurrency | target | p50 | p99 | added p50 | req/s | ratio to direct | ratio to bare proxy | gpusim CPU/req | proxy CPU/req | errors |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
}

// measure drives each of ts (lt makes its load) for o.dur at concurrency
// c, in o.rounds alternating rounds, and prints a row each: medians over
// the rounds, against the targets named direct and bare.
func measure(o opts, simPid int, scenario string, c int, ts []target, direct, bare string, lt func(target) load.Target) error {
	samples := map[string][]sample{}
	for r := 0; r < o.rounds; r++ {
		for _, t := range ts {
			x := lt(t)
			x.Watch = []int{simPid}
			if t.pid != 0 {
				x.Watch = append(x.Watch, t.pid)
			}
			if t.xcache != "" {
				x.Header = [2]string{"X-Cache", t.xcache}
			}
			res, err := load.Run(x, c, o.dur, 300*time.Millisecond)
			if err != nil {
				return fmt.Errorf("%s %d %s: %w", scenario, c, t.name, err)
			}
			s := sample{res: res, cpuNode: perReq(res.CPU[0], res.Requests)}
			if t.pid != 0 {
				s.cpuProx = perReq(res.CPU[1], res.Requests)
			}
			samples[t.name] = append(samples[t.name], s)
		}
	}
	med := func(name string, f func(sample) float64) float64 { return load.Median(samples[name], f) }
	rate := func(s sample) float64 { return s.res.Throughput() }
	p50 := func(s sample) float64 { return load.Micros(s.res.Quantile(0.5)) }
	dp50, dRate, bRate := med(direct, p50), med(direct, rate), med(bare, rate)
	for _, t := range ts {
		r := med(t.name, rate)
		prox, added, toBare := "–", "–", "–"
		if t.pid != 0 {
			prox = fmt.Sprintf("%.1f µs", med(t.name, func(s sample) float64 { return s.cpuProx }))
		}
		if t.name != direct {
			added = fmt.Sprintf("**%+.0f µs**", med(t.name, p50)-dp50)
		}
		if bRate > 0 && t.name != direct {
			toBare = fmt.Sprintf("**%.2f**", r/bRate)
		}
		errs := 0
		for _, s := range samples[t.name] {
			errs += s.res.Errors
		}
		fmt.Printf("| %s | %d | %s | %.0f µs | %.0f µs | %s | %.0f | **%.2f** | %s | %.1f µs | %s | %d |\n",
			scenario, c, t.name, med(t.name, p50), med(t.name, func(s sample) float64 { return load.Micros(s.res.Quantile(0.99)) }),
			added, r, r/dRate, toBare, med(t.name, func(s sample) float64 { return s.cpuNode }), prox, errs)
	}
	return nil
}

// wrkRuns measures the non-streaming throughput of the targets that take
// one fixed body with wrk, one thread.
func wrkRuns(o opts, dir string, body []byte, targets []target) error {
	fmt.Printf("\nwrk -t1 -c%d -d%s, non-streaming (throughput only):\n\n", o.conc, o.dur)
	fmt.Println("| target | req/s (median) | ratio to direct | ratio to bare proxy |")
	fmt.Println("|---|---|---|---|")
	luaPath := filepath.Join(dir, "post.lua")
	lua := "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.body = " + strconv.Quote(string(body)) + "\n"
	if err := os.WriteFile(luaPath, []byte(lua), 0o600); err != nil {
		return err
	}
	var ts []target
	for _, t := range targets {
		if t.xcache == "" {
			ts = append(ts, t)
		}
	}
	rates := map[string][]float64{}
	for r := 0; r < o.rounds; r++ {
		for _, t := range ts {
			res, err := load.Wrk(luaPath, t.url, o.conc, o.dur)
			if err != nil {
				return fmt.Errorf("wrk %s: %w", t.name, err)
			}
			rates[t.name] = append(rates[t.name], res.Rate)
		}
	}
	d, b := load.MedianOf(rates["direct"]), load.MedianOf(rates["bare proxy"])
	for _, t := range ts {
		m := load.MedianOf(rates[t.name])
		fmt.Printf("| %s | %.0f | **%.2f** | **%.2f** |\n", t.name, m, m/d, m/b)
	}
	return nil
}

func perReq(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return load.Micros(d) / float64(n)
}

// buildRevision builds cmd/frontdoor as of the git revision rev into dir
// and returns the binary: the tree is exported with git archive into a
// folder of its own, so the working tree is not touched.
func buildRevision(dir, rev string) (string, error) {
	src := filepath.Join(dir, "src-baseline")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	archive := exec.Command("git", "archive", "--format=tar", rev)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	untar.Stdin = pipe
	if err := untar.Start(); err != nil {
		return "", err
	}
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	if err := archive.Run(); err != nil {
		return "", fmt.Errorf("-baseline: git archive %s: %w\n%s", rev, err, stderr.Bytes())
	}
	if err := untar.Wait(); err != nil {
		return "", fmt.Errorf("-baseline: untar: %w", err)
	}
	bin := filepath.Join(dir, "frontdoor-baseline")
	build := exec.Command("go", "build", "-o", bin, "./cmd/frontdoor")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("-baseline: build %s: %w\n%s", rev, err, out)
	}
	return bin, nil
}
