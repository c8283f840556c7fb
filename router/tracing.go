package router

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"frontdoor/adapters"
	"frontdoor/balancer"
	"frontdoor/internal/buildinfo"
	"frontdoor/internal/redact"
	"frontdoor/admission"
)

// Tracing is the tracing: section. Off by default; the standard OTEL_*
// variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER,
// OTEL_BSP_*) apply when it is on.
type Tracing struct {
	Enabled bool `yaml:"enabled"`
	// Endpoint is the OTLP/HTTP collector (http://collector:4318, or the
	// full .../v1/traces URL); empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
	// OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318.
	Endpoint string `yaml:"endpoint"`
	// SampleRatio of the traces frontdoor starts; a traceparent's sampling
	// decision is kept. OTEL_TRACES_SAMPLER, when set, wins.
	SampleRatio float64 `yaml:"sample_ratio"`
	ServiceName string  `yaml:"service_name"` // OTEL_SERVICE_NAME wins
}

// Validate checks the section.
func (t *Tracing) Validate() error {
	if t.SampleRatio < 0 || t.SampleRatio > 1 {
		return fmt.Errorf("sample_ratio: must be between 0 and 1")
	}
	if t.Endpoint != "" {
		u, err := url.Parse(t.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("endpoint: %q is not an http:// or https:// URL", redact.URL(t.Endpoint))
		}
	}
	return nil
}

// tracing is the gateway's tracer; nil when tracing is off, and then no
// request does any tracing work.
type tracing struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

