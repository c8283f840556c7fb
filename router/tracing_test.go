package router

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes the protobuf
// export requests that frontdoor's exporter posts to /v1/traces.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want a protobuf POST to /v1/traces", http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var ex coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &ex)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range ex.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					r.services = append(r.services, kv.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

// tree waits for the request span carrying requestID and for its children
// named in want, and returns the root and its children by name.
func (r *otlpReceiver) tree(t *testing.T, requestID string, want ...string) (*tracepb.Span, map[string][]*tracepb.Span) {
	t.Helper()
	var root *tracepb.Span
	var kids map[string][]*tracepb.Span
	testenv.Eventually(t, 10*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		root, kids = nil, map[string][]*tracepb.Span{}
		for _, s := range r.spans {
			if attr(s, "frontdoor.request_id") == requestID {
				root = s
			}
		}
		if root == nil {
			return false
		}
		for _, s := range r.spans {
			if bytes.Equal(s.ParentSpanId, root.SpanId) {
				kids[s.Name] = append(kids[s.Name], s)
			}
		}
		for _, w := range want {
			if len(kids[w]) == 0 {
				return false
			}
		}
		return true
	}, "no span tree %v for request %s", want, requestID)
	return root, kids
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return anyValue(kv.Value)
		}
	}
	return ""
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	}
	return v.String()
}

func tracingOn(t *testing.T, cfg *Config, r *otlpReceiver) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // the standard variable: export every 50 ms
	t.Setenv("OTEL_SERVICE_NAME", "frontdoor-test")
	cfg.Tracing.Enabled, cfg.Tracing.Endpoint = true, r.URL
}

// A request that failed on one node and was answered by the other: one
// request span, a child of the client's traceparent, with admission and
// one attempt span per node, and the node got the attempt's traceparent.
func TestTracingRetriedRequest(t *testing.T) {
	rcv := startOTLPReceiver(t)
	bad := testenv.GPUSim(t, func(c *sim.Config) { c.FailRate = 1 })
	good := testenv.GPUSim(t, nil)
	cfg := testConfig(bad, good)
	cfg.Balancer.Breaker.Failures = 1000 // keep the failing node in the rotation
	cfg.Balancer.Weights.Prefix = 0      // identical prompts would otherwise stick to the node that answered
	tracingOn(t, &cfg, rcv)
	gw := startGateway(t, cfg)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	var requestID, parent string
	for i := 0; i < 40 && requestID == ""; i++ {
		parent = fmt.Sprintf("00f067aa0ba9%04x", i)
		resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("hello", ""), "traceparent", "00-"+traceID+"-"+parent+"-01")
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		if resp.Header.Get("X-Upstream-Attempts") == "2" {
			requestID = resp.Header.Get("X-Request-Id")
		}
	}
	if requestID == "" {
		t.Fatal("no request was retried")
	}
	root, kids := rcv.tree(t, requestID, "admission", "admission tokens", "attempt gpu-a", "attempt gpu-b")
	if hex.EncodeToString(root.TraceId) != traceID || hex.EncodeToString(root.ParentSpanId) != parent {
		t.Fatalf("the request span is not a child of the client's traceparent: trace %x parent %x", root.TraceId, root.ParentSpanId)
	}
	if root.Name != "chat qwen3-8b" || root.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Fatalf("request span %q kind %v", root.Name, root.Kind)
	}
	for k, want := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.request.model": "qwen3-8b", "gen_ai.response.model": "qwen3-8b",
		"http.response.status_code": "200", "frontdoor.attempts": "2", "frontdoor.upstream": "gpu-b", "frontdoor.tenant": "default"} {
		if got := attr(root, k); got != want {
			t.Errorf("request span %s = %q, want %q", k, got, want)
		}
	}
	for _, k := range []string{"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} {
		if v := attr(root, k); v == "" || v == "0" {
			t.Errorf("request span %s = %q", k, v)
		}
	}
	failed, answered := kids["attempt gpu-a"][0], kids["attempt gpu-b"][0]
	if failed.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || attr(failed, "http.response.status_code") != "500" || attr(failed, "frontdoor.attempt") != "1" {
		t.Errorf("failed attempt: status %v, attrs %v", failed.Status, failed.Attributes)
	}
	if answered.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR || attr(answered, "http.response.status_code") != "200" || attr(answered, "frontdoor.attempt") != "2" ||
		answered.Kind != tracepb.Span_SPAN_KIND_CLIENT || answered.StartTimeUnixNano < failed.EndTimeUnixNano {
		t.Errorf("answered attempt: status %v, attrs %v", answered.Status, answered.Attributes)
	}
	if len(kids) != 4 {
		t.Errorf("children %v", keys(kids))
	}
	// The node saw the answered attempt's span as its parent.
	want := "00-" + traceID + "-" + hex.EncodeToString(answered.SpanId) + "-01"
	found := false
	for _, r := range good.Requests() {
		if r.Header["X-Request-Id"] == requestID {
			found = r.Header["Traceparent"] == want
			if !found {
				t.Errorf("the node got traceparent %q, want %q", r.Header["Traceparent"], want)
			}
		}
	}
	if !found {
		t.Error("the answering node never got the traceparent")
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.services) == 0 || rcv.services[0] != "frontdoor-test" {
		t.Errorf("service.name %v: OTEL_SERVICE_NAME must win", rcv.services)
	}
}

