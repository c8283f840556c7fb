package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"
)

func strV(s string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
}
func intV(n int64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: n}}
}
func boolV(b bool) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: b}}
}
func dblV(f float64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: f}}
}
func arrV(vs ...*commonpb.AnyValue) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}
}
func kv(k string, v *commonpb.AnyValue) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: v}
}

// TestOTLPEncodingRoundTrips holds the hand-written encoder to the
// generated protobuf types: every field frontdoor's spans can carry, written
// by the encoder and read back by proto.Unmarshal, equals the message built
// directly from the OTLP types.
func TestOTLPEncodingRoundTrips(t *testing.T) {
	long := strings.Repeat("x", 300)    // a length of two varint bytes
	huge := strings.Repeat("y", 70_000) // three
	tid := trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	ts, _ := trace.ParseTraceState("vendor=a1,other=b2")
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{9, 9, 9, 9, 9, 9, 9, 9}, TraceFlags: trace.FlagsSampled, Remote: true})
	link := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{8}, TraceState: ts})
	res := resource.NewSchemaless(attribute.String("service.name", "frontdoor"), attribute.Int("replica", 2))
	scope := instrumentation.Scope{Name: "frontdoor/router", Version: "1.2.3", SchemaURL: "https://example.com/schema",
		Attributes: attribute.NewSet(attribute.Bool("scoped", true))}
	start := time.Unix(1_800_000_000, 123)
	stubs := tracetest.SpanStubs{
		{
			Name: "POST /v1/chat/completions", SpanKind: trace.SpanKindServer,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, TraceState: ts}),
			Parent:      parent, StartTime: start, EndTime: start.Add(1500 * time.Millisecond),
			Attributes: []attribute.KeyValue{
				attribute.String("s", "v"), attribute.String("empty", ""), attribute.String("long", long), attribute.String("huge", huge),
				attribute.Int64("i", -42), attribute.Int64("zero", 0), attribute.Bool("f", false), attribute.Float64("d", 0.25),
				attribute.StringSlice("ss", []string{"a", ""}), attribute.Int64Slice("is", []int64{1, -1}),
				attribute.BoolSlice("bs", []bool{true}), attribute.Float64Slice("ds", []float64{1.5}),
			},
			Events:            []sdktrace.Event{{Name: "first_token", Time: start.Add(time.Second), Attributes: []attribute.KeyValue{attribute.Int("n", 1)}, DroppedAttributeCount: 3}},
			Links:             []sdktrace.Link{{SpanContext: link, Attributes: []attribute.KeyValue{attribute.String("why", "retry")}, DroppedAttributeCount: 1}},
			Status:            sdktrace.Status{Code: codes.Error, Description: "upstream 503"},
			DroppedAttributes: 4, DroppedEvents: 5, DroppedLinks: 6,
			Resource: res, InstrumentationScope: scope,
		},
		{ // a root span of another scope: no parent, status unset
			Name: "warm", SpanKind: trace.SpanKindInternal,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{2}, SpanID: trace.SpanID{2}}),
			StartTime:   start, EndTime: start, Resource: res, InstrumentationScope: instrumentation.Scope{Name: "frontdoor/warm"},
		},
		{ // the first scope again, after the other: grouped with its kind
			Name: "node", SpanKind: trace.SpanKindClient,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{3}, TraceFlags: trace.FlagsSampled}),
			Parent:      trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}),
			StartTime:   start, EndTime: start.Add(time.Millisecond), Status: sdktrace.Status{Code: codes.Ok},
			Resource: res, InstrumentationScope: scope,
		},
	}
	got := &coltracepb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(encodeTraces(nil, stubs.Snapshots()), got); err != nil {
		t.Fatalf("the encoding does not decode: %v", err)
	}

	nano := func(tm time.Time) uint64 { return uint64(tm.UnixNano()) }
	want := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("replica", intV(2)), kv("service.name", strV("frontdoor"))}},
		ScopeSpans: []*tracepb.ScopeSpans{
			{
				Scope: &commonpb.InstrumentationScope{Name: "frontdoor/router", Version: "1.2.3",
					Attributes: []*commonpb.KeyValue{kv("scoped", boolV(true))}},
				SchemaUrl: "https://example.com/schema",
				Spans: []*tracepb.Span{
					{
						TraceId: tid[:], SpanId: []byte{1, 0, 0, 0, 0, 0, 0, 0}, TraceState: "vendor=a1,other=b2",
						ParentSpanId: []byte{9, 9, 9, 9, 9, 9, 9, 9}, Name: "POST /v1/chat/completions",
						Kind: tracepb.Span_SPAN_KIND_SERVER, StartTimeUnixNano: nano(start), EndTimeUnixNano: nano(start.Add(1500 * time.Millisecond)),
						Attributes: []*commonpb.KeyValue{
							kv("s", strV("v")), kv("empty", strV("")), kv("long", strV(long)), kv("huge", strV(huge)),
							kv("i", intV(-42)), kv("zero", intV(0)), kv("f", boolV(false)), kv("d", dblV(0.25)),
							kv("ss", arrV(strV("a"), strV(""))), kv("is", arrV(intV(1), intV(-1))),
							kv("bs", arrV(boolV(true))), kv("ds", arrV(dblV(1.5))),
						},
						DroppedAttributesCount: 4,
						Events: []*tracepb.Span_Event{{TimeUnixNano: nano(start.Add(time.Second)), Name: "first_token",
							Attributes: []*commonpb.KeyValue{kv("n", intV(1))}, DroppedAttributesCount: 3}},
						DroppedEventsCount: 5,
						Links: []*tracepb.Span_Link{{TraceId: []byte{7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, SpanId: []byte{8, 0, 0, 0, 0, 0, 0, 0},
							TraceState: "vendor=a1,other=b2", Attributes: []*commonpb.KeyValue{kv("why", strV("retry"))}, DroppedAttributesCount: 1,
							Flags: 0x100}},
						DroppedLinksCount: 6,
						Status:            &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "upstream 503"},
						Flags:             0x01 | 0x100 | 0x200, // sampled, the parent's remoteness known, and remote
					},
					{
						TraceId: tid[:], SpanId: []byte{3, 0, 0, 0, 0, 0, 0, 0}, ParentSpanId: []byte{1, 0, 0, 0, 0, 0, 0, 0}, Name: "node",
						Kind: tracepb.Span_SPAN_KIND_CLIENT, StartTimeUnixNano: nano(start), EndTimeUnixNano: nano(start.Add(time.Millisecond)),
						Status: &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}, Flags: 0x01 | 0x100,
					},
				},
			},
			{
				Scope: &commonpb.InstrumentationScope{Name: "frontdoor/warm"},
				Spans: []*tracepb.Span{{TraceId: []byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, SpanId: []byte{2, 0, 0, 0, 0, 0, 0, 0}, Name: "warm",
					Kind: tracepb.Span_SPAN_KIND_INTERNAL, StartTimeUnixNano: nano(start), EndTimeUnixNano: nano(start), Flags: 0x100}},
			},
		},
	}}}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Fatalf("decoded export request differs (-want +got):\n%s", d)
	}
}

