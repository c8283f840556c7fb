// Package load is what the benchmarks in bench/ share: the closed-loop
// HTTP load generator (Run: C workers each send requests back to back for
// a fixed duration and record every latency), the child processes they
// start and stop (Procs: gpusim, frontdoor, redis-server; proc.go,
// redis.go), wrk runs (wrk.go), the gateways' /metrics read with the
// Prometheus text parser (metrics.go), and CPU time and memory from /proc
// (procfs.go).
package load

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Result summarises one run.
type Result struct {
	Requests  int
	Errors    int
	Duration  time.Duration
	Latencies []time.Duration // sorted
	// CPU is the CPU time each of Target.Watch used during the measured run.
	CPU []time.Duration
}

// Throughput is requests per second.
func (r Result) Throughput() float64 { return float64(r.Requests) / r.Duration.Seconds() }

// Quantile returns the q-quantile latency (0 < q < 1).
func (r Result) Quantile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(q * float64(len(r.Latencies)))
	if i >= len(r.Latencies) {
		i = len(r.Latencies) - 1
	}
	return r.Latencies[i]
}

// Target is what a worker sends.
type Target struct {
	URL     string
	Body    []byte
	Headers map[string]string
	// NextBody, when set, gives each request's body instead of Body; the
	// workers call it concurrently.
	NextBody func() []byte
	// Check validates a response; nil accepts any 200.
	Check func(status int, body []byte) error
	// Header, when set, is a response header every answer must carry with
	// the value given, such as X-Cache: hit-exact.
	Header [2]string
	// Watch lists process ids whose CPU time is recorded in Result.CPU.
	Watch []int
}

// Run drives target with c workers for d, after a warm-up of warm.
func Run(target Target, c int, d, warm time.Duration) (Result, error) {
	client := &fasthttp.Client{MaxConnsPerHost: c * 2, ReadTimeout: 30 * time.Second, NoDefaultUserAgentHeader: true}
	if warm > 0 {
		if _, err := run(client, target, c, warm); err != nil {
			return Result{}, err
		}
	}
	before := make([]time.Duration, len(target.Watch))
	for i, pid := range target.Watch {
		before[i], _ = CPUTime(pid)
	}
	res, err := run(client, target, c, d)
	for i, pid := range target.Watch {
		after, _ := CPUTime(pid)
		res.CPU = append(res.CPU, after-before[i])
	}
	return res, err
}

func run(client *fasthttp.Client, target Target, c int, d time.Duration) (Result, error) {
	var (
		mu      sync.Mutex
		all     []time.Duration
		errs    int
		lastErr error
	)
	start := time.Now()
	deadline := start.Add(d)
	Workers(c, func(req *fasthttp.Request, resp *fasthttp.Response) {
		lat := make([]time.Duration, 0, 1<<16)
		nerr := 0
		var werr error
		for time.Now().Before(deadline) {
			req.Reset()
			req.SetRequestURI(target.URL)
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.SetContentType("application/json")
			for k, v := range target.Headers {
				req.Header.Set(k, v)
			}
			if target.NextBody != nil {
				req.SetBodyRaw(target.NextBody())
			} else {
				req.SetBodyRaw(target.Body)
			}
			t0 := time.Now()
			err := client.Do(req, resp)
			el := time.Since(t0)
			if h := target.Header; err == nil && h[0] != "" && string(resp.Header.Peek(h[0])) != h[1] {
				err = fmt.Errorf("%s: %q, want %q", h[0], resp.Header.Peek(h[0]), h[1])
			}
			if err == nil && target.Check != nil {
				err = target.Check(resp.StatusCode(), resp.Body())
			} else if err == nil && resp.StatusCode() != 200 {
				err = fmt.Errorf("status %d: %s", resp.StatusCode(), resp.Body())
			}
			if err != nil {
				nerr++
				werr = err
				continue
			}
			lat = append(lat, el)
		}
		mu.Lock()
		all = append(all, lat...)
		errs += nerr
		if werr != nil {
			lastErr = werr
		}
		mu.Unlock()
	})
	res := Result{Requests: len(all), Errors: errs, Duration: time.Since(start), Latencies: all}
	sort.Slice(res.Latencies, func(i, j int) bool { return res.Latencies[i] < res.Latencies[j] })
	if res.Requests == 0 {
		return res, errors.Join(errors.New("no request succeeded"), lastErr)
	}
	return res, nil
}

// Workers runs n goroutines, each with a fasthttp request and response of
// its own, and waits for them all to return.
func Workers(n int, work func(req *fasthttp.Request, resp *fasthttp.Response)) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			work(req, resp)
		})
	}
	wg.Wait()
}
