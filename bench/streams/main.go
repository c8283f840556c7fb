// Command streams measures what an open stream costs a proxy: N concurrent
// slow streams (gpusim with a 20 ms inter-token latency, 100 tokens each)
// through frontdoor, through nginx + Lua (the peer in
// ../shared/peers/nginx-s0) and through the smallest streaming proxies on
// Go's two HTTP stacks (bench/bareproxy -stream and -nethttp: the floor of
// any Go proxy), against the same gpusim and with the same load generator,
// in alternating rounds of one run.
//
// For each N it reports, per target: CPU time per stream and per chunk (the
// process's user+system time from /proc/PID/stat over the measured window,
// divided by the streams and chunks finished in it), its RSS (the highest
// VmRSS sampled during the rounds, with the file-backed part of that
// sample, and VmHWM from /proc/PID/status), and the p99 time to first
// token with what it adds over going to gpusim directly.
//
// With -wrk it also measures throughput at -conc connections with wrk, one
// thread, gpusim answering at once (zero TTFT and ITL, 16 tokens),
// streaming and not: direct, nginx + Lua, the fasthttp bare proxy,
// frontdoor with the cache off and frontdoor with the default config
// (unique prompts, and one repeated prompt), with each process's user and
// system CPU per request.
//
//	go run ./bench/streams [-n 1000,5000] [-rounds 3] [-duration 6s] [-wrk] [-nginx ../shared/peers/nginx-s0]
//
// nginx needs Debian's nginx and libnginx-mod-http-lua. The peer's
// configuration is rendered from its template as its start.sh does, but
// with worker_connections raised to 2N+512 when 8192 is too few (each
// stream holds a client and an upstream connection).
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"frontdoor/bench/internal/load"
)

func main() {
	o := opts{}
	var ns string
	flag.StringVar(&ns, "n", "1000,5000", "concurrent streams, comma-separated")
	flag.IntVar(&o.rounds, "rounds", 3, "alternating rounds per N")
	flag.DurationVar(&o.dur, "duration", 6*time.Second, "measured window of each round")
	flag.DurationVar(&o.itl, "itl", 20*time.Millisecond, "gpusim inter-token latency for the slow streams")
	flag.IntVar(&o.tokens, "tokens", 100, "tokens per slow stream")
	flag.BoolVar(&o.wrk, "wrk", false, "also measure throughput with wrk at -conc connections")
	flag.IntVar(&o.conc, "conc", 32, "connections for the wrk runs")
	flag.DurationVar(&o.wrkDur, "wrk-duration", 5*time.Second, "length of each wrk run")
	flag.StringVar(&o.nginxDir, "nginx", "../shared/peers/nginx-s0", "the nginx + Lua peer's folder (its nginx.conf.tmpl)")
	flag.StringVar(&o.only, "only", "", "semicolon-separated target names to run besides direct (default all)")
	flag.StringVar(&o.profile, "profile", "", "write frontdoor's CPU and heap profiles of the first round of each N into this folder")
	flag.BoolVar(&o.noStreams, "no-streams", false, "skip the slow streams (with -wrk: only the throughput runs)")
	flag.StringVar(&o.fdEnv, "frontdoor-env", "", "extra environment for the frontdoor processes, such as GOMAXPROCS=1 (space-separated KEY=VALUE)")
	flag.StringVar(&o.variant, "variant", "", "extra environment (space-separated KEY=VALUE, such as GOMAXPROCS=1) for one more target, \"frontdoor, cache off, VARIANT\", measured side by side")
	flag.StringVar(&o.before, "before", "", "a frontdoor binary built from an earlier commit, run as extra targets (\"before: ...\") for side-by-side ratios")
	flag.Parse()
	for _, s := range strings.Split(ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "streams: bad -n %q\n", s)
			os.Exit(2)
		}
		o.ns = append(o.ns, n)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "streams:", err)
		os.Exit(1)
	}
}

type opts struct {
	ns               []int
	rounds           int
	dur, itl, wrkDur time.Duration
	tokens, conc     int
	wrk, noStreams   bool
	nginxDir, only   string
	profile, before  string
	fdEnv, variant   string
}

// target is one process to measure and how to reach it.
type target struct {
	name   string
	url    string
	pid    int    // 0: gpusim itself (direct)
	admin  string // frontdoor's base URL, for pprof
	unique bool   // a new prompt per request (frontdoor's default config)
}