// TestOTLPEncodingOfNestedValues covers the attribute kinds the SDK's
// typed setters don't make: bytes, nested slices and maps, and empty.
func TestOTLPEncodingOfNestedValues(t *testing.T) {
	v := attribute.SliceValue(attribute.StringValue("a"), attribute.MapValue(attribute.Int("n", 3), attribute.Bool("b", false)))
	stub := tracetest.SpanStub{Name: "n", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}),
		Attributes: []attribute.KeyValue{attribute.ByteSlice("raw", []byte{0, 1, 2}), {Key: "nested", Value: v}, {Key: "none", Value: attribute.Value{}}},
		Resource:   resource.Empty()}
	got := &coltracepb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(encodeTraces(nil, tracetest.SpanStubs{stub}.Snapshots()), got); err != nil {
		t.Fatal(err)
	}
	attrs := got.GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()[0].GetAttributes()
	want := []*commonpb.KeyValue{
		kv("raw", &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0, 1, 2}}}),
		kv("nested", arrV(strV("a"), &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{
			Values: []*commonpb.KeyValue{kv("b", boolV(false)), kv("n", intV(3))}}}})), // a map is a set: sorted
		kv("none", &commonpb.AnyValue{}),
	}
	if d := cmp.Diff(want, attrs, protocmp.Transform()); d != "" {
		t.Fatalf("attributes differ (-want +got):\n%s", d)
	}
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestOTLPTargetFromConfigAndEnvironment(t *testing.T) {
	on := TracingConfig{Enabled: true, SampleRatio: 1}
	withEndpoint := on
	withEndpoint.Endpoint = "http://collector:4318"
	for _, c := range []struct {
		name string
		cfg  TracingConfig
		env  map[string]string
		url  string
	}{
		{"default", on, nil, "http://localhost:4318/v1/traces"},
		{"config wins", withEndpoint, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://other:1/x"}, "http://collector:4318/v1/traces"},
		{"the signal's URL as given", on, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://otlp.example.com/api/traces", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:4318"}, "https://otlp.example.com/api/traces"},
		{"a base URL gets the path", on, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:4318/otlp/"}, "http://b:4318/otlp/v1/traces"},
	} {
		tg, err := resolveOTLP(c.cfg, envOf(c.env))
		if err != nil || tg.url != c.url || tg.timeout != defaultOTLPTimeout || tg.gzip {
			t.Errorf("%s: %+v, %v; want %s", c.name, tg, err, c.url)
		}
	}

	tg, err := resolveOTLP(on, envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_HEADERS":        "api-key=general%20one, x-tenant = t1",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "API-Key=signal",
		"OTEL_EXPORTER_OTLP_TIMEOUT":        "2500",
		"OTEL_EXPORTER_OTLP_COMPRESSION":    "gzip",
		"OTEL_EXPORTER_OTLP_PROTOCOL":       "http/protobuf",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if want := [][2]string{{"api-key", "signal"}, {"x-tenant", "t1"}}; !cmp.Equal(tg.headers, want) || tg.timeout != 2500*time.Millisecond || !tg.gzip {
		t.Errorf("headers %v (want %v), timeout %v, gzip %v", tg.headers, want, tg.timeout, tg.gzip)
	}

	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://x/"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "api-key"}, "OTEL_EXPORTER_OTLP_HEADERS: pair 1"},
		{map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=1,api-key=s3cret%zz"}, `the value of "api-key"`},
		{map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "10s"}, "OTEL_EXPORTER_OTLP_TIMEOUT"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "zstd"}, "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"},
		{map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"}, "OTEL_EXPORTER_OTLP_CERTIFICATE"},
		{map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "/c.pem"}, "set both or neither"},
	} {
		_, err := resolveOTLP(on, envOf(c.env))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %q", c.env, err, c.want)
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error shows a header's value: %v", err)
		}
	}
}

// TestTracingValidateReadsTheEnvironment: check-config and serve share
// Validate, so a variable serve can't use fails both.
func TestTracingValidateReadsTheEnvironment(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	off := TracingConfig{SampleRatio: 1}
	if err := off.Validate(); err != nil {
		t.Errorf("tracing off: the variables don't matter, got %v", err)
	}
	on := TracingConfig{Enabled: true, SampleRatio: 1}
	if err := on.Validate(); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") {
		t.Errorf("tracing on with protocol grpc: %v", err)
	}
}

