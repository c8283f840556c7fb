package gpusim

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestClientDisconnectMidStream(t *testing.T) {
	s := startServer(t, func(c *Config) {
		c.ITL = 200 * time.Millisecond
		c.OutputTokens = 50 // 10s if nobody stops it
	})
	c := newClient(t)
	resp, cancel := openStream(t, c, s.URL()+"/v1/chat/completions",
		`{"stream":true,"messages":[{"role":"user","content":"long answer"}]}`)
	br := bufio.NewReader(resp.Body)
	for events := 0; events < 3; { // role chunk + two tokens
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			events++
		}
	}
	if st := s.Stats(); st.Running != 1 {
		t.Fatalf("Running = %d mid-stream", st.Running)
	}
	closed := time.Now()
	cancel()
	eventually(t, time.Second, "cancelled stream frees its slot", func() bool {
		st := s.Stats()
		return st.Cancelled == 1 && st.Running == 0
	})
	// Noticed within one ITL, not at the next failed write.
	if d := time.Since(closed); d > 200*time.Millisecond {
		t.Errorf("disconnect noticed after %v, want within one ITL (200ms)", d)
	}
	m, _ := scrape(t, c, s)
	if m["vllm:kv_cache_usage_perc"] != 0 || m["vllm:e2e_request_latency_seconds_count"] != 0 {
		t.Errorf("cancelled stream left metrics: %v", m)
	}
	if st := s.Stats(); st.Completed != 0 {
		t.Errorf("Stats %+v", st)
	}
}

func TestClientDisconnectNonStreamingAndQueued(t *testing.T) {
	s := startServer(t, func(c *Config) {
		c.MaxNumSeqs = 1
		c.TTFT = time.Minute
	})
	c := newClient(t)
	url := s.URL() + "/v1/chat/completions"
	// One non-streaming request runs, one waits; both clients give up.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url,
				strings.NewReader(`{"messages":[{"role":"user","content":"x"}]}`))
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
				t.Errorf("request answered with %d, want client cancellation", resp.StatusCode)
			}
		})
	}
	eventually(t, 2*time.Second, "1 running, 1 waiting", func() bool {
		st := s.Stats()
		return st.Running == 1 && st.Waiting == 1
	})
	cancel()
	wg.Wait()
	eventually(t, time.Second, "both requests cancelled", func() bool {
		st := s.Stats()
		return st.Cancelled == 2 && st.Running == 0 && st.Waiting == 0
	})
}

// TestFIFO checks waiting requests get slots in arrival order and a
// cancelled waiter leaves the queue.
func TestFIFO(t *testing.T) {
	sc := newScheduler(1, 0)
	first, _ := sc.enqueue()
	if !first.granted {
		t.Fatal("first request should run at once")
	}
	a, _ := sc.enqueue()
	b, _ := sc.enqueue()
	cq, _ := sc.enqueue()
	if sc.waiting.Load() != 3 || sc.running.Load() != 1 {
		t.Fatalf("waiting %d running %d", sc.waiting.Load(), sc.running.Load())
	}
	sc.cancel(b)
	sc.release() // first done -> a
	if !isClosed(a.ready) || isClosed(cq.ready) {
		t.Fatal("slot did not go to the oldest waiter")
	}
	sc.release() // a done -> c (b left)
	if !isClosed(cq.ready) || sc.waiting.Load() != 0 || sc.running.Load() != 1 {
		t.Fatal("slot did not go to c")
	}
	sc.cancel(cq) // granted: gives the slot back
	if sc.running.Load() != 0 || sc.highWater.Load() != 1 {
		t.Fatalf("running %d high water %d", sc.running.Load(), sc.highWater.Load())
	}
	full := newScheduler(1, 1)
	full.enqueue()
	if _, ok := full.enqueue(); !ok {
		t.Fatal("one waiter should fit")
	}
	if _, ok := full.enqueue(); ok {
		t.Fatal("second waiter should be refused")
	}
}

func TestFaultsHealthAndRecording(t *testing.T) {
	s := startServer(t, func(c *Config) { c.FailRate = 1; c.OutputTokens = 3 })
	c := newClient(t)
	url := s.URL() + "/v1/chat/completions"
	body := `{"model":"qwen3-8b","messages":[{"role":"user","content":"fail?"}]}`
	r := doReq(t, c, "POST", url, body, map[string]string{"Authorization": "Bearer abc", "X-Trace": "t1"})
	if e := decode[map[string]any](t, r.body); r.status != 500 || e["type"] != "InternalServerError" || e["code"] != float64(500) {
		t.Errorf("fail_rate 1: %d %s", r.status, r.body)
	}
	rs := readStreamStatus(t, c, url, `{"stream":true,"messages":[]}`)
	if rs != 500 {
		t.Errorf("streaming with fail_rate 1: %d", rs)
	}
	s.SetFailRate(0)
	if r := post(t, c, url, body); r.status != 200 {
		t.Errorf("after SetFailRate(0): %d %s", r.status, r.body)
	}
	if st := s.Stats(); st.Failed != 2 || st.Completed != 1 {
		t.Errorf("Stats %+v", st)
	}

	if r := doReq(t, c, "GET", s.URL()+"/health", "", nil); r.status != 200 {
		t.Errorf("/health: %d", r.status)
	}
	s.SetHealthy(false)
	if r := doReq(t, c, "GET", s.URL()+"/health", "", nil); r.status != 503 {
		t.Errorf("/health unhealthy: %d", r.status)
	}
	s.SetHealthy(true)
	if r := doReq(t, c, "GET", s.URL()+"/health", "", nil); r.status != 200 {
		t.Errorf("/health healthy again: %d", r.status)
	}

	recs := s.Requests()
	if len(recs) != 3 { // /health and /metrics are not recorded
		t.Fatalf("%d recorded requests, want 3", len(recs))
	}
	r0 := recs[0]
	if r0.Path != "/v1/chat/completions" || r0.Authorization != "Bearer abc" || string(r0.Body) != body ||
		r0.Header["X-Trace"] != "t1" || r0.Header["Content-Type"] != "application/json" || r0.At.IsZero() {
		t.Errorf("recorded %+v", r0)
	}
	if recs[1].Authorization != "" || string(recs[1].Body) != `{"stream":true,"messages":[]}` {
		t.Errorf("second record %+v", recs[1])
	}
	s.ResetRecorded()
	if n := len(s.Requests()); n != 0 {
		t.Errorf("%d records after reset", n)
	}
	// The ring keeps the last 256.
	for i := range recordCap + 10 {
		doReq(t, c, "GET", s.URL()+"/v1/unknown", "", map[string]string{"X-N": strings.Repeat("n", i%3+1)})
	}
	if recs := s.Requests(); len(recs) != recordCap || recs[len(recs)-1].Header["X-N"] != strings.Repeat("n", (recordCap+9)%3+1) {
		t.Errorf("ring: %d records", len(recs))
	}
}