// A semantic hit: the exact lookup misses, the semantic one hits with its
// similarity, and no node is tried.
func TestTracingSemanticHit(t *testing.T) {
	rcv := startOTLPReceiver(t)
	gw, _ := cacheGateway(t, "memory", func(c *Config) {
		c.Cache.Semantic.Threshold = 0.6 // not a float32 exactly: the span still says 0.6
		tracingOn(t, c, rcv)
	})
	askStored(t, gw, cbody("What is the capital of France?", ""))
	resp, _ := eventuallyHit(t, gw, cbody("what is the capital of france", ""), "hit-semantic")
	root, kids := rcv.tree(t, resp.Header.Get("X-Request-Id"), "admission", "cache.lookup exact", "cache.lookup semantic")
	if attr(root, "frontdoor.cache") != "hit-semantic" || attr(root, "http.response.status_code") != "200" || attr(root, "frontdoor.attempts") != "0" {
		t.Errorf("request span attrs %v", root.Attributes)
	}
	if attr(kids["cache.lookup exact"][0], "frontdoor.cache.hit") != "false" {
		t.Errorf("exact lookup %v", kids["cache.lookup exact"][0].Attributes)
	}
	sem := kids["cache.lookup semantic"][0]
	sim := attr(sem, "frontdoor.cache.similarity")
	if attr(sem, "frontdoor.cache.hit") != "true" || num(sim) < 0.9 || len(sim) > len("0.12345678") || attr(sem, "frontdoor.cache.threshold") != "0.6" {
		t.Errorf("semantic lookup %v", sem.Attributes)
	}
	for name := range kids {
		if strings.HasPrefix(name, "attempt") || name == "spillover" || name == "admission tokens" {
			t.Errorf("a hit has a %q span", name)
		}
	}
	// The exporter's delivery shows in /status and the metrics. The
	// receiver has the spans before the exporter has its answer and counts
	// them: wait for the count.
	st := gatewayStatus(t, gw).Tracing
	for deadline := time.Now().Add(10 * time.Second); st != nil && st.Exported < 4 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		st = gatewayStatus(t, gw).Tracing
	}
	if st == nil || st.Endpoint != rcv.URL+"/v1/traces" || st.Exported < 4 || st.Dropped != 0 {
		t.Errorf("/status tracing %+v: want the receiver's URL and the spans above exported", st)
	}
	if m := metricsText(t, gw); !strings.Contains(m, "frontdoor_trace_spans_exported_total ") || !strings.Contains(m, `frontdoor_trace_spans_dropped_total{reason="export_failed"} 0`) ||
		!strings.Contains(m, `frontdoor_trace_spans_dropped_total{reason="queue_full"} 0`) {
		t.Errorf("no exporter counters in /metrics")
	}
}

// num is a numeric attribute's value; -1 when absent.
func num(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return -1
	}
	return f
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A stream's request span ends with the stream and carries its usage and
// the attempt's time to first token.
func TestTracingStream(t *testing.T) {
	rcv := startOTLPReceiver(t)
	s := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL, c.OutputTokens = 30*time.Millisecond, 5*time.Millisecond, 20 })
	cfg := testConfig(s)
	tracingOn(t, &cfg, rcv)
	gw := startGateway(t, cfg)
	resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("stream please", `"stream":true`))
	if resp.StatusCode != 200 || !strings.Contains(string(b), "[DONE]") {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	root, kids := rcv.tree(t, resp.Header.Get("X-Request-Id"), "attempt gpu-a")
	att := kids["attempt gpu-a"][0]
	if ttft := num(attr(att, "frontdoor.ttft_ms")); ttft < 30 {
		t.Errorf("attempt ttft_ms %v", ttft)
	}
	if attr(root, "gen_ai.usage.output_tokens") != "20" || attr(root, "frontdoor.stream") != "true" {
		t.Errorf("stream span attrs %v", root.Attributes)
	}
	// 20 tokens at 5 ms: the span covers the stream, not just the handler.
	if d := time.Duration(root.EndTimeUnixNano - root.StartTimeUnixNano); d < 30*time.Millisecond+19*5*time.Millisecond {
		t.Errorf("the stream's span lasted %v", d)
	}
}

// A request whose only node fails spills over: the failed attempt, then a
// spillover span.
func TestTracingSpillover(t *testing.T) {
	rcv := startOTLPReceiver(t)
	bad := testenv.GPUSim(t, func(c *sim.Config) { c.FailRate = 1 })
	cfg := testConfig(bad)
	cfg.Balancer.Retries = 0
	spillConfig(t, &cfg, dashSim(t, nil))
	tracingOn(t, &cfg, rcv)
	gw := startGateway(t, cfg)
	resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("spill me", ""))
	if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "spillover:dashscope" {
		t.Fatalf("status %d, X-Upstream %q: %s", resp.StatusCode, resp.Header.Get("X-Upstream"), b)
	}
	root, kids := rcv.tree(t, resp.Header.Get("X-Request-Id"), "attempt gpu-a", "spillover")
	sp := kids["spillover"][0]
	if attr(sp, "frontdoor.node") != "spillover:dashscope" || attr(sp, "http.response.status_code") != "200" || sp.Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("spillover span %v", sp.Attributes)
	}
	if attr(root, "frontdoor.upstream") != "spillover:dashscope" || attr(root, "frontdoor.attempts") != "2" {
		t.Errorf("request span %v", root.Attributes)
	}
}
