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
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
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

func run(o opts) error {
	// Each stream holds a client and an upstream socket in the proxy, and
	// one in the load generator and in gpusim: raise the soft limit to the
	// hard one (children inherit it).
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < rl.Max {
		rl.Cur = rl.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	bin, err := load.BuildTemp("fd-streams", "frontdoor", "gpusim", "./bench/bareproxy")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
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

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