func readStreamStatus(t *testing.T, c *http.Client, url, body string) int {
	t.Helper()
	resp, cancel := openStream(t, c, url, body)
	defer cancel()
	return resp.StatusCode
}

func TestShutdownEndsHangingRequests(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.HangRate = 1
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	url := s.URL() + "/v1/chat/completions"

	unary := make(chan int, 1)
	go func() {
		resp, err := c.Post(url, "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"hang"}]}`))
		if err != nil {
			unary <- -1
			return
		}
		resp.Body.Close()
		unary <- resp.StatusCode
	}()
	resp, err := c.Post(url, "application/json", strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"hang"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	streamed := make(chan []string, 1)
	go func() {
		defer resp.Body.Close()
		var lines []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		streamed <- lines
	}()
	eventually(t, 2*time.Second, "two hanging requests running", func() bool { return s.Stats().Running == 2 })
	time.Sleep(100 * time.Millisecond)
	if st := s.Stats(); st.Completed != 0 || st.Running != 2 {
		t.Fatalf("hanging requests answered: %+v", st)
	}

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Shutdown took %v", d)
	}
	if code := <-unary; code != 503 {
		t.Errorf("hanging non-streaming request got %d, want 503", code)
	}
	if lines := <-streamed; len(lines) != 0 {
		t.Errorf("hanging stream got data: %q", lines)
	}
	if st := s.Stats(); st.Cancelled != 2 || st.Running != 0 {
		t.Errorf("Stats %+v", st)
	}
	if _, err := c.Get(s.URL() + "/health"); err == nil {
		t.Error("server still answers after Shutdown")
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	// Nothing of the server outlives Shutdown (fasthttp's worker-pool
	// janitor takes up to MaxIdleWorkerDuration to notice).
	tr.CloseIdleConnections()
	var left []string
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if left = serverGoroutines(); len(left) == 0 {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("goroutines left after Shutdown:\n%s", strings.Join(left, "\n\n"))
	}
}

// serverGoroutines returns the stacks of running goroutines that belong to a
// gpusim server: fasthttp's (except its process-wide date ticker) and ours.
func serverGoroutines() []string {
	buf := make([]byte, 1<<20)
	var out []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "updateServerDate") {
			continue
		}
		ours := strings.Contains(g, "internal/gpusim.") && !strings.Contains(g, "_test.go")
		if ours || strings.Contains(g, "valyala/fasthttp") {
			out = append(out, g)
		}
	}
	return out
}

// TestShutdownWaitsForInFlight checks a graceful Shutdown lets a running
// stream finish, and that an expired context aborts what is left.
func TestShutdownWaitsForInFlight(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.TTFT, cfg.ITL, cfg.OutputTokens = 0, 20*time.Millisecond, 10
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t)
	// The whole stream fits in socket buffers, so it can finish unread.
	resp, cancelStream := openStream(t, c, s.URL()+"/v1/chat/completions",
		`{"stream":true,"messages":[{"role":"user","content":"finish me"}]}`)
	defer cancelStream()
	eventually(t, 2*time.Second, "stream running", func() bool { return s.Stats().Running == 1 })
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if res := parseStream(t, resp); !res.done || res.text != ExpectedText("finish me", 10) {
		t.Errorf("in-flight stream cut by graceful Shutdown: %+v", res)
	}

	cfg.TTFT = time.Minute
	s2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		resp, err := c.Post(s2.URL()+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"messages":[{"role":"user","content":"slow"}]}`))
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	eventually(t, 2*time.Second, "request running", func() bool { return s2.Stats().Running == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s2.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with expired ctx: %v", err)
	}
	if code := <-done; code != 503 {
		t.Errorf("aborted request got %d", code)
	}
	if st := s2.Stats(); st.Running != 0 || st.Cancelled != 1 {
		t.Errorf("Stats %+v", st)
	}
	if n := s2.openConns(); n != 0 {
		t.Errorf("%d connections open after aborted Shutdown", n)
	}
}