// env is a set of processes started for one part of the run.
type env struct {
	dir   string
	procs load.Procs
	stops []func()
}

func (e *env) close() {
	for _, s := range e.stops {
		s()
	}
	e.procs.Stop()
}

func (e *env) start(c *exec.Cmd, health string) error { return e.procs.Start(c, health) }

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// setup starts gpusim with simArgs, nginx + Lua, the two bare proxies and
// two frontdoors (cache off, default config) in front of it.
func setup(o opts, bin string, maxConns int, simArgs ...string) (*env, []target, error) {
	e := &env{dir: bin}
	simAddr := addr(load.FreePort())
	args := append([]string{"--listen", simAddr, "--model", "qwen3-8b", "--max-num-seqs", "20000", "--kv-capacity", "1000000000"}, simArgs...)
	sim := exec.Command(filepath.Join(bin, "gpusim"), args...)
	if err := e.start(sim, "http://"+simAddr+"/health"); err != nil {
		return e, nil, fmt.Errorf("gpusim: %w", err)
	}
	ts := []target{{name: "direct", url: "http://" + simAddr + "/v1/chat/completions", pid: sim.Process.Pid}}

	ng, err := startNginx(e, o.nginxDir, simAddr, maxConns)
	if err != nil {
		return e, nil, err
	}
	ts = append(ts, ng)
	// The floors: the smallest streaming proxies on Go's two HTTP stacks.
	for _, b := range []struct{ name, flag string }{{"bare proxy, fasthttp", "-stream"}, {"bare proxy, net/http", "-nethttp"}} {
		port := load.FreePort()
		c := exec.Command(filepath.Join(bin, "bareproxy"), "-listen", addr(port), "-upstream", simAddr, b.flag)
		if err := e.start(c, fmt.Sprintf("http://%s/health", addr(port))); err != nil {
			return e, nil, fmt.Errorf("%s: %w", b.name, err)
		}
		ts = append(ts, target{name: b.name, url: fmt.Sprintf("http://%s/v1/chat/completions", addr(port)), pid: c.Process.Pid})
	}
	type fdTarget struct{ name, cache, bin, env string }
	fds := []fdTarget{
		{"frontdoor, cache off", "cache: {backend: off}\n", filepath.Join(bin, "frontdoor"), ""},
		{"frontdoor, default", "", filepath.Join(bin, "frontdoor"), ""},
	}
	if o.variant != "" {
		fds = append(fds, fdTarget{"frontdoor, cache off, " + o.variant, "cache: {backend: off}\n", filepath.Join(bin, "frontdoor"), o.variant})
	}
	if o.before != "" {
		fds = append(fds, fdTarget{"before: frontdoor, cache off", "cache: {backend: off}\n", o.before, ""},
			fdTarget{"before: frontdoor, default", "", o.before, ""})
	}
	for _, fd := range fds {
		port := load.FreePort()
		cfg := fmt.Sprintf("listen: %s\nlogging: {level: info}\n%snodes:\n  - {name: sim, url: http://%s, models: [qwen3-8b], max_concurrency: %d}\n",
			addr(port), fd.cache, simAddr, maxConns)
		name := strings.NewReplacer(",", "", " ", "-", ":", "").Replace(fd.name)
		path := filepath.Join(bin, name+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			return e, nil, err
		}
		logFile, err := os.Create(filepath.Join(bin, name+".log"))
		if err != nil {
			return e, nil, err
		}
		c := exec.Command(fd.bin, "serve", "--config", path)
		c.Env = append(append(os.Environ(), strings.Fields(o.fdEnv)...), strings.Fields(fd.env)...)
		c.Stderr = logFile
		if err := e.start(c, fmt.Sprintf("http://%s/healthz", addr(port))); err != nil {
			return e, nil, fmt.Errorf("%s: %w", fd.name, err)
		}
		ts = append(ts, target{name: fd.name, url: fmt.Sprintf("http://%s/v1/chat/completions", addr(port)),
			pid: c.Process.Pid, admin: "http://" + addr(port), unique: fd.cache == ""})
	}
	return e, ts, nil
}

