package gpusim

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestQueueMetrics runs 15 slow streams against MaxNumSeqs 10 and checks
// each kind's metrics report 10 running and 5 waiting, then that client
// disconnects drain both.
func TestQueueMetrics(t *testing.T) {
	const prompt = "count the running requests"
	pt := float64(PromptTokens(prompt))
	cases := []struct {
		kind                    Kind
		running, waiting, inUse string
		inUseWant               float64
	}{
		{KindVLLM, "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", 10 * pt / 1000},
		{KindTGI, "tgi_batch_current_size", "tgi_queue_size", "tgi_batch_current_max_tokens", 10 * pt},
		{KindSGLang, "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", 10 * pt / 1000},
		{KindDashScope, "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", 10 * pt / 1000},
	}
	for _, tc := range cases {
		t.Run(string(tc.kind), func(t *testing.T) {
			t.Parallel()
			s := startServer(t, func(c *Config) {
				c.Kind = tc.kind
				c.MaxNumSeqs = 10
				c.TTFT = time.Minute // requests hold their slot until the client leaves
				c.KVCapacityTokens = 1000
			})
			c := newClient(t)
			body := fmt.Sprintf(`{"model":"qwen3-8b","stream":true,"messages":[{"role":"user","content":%q}]}`, prompt)
			var cancels []func()
			for range 15 {
				resp, cancel := openStream(t, c, s.URL()+"/v1/chat/completions", body)
				if resp.StatusCode != 200 {
					t.Fatalf("stream status %d", resp.StatusCode)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
					t.Fatalf("stream content type %q", ct)
				}
				cancels = append(cancels, cancel)
			}
			var m map[string]float64
			var types map[string]string
			// A request is counted running a moment before its KV is: the
			// scrape that shows 10 running may show 9 requests' memory.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				m, types = scrape(t, c, s)
				if m[tc.running] == 10 && m[tc.waiting] == 5 && m[tc.inUse] == tc.inUseWant {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("/metrics: running %v, waiting %v, %s %v; want 10, 5, %v", m[tc.running], m[tc.waiting], tc.inUse, m[tc.inUse], tc.inUseWant)
				}
			}
			if typ := types[tc.running]; typ != "GAUGE" {
				t.Errorf("%s type %v", tc.running, typ)
			}
			if st := s.Stats(); st.Running != 10 || st.Waiting != 5 || st.MaxRunning != 10 || st.Received != 15 {
				t.Errorf("Stats = %+v, want running 10 waiting 5", st)
			}

			for _, cancel := range cancels {
				cancel()
			}
			eventually(t, 2*time.Second, "queue drained after disconnects", func() bool {
				st := s.Stats()
				return st.Running == 0 && st.Waiting == 0 && st.Cancelled == 15
			})
			m, _ = scrape(t, c, s)
			if m[tc.running] != 0 || m[tc.waiting] != 0 || m[tc.inUse] != 0 {
				t.Errorf("after drain: running %v waiting %v %s %v", m[tc.running], m[tc.waiting], tc.inUse, m[tc.inUse])
			}
		})
	}
}

// TestMetricsCounters checks the vLLM counters and histograms move with
// completed requests and that every kind's exposition has its full set.
func TestMetricsCounters(t *testing.T) {
	s := startServer(t, func(c *Config) { c.OutputTokens = 7 })
	c := newClient(t)
	const body = `{"model":"qwen3-8b","messages":[{"role":"user","content":"abcdefgh"}]}` // 2 prompt tokens
	for range 3 {
		if r := post(t, c, s.URL()+"/v1/chat/completions", body); r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
	}
	m, types := scrape(t, c, s)
	want := map[string]float64{
		"vllm:prompt_tokens_total":               6,
		"vllm:generation_tokens_total":           21,
		"vllm:time_to_first_token_seconds_count": 3,
		"vllm:e2e_request_latency_seconds_count": 3,
		"vllm:num_requests_running":              0,
		"vllm:kv_cache_usage_perc":               0,
	}
	for k, v := range want {
		got, ok := m[k]
		if !ok {
			t.Errorf("%s missing", k)
		} else if got != v {
			t.Errorf("%s = %v, want %v", k, got, v)
		}
	}
	if typ := types["vllm:e2e_request_latency_seconds"]; typ != "HISTOGRAM" {
		t.Errorf("e2e type %v", typ)
	}
	if typ := types["vllm:prompt_tokens_total"]; typ != "COUNTER" {
		t.Errorf("prompt_tokens_total type %v", typ)
	}

	sets := map[Kind][]string{
		KindTGI: {"tgi_queue_size", "tgi_batch_current_size", "tgi_batch_current_max_tokens",
			"tgi_batch_max_total_tokens", "tgi_request_duration_count"},
		KindSGLang: {"sglang:num_queue_reqs", "sglang:num_running_reqs", "sglang:token_usage"},
	}
	for kind, names := range sets {
		ks := startServer(t, func(c *Config) { c.Kind = kind; c.KVCapacityTokens = 4096 })
		km, _ := scrape(t, c, ks)
		for _, n := range names {
			if _, ok := km[n]; !ok {
				t.Errorf("%s: %s missing", kind, n)
			}
		}
		if kind == KindTGI && km["tgi_batch_max_total_tokens"] != 4096 {
			t.Errorf("tgi_batch_max_total_tokens = %v", km["tgi_batch_max_total_tokens"])
		}
	}

	if r := doReq(t, c, http.MethodPost, s.URL()+"/metrics", "", nil); r.status != 405 {
		t.Errorf("POST /metrics: %d", r.status)
	}
}