type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int // answers to give, in order; then 200
	calls    atomic.Int32
	got      []*coltracepb.ExportTraceServiceRequest
	headers  []http.Header
}

func startReceiver(t *testing.T, statuses ...int) *receiver {
	r := &receiver{statuses: statuses}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.calls.Add(1)
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.statuses) > 0 {
			code := r.statuses[0]
			r.statuses = r.statuses[1:]
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(code)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				w.WriteHeader(400)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		ex := &coltracepb.ExportTraceServiceRequest{}
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(b, ex) != nil {
			w.WriteHeader(400)
			return
		}
		r.got = append(r.got, ex)
		r.headers = append(r.headers, req.Header.Clone())
	}))
	t.Cleanup(r.Close)
	return r
}

func oneSpan(name string) []sdktrace.ReadOnlySpan {
	return tracetest.SpanStubs{{Name: name, SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}),
		Resource: resource.Empty()}}.Snapshots()
}

// TestOTLPExporterRetriesWhatIsTemporary: a 503 with Retry-After is tried
// again; the batch arrives gzipped with the configured headers and counts
// as exported.
func TestOTLPExporterRetriesWhatIsTemporary(t *testing.T) {
	r := startReceiver(t, http.StatusServiceUnavailable)
	tg, err := resolveOTLP(TracingConfig{Enabled: true, Endpoint: r.URL}, envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_HEADERS": "api-key=s3cret-key", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}))
	if err != nil {
		t.Fatal(err)
	}
	set := metrics.NewSet()
	var logs bytes.Buffer
	e := newOTLPExporter(tg, slog.New(slog.NewJSONHandler(&logs, nil)), set)
	if err := e.ExportSpans(context.Background(), oneSpan("retried")); err != nil {
		t.Fatal(err)
	}
	if r.calls.Load() != 2 || len(r.got) != 1 || r.got[0].ResourceSpans[0].ScopeSpans[0].Spans[0].Name != "retried" {
		t.Fatalf("%d calls, %d batches received; want the 503 and then the batch", r.calls.Load(), len(r.got))
	}
	if h := r.headers[0]; h.Get("Api-Key") != "s3cret-key" || h.Get("Content-Encoding") != "gzip" || !strings.HasPrefix(h.Get("User-Agent"), "frontdoor/") {
		t.Errorf("headers %v", h)
	}
	if st := e.status(); st.Exported != 1 || st.Dropped != 0 || st.LastError != "" {
		t.Errorf("status %+v", st)
	}
	if logs.Len() != 0 {
		t.Errorf("a delivered batch wrote %s", logs.String())
	}
}

// TestOTLPExporterDropsLoudly: a batch the receiver refuses, or can't take
// within the timeout, is dropped and shows in the metric, /status and one
// WARN line, which names neither a header's value nor the spans.
func TestOTLPExporterDropsLoudly(t *testing.T) {
	r := startReceiver(t, http.StatusBadRequest, http.StatusBadRequest)
	tg, err := resolveOTLP(TracingConfig{Enabled: true, Endpoint: r.URL}, envOf(map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "api-key=s3cret-key"}))
	if err != nil {
		t.Fatal(err)
	}
	set := metrics.NewSet()
	var logs bytes.Buffer
	e := newOTLPExporter(tg, slog.New(slog.NewJSONHandler(&logs, nil)), set)
	for range 2 {
		_ = e.ExportSpans(context.Background(), oneSpan("refused"))
	}
	if r.calls.Load() != 2 {
		t.Errorf("a 400 was retried: %d calls for 2 batches", r.calls.Load())
	}
	st := e.status()
	if st.Dropped != 2 || st.Exported != 0 || !strings.Contains(st.LastError, "400") || st.LastErrorAt.IsZero() {
		t.Errorf("status %+v", st)
	}
	var out bytes.Buffer
	WriteMetrics(&out, set)
	if !strings.Contains(out.String(), `frontdoor_trace_spans_dropped_total{reason="export_failed"} 2`) {
		t.Errorf("metrics:\n%s", out.String())
	}
	if n := strings.Count(logs.String(), "trace export failed"); n != 1 {
		t.Errorf("%d WARN lines for two drops within a minute, want 1:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "s3cret") || strings.Contains(logs.String(), "refused") {
		t.Errorf("the log shows a header's value or a span: %s", logs.String())
	}

	// A receiver that keeps answering 503 is tried until the timeout leaves
	// no room for the next wait, then the batch is dropped.
	busy := startReceiver(t, 503, 503, 503, 503, 503, 503)
	tg.url, tg.timeout = busy.URL+"/v1/traces", 1500*time.Millisecond
	e = newOTLPExporter(tg, slog.New(slog.NewJSONHandler(io.Discard, nil)), metrics.NewSet())
	begin := time.Now()
	_ = e.ExportSpans(context.Background(), oneSpan("late"))
	if took := time.Since(begin); took > 5*time.Second || e.status().Dropped != 1 || busy.calls.Load() < 2 {
		t.Errorf("took %v, %d calls, status %+v; want a retry, then a drop within the timeout", took, busy.calls.Load(), e.status())
	}
}

// TestBatchSettingsFromEnvironment: the OTEL_BSP_* variables set the batch
// queue, and one that can't be used is an error naming it.
func TestBatchSettingsFromEnvironment(t *testing.T) {
	b, err := resolveBatch(envOf(nil))
	if err != nil || b != (batchSettings{delay: 5 * time.Second, timeout: 30 * time.Second, queue: 2048, batch: 512}) {
		t.Errorf("defaults %+v, %v", b, err)
	}
	b, err = resolveBatch(envOf(map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_BSP_EXPORT_TIMEOUT": "2000",
		"OTEL_BSP_MAX_QUEUE_SIZE": "64", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "8"}))
	if err != nil || b != (batchSettings{delay: 50 * time.Millisecond, timeout: 2 * time.Second, queue: 64, batch: 8}) {
		t.Errorf("set %+v, %v", b, err)
	}
	for env, want := range map[string]string{
		"OTEL_BSP_SCHEDULE_DELAY=5s":                                     "OTEL_BSP_SCHEDULE_DELAY",
		"OTEL_BSP_MAX_QUEUE_SIZE=0":                                      "OTEL_BSP_MAX_QUEUE_SIZE",
		"OTEL_BSP_EXPORT_TIMEOUT=-1":                                     "OTEL_BSP_EXPORT_TIMEOUT",
		"OTEL_BSP_MAX_EXPORT_BATCH_SIZE=4096":                            "more than OTEL_BSP_MAX_QUEUE_SIZE",
		"OTEL_BSP_MAX_QUEUE_SIZE=10,OTEL_BSP_MAX_EXPORT_BATCH_SIZE=many": "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
	} {
		m := map[string]string{}
		for _, kv := range strings.Split(env, ",") {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		if _, err := resolveBatch(envOf(m)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one naming %q", env, err, want)
		}
	}
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "none")
	if err := (&TracingConfig{Enabled: true, SampleRatio: 1}).Validate(); err == nil || !strings.Contains(err.Error(), "OTEL_BSP_MAX_QUEUE_SIZE") {
		t.Errorf("Validate with a bad OTEL_BSP_MAX_QUEUE_SIZE: %v", err)
	}
}