// startNginx renders the peer's template (as its start.sh does) with both
// upstreams on gpusim and starts nginx in the foreground of its own folder.
func startNginx(e *env, peer, simAddr string, maxConns int) (target, error) {
	if _, err := exec.LookPath("nginx"); err != nil {
		return target{}, fmt.Errorf("nginx is not installed (apt-get install -y nginx libnginx-mod-http-lua): %w", err)
	}
	tmpl, err := os.ReadFile(filepath.Join(peer, "nginx.conf.tmpl"))
	if err != nil {
		return target{}, fmt.Errorf("the nginx + Lua peer (-nginx): %w", err)
	}
	d := filepath.Join(e.dir, fmt.Sprintf("nginx-%d", load.FreePort()))
	for _, s := range []string{"logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(d, s), 0o700); err != nil {
			return target{}, err
		}
	}
	_, simPort, _ := net.SplitHostPort(simAddr)
	port := load.FreePort()
	conf := strings.NewReplacer("@DIR@", d, "@LISTEN_PORT@", strconv.Itoa(port), "@A_PORT@", simPort, "@B_PORT@", simPort).Replace(string(tmpl))
	if wc := 2*maxConns + 512; wc > 8192 {
		conf = strings.Replace(conf, "worker_connections 8192;", fmt.Sprintf("worker_connections %d;", wc), 1)
	}
	if err := os.WriteFile(filepath.Join(d, "nginx.conf"), []byte(conf), 0o600); err != nil {
		return target{}, err
	}
	c := exec.Command("nginx", "-p", d, "-c", "nginx.conf")
	if err := e.start(c, fmt.Sprintf("http://%s/__inflight", addr(port))); err != nil {
		return target{}, fmt.Errorf("nginx: %w (see %s/logs/error.log)", err, d)
	}
	// The master forks one worker, which does the work: watch it.
	var worker int
	for i := 0; i < 50 && worker == 0; i++ {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", c.Process.Pid, c.Process.Pid))
		if f := strings.Fields(string(b)); len(f) == 1 {
			worker, _ = strconv.Atoi(f[0])
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if worker == 0 {
		return target{}, errors.New("nginx: no single worker process found")
	}
	e.stops = append(e.stops, func() { _ = c.Process.Signal(syscall.SIGQUIT) })
	return target{name: "nginx + Lua", url: fmt.Sprintf("http://%s/v1/chat/completions", addr(port)), pid: worker}, nil
}

func run(o opts) error {
	// Each stream holds a client and an upstream socket in the proxy, and
	// one in the load generator and in gpusim: raise the soft limit to the
	// hard one (children inherit it).
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < rl.Max {
		rl.Cur = rl.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	bin, err := os.MkdirTemp("", "fd-streams")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	if err := load.Build(bin, "frontdoor", "gpusim", "./bench/bareproxy"); err != nil {
		return err
	}
	fmt.Printf("command: go run ./bench/streams -n %s -rounds %d -duration %s -itl %s -tokens %d -wrk=%v -conc %d -wrk-duration %s -before %q -only %q -frontdoor-env %q -variant %q\n",
		joinInts(o.ns), o.rounds, o.dur, o.itl, o.tokens, o.wrk, o.conc, o.wrkDur, o.before, o.only, o.fdEnv, o.variant)
	fmt.Printf("open files: soft limit %d\n\n", rl.Cur)
	if !o.noStreams {
		if err := slowStreams(o, bin); err != nil {
			return err
		}
	}
	if o.wrk {
		if err := wrkPart(o, bin); err != nil {
			return err
		}
	}
	return nil
}

func (o opts) selected(ts []target) []target {
	if o.only == "" {
		return ts
	}
	var out []target
	for _, t := range ts {
		for _, n := range strings.Split(o.only, ";") {
			if strings.TrimSpace(n) == t.name || t.name == "direct" {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

// round is one target's measurement at one N.
type round struct {
	streams, chunks, errs int
	cpu                   time.Duration // the target process's
	simCPU                time.Duration
	ttft                  []time.Duration // sorted
	maxRSS                int64           // KiB, sampled
	fileRSS               int64           // KiB, RssFile (the binary's and libraries' pages) at maxRSS
	lastErr               error
}

func slowStreams(o opts, bin string) error {
	maxN := 0
	for _, n := range o.ns {
		maxN = max(maxN, n)
	}
	e, ts, err := setup(o, bin, maxN+64, "--ttft", "0", "--itl", o.itl.String(), "--output-tokens", strconv.Itoa(o.tokens))
	defer e.close()
	if err != nil {
		return err
	}
	ts = o.selected(ts)
	simPID := ts[0].pid
	fmt.Printf("Slow streams: gpusim --ttft 0 --itl %s --output-tokens %d; %d alternating rounds of %s each after a ramp-up; medians over rounds\n\n",
		o.itl, o.tokens, o.rounds, o.dur)
	fmt.Println("| N | target | streams/s | CPU/stream | CPU/chunk | ratio to nginx + Lua | RSS, max sampled (of it file-backed) | VmHWM | TTFT p99 | added TTFT p99 | gpusim CPU/stream | errors |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, n := range o.ns {
		res := map[string][]round{}
		for r := 0; r < o.rounds; r++ {
			for _, t := range ts {
				var prof func()
				if o.profile != "" && r == 0 && t.admin != "" {
					prof = profiler(o.profile, t, n, o.dur)
				}
				rd, err := streamRound(t, simPID, n, o.dur, prof)
				if err != nil {
					return fmt.Errorf("%d streams, %s: %w", n, t.name, err)
				}
				res[t.name] = append(res[t.name], rd)
			}
		}
		med := func(name string, f func(round) float64) float64 {
			var v []float64
			for _, rd := range res[name] {
				v = append(v, f(rd))
			}
			return load.MedianOf(v)
		}
		perStream := func(rd round) float64 { return load.Micros(rd.cpu) / float64(max(rd.streams, 1)) }
		p99 := func(rd round) float64 { return load.Micros(quantile(rd.ttft, 0.99)) }
		ngx := med("nginx + Lua", perStream)
		dp99 := med("direct", p99)
		for _, t := range ts {
			errs := 0
			var lastErr error
			var rss, file int64
			for _, rd := range res[t.name] {
				errs += rd.errs
				if rd.maxRSS > rss {
					rss, file = rd.maxRSS, rd.fileRSS
				}
				if rd.lastErr != nil {
					lastErr = rd.lastErr
				}
			}
			hwm, _ := procStatus(t.pid, "VmHWM")
			ratio, added := "–", "–"
			if t.name != "direct" && ngx > 0 {
				ratio = fmt.Sprintf("**%.2f×**", med(t.name, perStream)/ngx)
			}
			if t.name != "direct" {
				added = fmt.Sprintf("%+.2f ms", (med(t.name, p99)-dp99)/1e3)
			}
			fmt.Printf("| %d | %s | %.0f | %.2f ms | %.1f µs | %s | %.1f MB (%.1f) | %.1f MB | %.2f ms | %s | %.2f ms | %d |\n",
				n, t.name, med(t.name, func(rd round) float64 { return float64(rd.streams) / o.dur.Seconds() }),
				med(t.name, perStream)/1e3, med(t.name, func(rd round) float64 { return load.Micros(rd.cpu) / float64(max(rd.chunks, 1)) }),
				ratio, float64(rss)/1024, float64(file)/1024, float64(hwm)/1024, med(t.name, p99)/1e3, added,
				med(t.name, func(rd round) float64 { return load.Micros(rd.simCPU) / float64(max(rd.streams, 1)) })/1e3, errs)
			if lastErr != nil {
				fmt.Fprintf(os.Stderr, "  %s N=%d: last error: %v\n", t.name, n, lastErr)
			}
		}
	}
	fmt.Println("\n(CPU/stream = user+system CPU of the process over the window ÷ streams finished in it; for direct, gpusim's own; ratio = CPU/stream ÷ nginx + Lua's; nginx's is its one worker process)")
	fmt.Println()
	return nil
}

// streamRound keeps n streams open against t: n workers each open a stream,
// read it to its end and open the next. Workers start spread over a second;
// the window of d begins once every worker has finished a first stream.
func streamRound(t target, simPID, n int, d time.Duration, prof func()) (round, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n, DisableCompression: true,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	var (
		measuring atomic.Bool
		stop      atomic.Bool
		warm      sync.WaitGroup
		mu        sync.Mutex
		rd        round
		wg        sync.WaitGroup
		seq       atomic.Uint64
	)
	warm.Add(n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			time.Sleep(time.Duration(i) * time.Second / time.Duration(n))
			first := true
			for !stop.Load() {
				in := measuring.Load()
				ttft, chunks, err := oneStream(ctx, client, t.url, seq.Add(1))
				if first {
					first = false
					warm.Done()
				}
				if stop.Load() && !in {
					return
				}
				mu.Lock()
				switch {
				case err != nil:
					if in || measuring.Load() {
						rd.errs++
						rd.lastErr = err
					}
				case in:
					// Started in the window: its first token counts, even
					// when it ends after the window (long streams at large N).
					rd.ttft = append(rd.ttft, ttft)
					fallthrough
				default:
					if measuring.Load() && !stop.Load() {
						rd.streams++
						rd.chunks += chunks
					}
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}(i)
	}
	warm.Wait()
	cpu0, _ := load.CPUTime(t.pid)
	sim0, _ := load.CPUTime(simPID)
	measuring.Store(true)
	done := make(chan struct{})
	go func() { // RSS, sampled
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				v, err := procStatus(t.pid, "VmRSS")
				f, ferr := procStatus(t.pid, "RssFile")
				if err == nil && ferr == nil {
					mu.Lock()
					if v > rd.maxRSS {
						rd.maxRSS, rd.fileRSS = v, f
					}
					mu.Unlock()
				}
			}
		}
	}()
	if prof != nil {
		go prof()
	}
	time.Sleep(d)
	mu.Lock()
	stop.Store(true)
	cpu1, _ := load.CPUTime(t.pid)
	sim1, _ := load.CPUTime(simPID)
	mu.Unlock()
	close(done)
	wg.Wait()
	rd.cpu, rd.simCPU = cpu1-cpu0, sim1-sim0
	sort.Slice(rd.ttft, func(i, j int) bool { return rd.ttft[i] < rd.ttft[j] })
	if rd.streams == 0 {
		return rd, errors.Join(errors.New("no stream finished in the window"), rd.lastErr)
	}
	return rd, nil
}

var doneLine = []byte("data: [DONE]")

// oneStream sends one streaming request and reads it to its end; it
// returns the time to the first data line and the number of data lines.
func oneStream(ctx context.Context, c *http.Client, url string, id uint64) (time.Duration, int, error) {
	body := fmt.Sprintf(`{"model":"qwen3-8b","messages":[{"role":"user","content":"Stream %d: tell me a long story about a lighthouse."}],"stream":true}`, id)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	br := bufio.NewReaderSize(resp.Body, 4096)
	var ttft time.Duration
	chunks := 0
	for {
		line, err := br.ReadSlice('\n')
		if bytes.HasPrefix(line, []byte("data:")) {
			if chunks == 0 {
				ttft = time.Since(t0)
			}
			chunks++
			if bytes.HasPrefix(line, doneLine) {
				_, _ = io.Copy(io.Discard, br)
				return ttft, chunks, nil
			}
		}
		if err != nil {
			return ttft, chunks, fmt.Errorf("stream ended without [DONE] after %d chunks: %w", chunks, err)
		}
	}
}

// profiler fetches a CPU profile (most of the window) and a heap profile of
// frontdoor while the streams run.
func profiler(dir string, t target, n int, d time.Duration) func() {
	name := strings.NewReplacer(",", "", " ", "-", ":", "").Replace(t.name)
	return func() {
		_ = os.MkdirAll(dir, 0o700)
		secs := max(1, int(d.Seconds())-2)
		get := func(path, file string) {
			resp, err := http.Get(t.admin + path)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(filepath.Join(dir, file))
			if err != nil {
				return
			}
			defer f.Close()
			_, _ = io.Copy(f, resp.Body)
		}
		get("/debug/pprof/heap?gc=1", fmt.Sprintf("%s-%d.heap", name, n))
		get("/debug/pprof/heap?debug=1", fmt.Sprintf("%s-%d.heap.txt", name, n))
		get("/debug/pprof/goroutine", fmt.Sprintf("%s-%d.goroutine", name, n))
		get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), fmt.Sprintf("%s-%d.cpu", name, n))
	}
}

// procStatus reads one kB field (VmRSS, RssFile, VmHWM) of /proc/PID/status.
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func quantile(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// wrkPart measures throughput at o.conc connections with wrk against a
// gpusim that answers at once.
func wrkPart(o opts, bin string) error {
	if _, err := exec.LookPath("wrk"); err != nil {
		return fmt.Errorf("-wrk: wrk is not installed (apt-get install wrk): %w", err)
	}
	e, ts, err := setup(o, bin, 4096, "--ttft", "0", "--itl", "0", "--output-tokens", "16")
	defer e.close()
	if err != nil {
		return err
	}
	// net/http's bare proxy fails some wrk connections with read errors
	// at this rate; it is measured with the slow streams only.
	ts = slices.DeleteFunc(o.selected(ts), func(t target) bool { return t.name == "bare proxy, net/http" })
	type column struct {
		t      target
		name   string
		unique bool
	}
	var cols []column
	for _, t := range ts {
		if t.unique {
			pre := strings.TrimSuffix(t.name, "frontdoor, default")
			cols = append(cols, column{t, pre + "frontdoor default, unique prompts", true}, column{t, pre + "frontdoor default, repeated prompt", false})
		} else {
			cols = append(cols, column{t, t.name, false})
		}
	}
	fmt.Printf("wrk -t1 -c%d -d%s, gpusim --ttft 0 --itl 0 --output-tokens 16; %d alternating rounds; medians (requests/s, ratio to nginx + Lua)\n\n", o.conc, o.wrkDur, o.rounds)
	head, sep := "| | ", "|---|"
	for _, c := range cols {
		head += c.name + " | "
		sep += "---|"
	}
	fmt.Println(strings.TrimSpace(head))
	fmt.Println(sep)
	// The proxy's user and system CPU per request, medians, for the table
	// after the throughput one.
	cpuRows := []string{}
	runs := 0 // numbers the runs, so a prompt is unique over all of them
	for _, stream := range []bool{false, true} {
		rates := make([][]float64, len(cols))
		users, syss := make([][]float64, len(cols)), make([][]float64, len(cols))
		for r := 0; r < o.rounds; r++ {
			for i, c := range cols {
				script := filepath.Join(bin, fmt.Sprintf("wrk-%v-%v.lua", stream, c.unique))
				runs++
				if err := os.WriteFile(script, []byte(wrkScript(stream, c.unique, runs)), 0o600); err != nil {
					return err
				}
				u0, s0, err := load.CPUTimes(c.t.pid)
				if err != nil {
					return err
				}
				res, err := load.Wrk(script, c.t.url, o.conc, o.wrkDur)
				if err != nil {
					return fmt.Errorf("wrk %s: %w", c.name, err)
				}
				u1, s1, err := load.CPUTimes(c.t.pid)
				if err != nil {
					return err
				}
				rates[i] = append(rates[i], res.Rate)
				users[i] = append(users[i], load.Micros(u1-u0)/float64(res.Requests))
				syss[i] = append(syss[i], load.Micros(s1-s0)/float64(res.Requests))
			}
		}
		cpuRow := "| non-streaming | "
		if stream {
			cpuRow = "| streaming | "
		}
		for i := range cols {
			u, s := load.MedianOf(users[i]), load.MedianOf(syss[i])
			cpuRow += fmt.Sprintf("%.0f + %.0f = %.0f µs | ", u, s, u+s)
		}
		cpuRows = append(cpuRows, strings.TrimSpace(cpuRow))
		ngx := 0.0
		for i, c := range cols {
			if c.name == "nginx + Lua" {
				ngx = load.MedianOf(rates[i])
			}
		}
		row := "| non-streaming | "
		if stream {
			row = "| streaming | "
		}
		for i := range cols {
			m := load.MedianOf(rates[i])
			if ngx > 0 {
				row += fmt.Sprintf("%.1fk (**%.2f×**) | ", m/1e3, m/ngx)
			} else {
				row += fmt.Sprintf("%.1fk | ", m/1e3)
			}
		}
		fmt.Println(strings.TrimSpace(row))
	}
	fmt.Println("\nCPU per request of each target's process (user + system, from /proc; for direct, gpusim's own), medians over the same rounds:")
	fmt.Println()
	fmt.Println(strings.TrimSpace(head))
	fmt.Println(sep)
	for _, r := range cpuRows {
		fmt.Println(r)
	}
	fmt.Println()
	return nil
}

// wrkScript is a wrk Lua script posting a chat request; unique gives each
// request its own prompt (the run's number and a counter), so a cache
// misses, also in later runs against the same frontdoor.
func wrkScript(stream, unique bool, run int) string {
	s := ""
	if stream {
		s = `,"stream":true`
	}
	pre := `{"model":"qwen3-8b","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"`
	post := `"}],"temperature":0.7,"max_tokens":16` + s + `}`
	lua := "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n"
	if !unique {
		return lua + "wrk.body = " + strconv.Quote(pre+"What is the capital of France? Answer in one word."+post) + "\n"
	}
	return lua + "local n = 0\nrequest = function()\n  n = n + 1\n  return wrk.format(nil, nil, nil, " +
		strconv.Quote(fmt.Sprintf("%sOrder %d-", pre, run)) + " .. n .. " + strconv.Quote(": what is the capital of France? Answer in one word."+post) + ")\nend\n"
}
