package main

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
)

// rrBalancer is a round-robin load balancer for tests, like a Kubernetes
// Service with readiness: it polls each replica's /readyz every 100ms and
// sends new requests only to ready ones.
type rrBalancer struct {
	errs     lockedBuffer // the proxies' error lines, by replica
	mu       sync.Mutex
	backends []*rrBackend
	next     int
	stop     chan struct{}
}

type rrBackend struct {
	base  string
	proxy *httputil.ReverseProxy
	ready atomic.Bool
	sent  atomic.Int64
}

func newRRBalancer(t *testing.T) (*rrBalancer, string) {
	lb := &rrBalancer{stop: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(lb.serve))
	t.Cleanup(func() { close(lb.stop); srv.Close() })
	go func() {
		c := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{}}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			lb.mu.Lock()
			bs := append([]*rrBackend(nil), lb.backends...)
			lb.mu.Unlock()
			for _, b := range bs {
				resp, err := c.Get(b.base + "/readyz")
				b.ready.Store(err == nil && resp.StatusCode == 200)
				if err == nil {
					resp.Body.Close()
				}
			}
			select {
			case <-lb.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return lb, srv.URL
}

func (lb *rrBalancer) add(base string) *rrBackend {
	u, _ := url.Parse(base)
	b := &rrBackend{base: base, proxy: httputil.NewSingleHostReverseProxy(u)}
	b.proxy.FlushInterval = -1
	b.proxy.Transport = &http.Transport{MaxIdleConnsPerHost: 64} // its own pool
	b.proxy.ErrorLog = log.New(&lb.errs, base+" ", log.Lmicroseconds)
	lb.mu.Lock()
	lb.backends = append(lb.backends, b)
	lb.mu.Unlock()
	return b
}

func (lb *rrBalancer) remove(b *rrBackend) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for i, x := range lb.backends {
		if x == b {
			lb.backends = append(lb.backends[:i], lb.backends[i+1:]...)
			return
		}
	}
}

func (lb *rrBalancer) ready() int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	n := 0
	for _, b := range lb.backends {
		if b.ready.Load() {
			n++
		}
	}
	return n
}

func (lb *rrBalancer) pick() *rrBackend {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for range lb.backends {
		b := lb.backends[lb.next%len(lb.backends)]
		lb.next++
		if b.ready.Load() {
			return b
		}
	}
	return nil
}

func (lb *rrBalancer) serve(w http.ResponseWriter, r *http.Request) {
	b := lb.pick()
	if b == nil {
		http.Error(w, "no ready replica", http.StatusServiceUnavailable)
		return
	}
	// Buffer the request body before proxying, as nginx does by default
	// (proxy_request_buffering on). Go's HTTP/1 server drains and closes
	// an inbound body once the response starts, while the proxy's
	// Transport may still read it for its end-of-body check; that read
	// fails and the Transport drops the connection, cutting a stream that
	// had already begun (golang/go#40747).
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	b.sent.Add(1)
	b.proxy.ServeHTTP(w, r)
}

// A rolling restart: two replicas behind a round-robin balancer that
// follows /readyz, one SIGTERMed while 50 streams run, then started again.
// /readyz turns 503 at once while requests are still served for
// drain_delay; the streams finish within grace; no request fails.
func TestRollingRestartBehindABalancer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	var cfg strings.Builder
	cfg.WriteString("cache: {backend: off}\nlogging: {flush_interval: 0s, access_log: false}\nshutdown: {drain_delay: 1s, grace: 20s}\nnodes:\n")
	for i := 0; i < 2; i++ {
		s := testenv.GPUSim(t, func(c *gpusim.Config) { c.ITL, c.OutputTokens, c.MaxNumSeqs = 20*time.Millisecond, 50, 200 })
		fmt.Fprintf(&cfg, "  - {name: n%d, url: %s, models: [qwen3-8b], max_concurrency: 100}\n", i, s.URL())
	}
	baseA, cmdA, logsA := startServe(t, cfg.String())
	baseB, _, logsB := startServe(t, cfg.String())
	lb, lbURL := newRRBalancer(t)
	a := lb.add(baseA)
	lb.add(baseB)
	testenv.Eventually(t, 3*time.Second, func() bool { return lb.ready() == 2 }, "replicas never ready")

	// 50 workers, each running streams back to back through the balancer.
	stop := make(chan struct{})
	res, wg := runLoad(func() string { return lbURL }, "", 50, true, stop)
	testenv.Eventually(t, 5*time.Second, func() bool { return a.sent.Load() >= 25 }, "no load on replica A")

	sentAtTerm := a.sent.Load()
	if err := cmdA.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// /readyz says 503 at once, while A still answers requests sent to it
	// directly during drain_delay.
	testenv.Eventually(t, 300*time.Millisecond, func() bool {
		resp, err := http.Get(baseA + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 503
	}, "/readyz did not turn 503 at once")
	if status, err := chat(baseA, "", false); status != 200 || err != nil {
		t.Fatalf("a request during drain_delay: %d %v", status, err)
	}
	waitA := make(chan error, 1)
	go func() { waitA <- cmdA.Wait() }()
	select {
	case err := <-waitA:
		if err != nil {
			t.Fatalf("replica A exit: %v\n%s", err, logsA.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("replica A did not exit")
	}
	for _, want := range []string{`"msg":"draining: /readyz answers 503, requests still served"`, `"msg":"shutting down`, `"msg":"stopped"`} {
		if !strings.Contains(logsA.String(), want) {
			t.Fatalf("replica A's log lacks %s:\n%s", want, logsA.String())
		}
	}
	lb.remove(a)
	t.Logf("replica A (%s) took %d requests before SIGTERM, %d in all; B is %s", baseA, sentAtTerm, a.sent.Load(), baseB)

	// Restarted (a new process, as a new pod), it joins and takes traffic.
	baseA2, _, _ := startServe(t, cfg.String())
	a2 := lb.add(baseA2)
	testenv.Eventually(t, 10*time.Second, func() bool { return a2.sent.Load() >= 10 }, "the restarted replica takes no traffic")

	close(stop)
	wg.Wait()
	t.Logf("through the balancer: %d streams, %d failed", res.total.Load(), res.failed.Load())
	if res.failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed, e.g. %s\nbalancer: %s\nreplica A's log:\n%s\nreplica B's log:\n%s", res.failed.Load(), res.total.Load(), res.firstErr, lb.errs.String(), logsA.String(), grepNot(logsB.String(), `"status":200`))
	}
}

// grepNot drops the lines that contain s.
func grepNot(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if !strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