// TestSpanQueueDropsLoudlyWhenFull: while the receiver holds the first
// batch, spans past the queue's size are dropped and counted in the
// metric, /status and one WARN line; every span is either delivered or
// counted, and a sampled-out span is neither.
func TestSpanQueueDropsLoudlyWhenFull(t *testing.T) {
	release := make(chan struct{})
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		<-release
		b, _ := io.ReadAll(req.Body)
		ex := &coltracepb.ExportTraceServiceRequest{}
		if proto.Unmarshal(b, ex) == nil {
			for _, rs := range ex.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					got.Add(int64(len(ss.Spans)))
				}
			}
		}
	}))
	defer srv.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	tg, err := resolveOTLP(TracingConfig{Enabled: true, Endpoint: srv.URL}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	set := metrics.NewSet()
	var logs bytes.Buffer
	exp := newOTLPExporter(tg, slog.New(slog.NewJSONHandler(&logs, nil)), set)
	q := newSpanQueue(exp, batchSettings{delay: time.Hour, timeout: 10 * time.Second, queue: 4, batch: 1})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q))
	tr := tp.Tracer("test")
	const n = 20
	for i := range n {
		_, s := tr.Start(context.Background(), fmt.Sprint("span ", i))
		s.End()
	}
	// A span sampled out never reaches the queue.
	_, s := tr.Start(trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}})), "unsampled")
	s.End()
	// At most the batch being exported and a full queue wait; the rest
	// were dropped.
	dropped := exp.status().QueueFull
	if dropped < n-1-4 {
		t.Errorf("%d of %d spans dropped with a queue of 4 and the receiver stalled, want at least %d", dropped, n, n-1-4)
	}
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	st := exp.status()
	if int(got.Load())+int(st.QueueFull) != n || st.Exported != uint64(got.Load()) || st.Dropped != st.QueueFull {
		t.Errorf("%d delivered + %d dropped != %d ended; status %+v", got.Load(), st.QueueFull, n, st)
	}
	var out bytes.Buffer
	WriteMetrics(&out, set)
	if want := fmt.Sprintf(`frontdoor_trace_spans_dropped_total{reason="queue_full"} %d`, st.QueueFull); !strings.Contains(out.String(), want) {
		t.Errorf("metrics lack %q:\n%s", want, out.String())
	}
	if n := strings.Count(logs.String(), "trace queue full"); n != 1 {
		t.Errorf("%d WARN lines for a burst of drops, want 1:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "span ") {
		t.Errorf("the log names a span: %s", logs.String())
	}
}