func newTracing(ctx context.Context, c Tracing) (*tracing, error) {
	if !c.Enabled {
		return nil, nil
	}
	var opts []otlptracehttp.Option
	if c.Endpoint != "" {
		ep := c.Endpoint
		if u, _ := url.Parse(ep); u != nil && (u.Path == "" || u.Path == "/") {
			ep = strings.TrimSuffix(ep, "/") + "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(ep))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	name := c.ServiceName
	if name == "" {
		name = "frontdoor"
	}
	// Later detectors win: the OTEL_* variables over the config.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", name), attribute.String("service.version", buildinfo.Get().Version)),
		resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if os.Getenv("OTEL_TRACES_SAMPLER") == "" {
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	return &tracing{tp: tp, tracer: tp.Tracer("frontdoor/router"),
		prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}, nil
}

func (t *tracing) shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// requestCarrier reads an incoming request's trace headers.
type requestCarrier struct{ h *fasthttp.RequestHeader }

func (c requestCarrier) Get(k string) string { return string(c.h.Peek(k)) }
func (c requestCarrier) Set(string, string)  {}
func (c requestCarrier) Keys() []string      { return []string{"traceparent", "tracestate", "baggage"} }

// The span names and attributes follow the OpenTelemetry GenAI semantic
// conventions where they apply (gen_ai.*), the HTTP ones for statuses,
// and frontdoor.* for the rest.
var genAIOperation = [2]string{"chat", "text_completion"}

// requestTrace is a traced request's span and its context.
type requestTrace struct {
	ctx  context.Context
	span trace.Span
}

// usage records an answer's tokens.
func (t *requestTrace) usage(u adapters.Usage) {
	if t != nil {
		t.span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", u.PromptTokens), attribute.Int("gen_ai.usage.output_tokens", u.CompletionTokens))
	}
}

func (t *requestTrace) end() {
	if t != nil {
		t.span.End()
	}
}

// startRequestSpan opens the request's span, a child of the client's
// traceparent when it sent one.
func (g *Gateway) startRequestSpan(ctx *fasthttp.RequestCtx, x *exchange) {
	parent := g.tracing.prop.Extract(context.Background(), requestCarrier{&ctx.Request.Header})
	op := genAIOperation[x.endpoint]
	x.trc = &requestTrace{}
	x.trc.ctx, x.trc.span = g.tracing.tracer.Start(parent, op, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(x.start),
		trace.WithAttributes(attribute.String("gen_ai.operation.name", op), attribute.String("frontdoor.request_id", x.id),
			attribute.String("http.route", string(ctx.Path()))))
}

// describeRequest names the span after the model, once the request is parsed.
func (x *exchange) describeRequest() {
	if x.trc == nil || x.req == nil {
		return
	}
	x.trc.span.SetName(genAIOperation[x.endpoint] + " " + x.req.Model)
	attrs := []attribute.KeyValue{attribute.String("gen_ai.request.model", x.req.Model), attribute.Bool("frontdoor.stream", x.req.Stream)}
	if x.req.MaxTokens > 0 {
		attrs = append(attrs, attribute.Int("gen_ai.request.max_tokens", x.req.MaxTokens))
	}
	if x.tenant != nil {
		attrs = append(attrs, attribute.String("frontdoor.tenant", x.tenant.name))
	}
	x.trc.span.SetAttributes(attrs...)
}

// finishSpan records the outcome; a stream's span ends with the stream.
func (x *exchange) finishSpan() {
	if x.trc == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.Int("http.response.status_code", x.status), attribute.Int("frontdoor.attempts", x.attempts)}
	if x.model != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.model", x.model))
	}
	if x.upstream != "" {
		attrs = append(attrs, attribute.String("frontdoor.upstream", x.upstream))
	}
	if r := x.cache.result; r != resultNone {
		attrs = append(attrs, attribute.String("frontdoor.cache", r.header()))
		if reason := x.cache.reason; reason != reasonNone {
			attrs = append(attrs, attribute.String("frontdoor.cache.reason", reason.label()))
		}
	}
	x.trc.span.SetAttributes(attrs...)
	if x.status >= 500 {
		x.trc.span.SetStatus(codes.Error, fmt.Sprintf("HTTP %d", x.status))
	}
	if !x.streamOwned {
		x.trc.span.End()
	}
}

// child opens a span under the request's; nil when tracing is off.
func (x *exchange) child(name string, kind trace.SpanKind, attrs ...attribute.KeyValue) trace.Span {
	if x.trc == nil {
		return nil
	}
	_, s := x.trc.span.TracerProvider().Tracer("frontdoor/router").Start(x.trc.ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	return s
}

// startAttempt opens the span of one attempt on node n (nil: spill-over)
// and passes its context to the upstream in traceparent.
func (g *Gateway) startAttempt(x *exchange, ur *adapters.UpstreamRequest, n *balancer.Node) trace.Span {
	name, node := "spillover", g.spillName()
	if n != nil {
		name, node = "attempt "+n.Name(), n.Name()
	}
	_, s := g.tracing.tracer.Start(x.trc.ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("frontdoor.node", node), attribute.Int("frontdoor.attempt", x.attempts),
			attribute.String("gen_ai.request.model", ur.Model)))
	carrier := propagation.MapCarrier{}
	g.tracing.prop.Inject(trace.ContextWithSpan(context.Background(), s), carrier)
	ur.Trace = &adapters.TraceContext{Parent: carrier["traceparent"], State: carrier["tracestate"]}
	return s
}

// endAttempt records how the attempt went: its status, or its error, and
// for a stream the time to the first token since sent.
func endAttempt(s trace.Span, resp *adapters.UpstreamResponse, err error, sent time.Time) {
	switch {
	case err != nil:
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	default:
		s.SetAttributes(attribute.Int("http.response.status_code", resp.Status))
		if resp.Status >= 400 {
			s.SetStatus(codes.Error, fmt.Sprintf("HTTP %d", resp.Status))
		}
		if resp.Streaming() && !sent.IsZero() {
			s.SetAttributes(attribute.Float64("frontdoor.ttft_ms", float64(time.Since(sent).Microseconds())/1000))
		}
	}
	s.End()
}

// endAdmission ends an admission span (nil: tracing is off).
func endAdmission(s trace.Span, rej *admission.Rejection) {
	if s == nil {
		return
	}
	if rej != nil {
		s.SetAttributes(attribute.String("frontdoor.admission.rejected", rej.Limit))
	}
	s.End()
}

func (g *Gateway) spillName() string {
	sp := g.rt.Load().spill
	if sp == nil {
		return ""
	}
	return sp.name
}