// TestSpanQueueExportsOnDelayAndFlush: a span that doesn't fill a batch
// leaves after the schedule delay, and ForceFlush sends what is queued.
func TestSpanQueueExportsOnDelayAndFlush(t *testing.T) {
	r := startReceiver(t)
	tg, _ := resolveOTLP(TracingConfig{Enabled: true, Endpoint: r.URL}, envOf(nil))
	exp := newOTLPExporter(tg, slog.New(slog.NewJSONHandler(io.Discard, nil)), metrics.NewSet())
	q := newSpanQueue(exp, batchSettings{delay: 50 * time.Millisecond, timeout: 5 * time.Second, queue: 64, batch: 32})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q))
	_, s := tp.Tracer("test").Start(context.Background(), "waits")
	s.End()
	deadline := time.Now().Add(5 * time.Second)
	for exp.status().Exported == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if exp.status().Exported != 1 {
		t.Fatalf("a lone span was not exported after the schedule delay: %+v", exp.status())
	}
	_ = tp.Shutdown(context.Background())

	exp = newOTLPExporter(tg, slog.New(slog.NewJSONHandler(io.Discard, nil)), metrics.NewSet())
	tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(
		newSpanQueue(exp, batchSettings{delay: time.Hour, timeout: 5 * time.Second, queue: 64, batch: 32})))
	for range 3 {
		_, s := tp.Tracer("test").Start(context.Background(), "flushed")
		s.End()
	}
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := exp.status(); st.Exported != 3 {
		t.Errorf("after ForceFlush %+v, want the 3 queued spans exported", st)
	}
	_ = tp.Shutdown(context.Background())
}
