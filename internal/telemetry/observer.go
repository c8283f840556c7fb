package telemetry

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"frontdoor/adapters"
)

// The span names and attributes follow the OpenTelemetry GenAI semantic
// conventions where they apply (gen_ai.*), the HTTP ones for statuses,
// and frontdoor.* for the rest.
var genAIOperation = [adapters.NumEndpoints]string{
	adapters.EndpointChat:        "chat",
	adapters.EndpointCompletion:  "text_completion",
	adapters.EndpointResponses:   "generate_content",
	adapters.EndpointEmbeddings:  "embeddings",
	adapters.EndpointPassthrough: "passthrough",
}

// Request observes one request: its span and the spans under it. A nil
// *Request is an untraced request's: every method does nothing and
// allocates nothing, so call sites need no check.
type Request struct {
	t    *Tracer
	ctx  context.Context // carries span
	span trace.Span
}

// StartRequest opens a request's span, a child of the client's traceparent
// when h carries one; nil when t is (tracing is off).
func (t *Tracer) StartRequest(h Headers, ep adapters.Endpoint, requestID string, route []byte, start time.Time) *Request {
	if t == nil {
		return nil
	}
	parent := propagator.Extract(context.Background(), requestCarrier{h})
	op := genAIOperation[ep]
	ctx, span := t.tracer.Start(parent, op, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String("gen_ai.operation.name", op), attribute.String("frontdoor.request_id", requestID),
			attribute.String("http.route", string(route))))
	return &Request{t: t, ctx: ctx, span: span}
}

// Parsed names the span after the model, once the request is parsed.
func (r *Request) Parsed(ep adapters.Endpoint, req *adapters.Request, tenant string) {
	if r == nil {
		return
	}
	r.span.SetName(genAIOperation[ep] + " " + req.Model)
	attrs := []attribute.KeyValue{attribute.String("gen_ai.request.model", req.Model), attribute.Bool("frontdoor.stream", req.Stream)}
	if req.MaxTokens > 0 {
		attrs = append(attrs, attribute.Int("gen_ai.request.max_tokens", req.MaxTokens))
	}
	attrs = append(attrs, attribute.String("frontdoor.tenant", tenant))
	r.span.SetAttributes(attrs...)
}

// ParsedModel is Parsed for the requests that are not chat or
// completions (embeddings, pass-through): the model and tenant.
func (r *Request) ParsedModel(ep adapters.Endpoint, model, tenant string) {
	if r == nil {
		return
	}
	r.span.SetName(genAIOperation[ep] + " " + model)
	r.span.SetAttributes(attribute.String("gen_ai.request.model", model), attribute.String("frontdoor.tenant", tenant))
}

// Usage records an answer's tokens.
func (r *Request) Usage(u adapters.Usage) {
	if r != nil {
		r.span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", u.PromptTokens), attribute.Int("gen_ai.usage.output_tokens", u.CompletionTokens))
	}
}

// Outcome is how a request was answered.
type Outcome struct {
	Status, Attempts int
	Model, Upstream  string // "" when none
	// Cache is the X-Cache value and CacheReason the reason label; "" when
	// the cache was not consulted, or for the plain lookup.
	Cache, CacheReason string
}

// Finished records the outcome. It ends the span, unless a stream owns it
// (streaming): End ends it with the stream.
func (r *Request) Finished(o Outcome, streaming bool) {
	if r == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.Int("http.response.status_code", o.Status), attribute.Int("frontdoor.attempts", o.Attempts)}
	if o.Model != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.model", o.Model))
	}
	if o.Upstream != "" {
		attrs = append(attrs, attribute.String("frontdoor.upstream", o.Upstream))
	}
	if o.Cache != "" {
		attrs = append(attrs, attribute.String("frontdoor.cache", o.Cache))
		if o.CacheReason != "" {
			attrs = append(attrs, attribute.String("frontdoor.cache.reason", o.CacheReason))
		}
	}
	r.span.SetAttributes(attrs...)
	if o.Status >= 500 {
		r.span.SetStatus(codes.Error, fmt.Sprintf("HTTP %d", o.Status))
	}
	if !streaming {
		r.span.End()
	}
}

// End ends the span of a request whose stream owned it.
func (r *Request) End() {
	if r != nil {
		r.span.End()
	}
}

// Span is a span under a request's; the zero Span (an untraced request's)
// does nothing.
type Span struct{ s trace.Span }

func (r *Request) child(name string, kind trace.SpanKind, attrs ...attribute.KeyValue) Span {
	_, s := r.t.tracer.Start(r.ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	return Span{s}
}

// Admission opens the span of an admission step ("admission": rate and
// concurrency; "admission tokens": the token budget of a miss). End it
// with End, or with Rejected.
func (r *Request) Admission(name string) Span {
	if r == nil {
		return Span{}
	}
	return r.child(name, trace.SpanKindInternal)
}

// Rejected ends an admission span whose step refused the request by limit.
func (s Span) Rejected(limit string) {
	if s.s != nil {
		s.s.SetAttributes(attribute.String("frontdoor.admission.rejected", limit))
		s.s.End()
	}
}

// End ends the span.
func (s Span) End() {
	if s.s != nil {
		s.s.End()
	}
}

// Lookup opens the span of a cache lookup, kind "exact" or "semantic".
func (r *Request) Lookup(kind string) Span {
	if r == nil {
		return Span{}
	}
	return r.child("cache.lookup "+kind, trace.SpanKindInternal, attribute.String("frontdoor.cache.lookup", kind))
}

// LookedUp ends an exact lookup's span.
func (s Span) LookedUp(hit bool) {
	if s.s != nil {
		s.s.SetAttributes(attribute.Bool("frontdoor.cache.hit", hit))
		s.s.End()
	}
}

// LookedUpSemantic ends a semantic lookup's span: the best candidate's
// similarity and the threshold it had to reach.
func (s Span) LookedUpSemantic(hit bool, similarity, threshold float32) {
	if s.s != nil {
		s.s.SetAttributes(attribute.Bool("frontdoor.cache.hit", hit), attribute.Float64("frontdoor.cache.similarity", widen(similarity)),
			attribute.Float64("frontdoor.cache.threshold", widen(threshold)))
		s.s.End()
	}
}

// widen is the float64 nearest v's shortest decimal form: a threshold of
// 0.92 shows as 0.92 in a trace viewer, not as 0.9200000166893005.
func widen(v float32) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(float64(v), 'g', -1, 32), 64)
	return r
}

// Attempt opens the span of attempt number n on node and passes its
// context to the upstream in ur's traceparent. End it with AttemptEnded.
func (r *Request) Attempt(ur *adapters.UpstreamRequest, node string, n int) Span {
	if r == nil {
		return Span{}
	}
	return r.attempt("attempt "+node, node, ur, n)
}

// Spillover is Attempt at the hosted spill-over API named name.
func (r *Request) Spillover(ur *adapters.UpstreamRequest, name string, n int) Span {
	if r == nil {
		return Span{}
	}
	return r.attempt("spillover", name, ur, n)
}

func (r *Request) attempt(span, node string, ur *adapters.UpstreamRequest, n int) Span {
	_, s := r.t.tracer.Start(r.ctx, span, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("frontdoor.node", node), attribute.Int("frontdoor.attempt", n),
			attribute.String("gen_ai.request.model", ur.Model)))
	carrier := propagation.MapCarrier{}
	propagator.Inject(trace.ContextWithSpan(context.Background(), s), carrier)
	ur.Trace = &adapters.TraceContext{Parent: carrier["traceparent"], State: carrier["tracestate"]}
	return Span{s}
}

// AttemptEnded records how the attempt went, its status or its error, and
// for a stream the time to the first token since sent (zero: not
// measured); it ends the span.
func (s Span) AttemptEnded(resp *adapters.UpstreamResponse, err error, sent time.Time) {
	if s.s == nil {
		return
	}
	switch {
	case err != nil:
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	default:
		s.s.SetAttributes(attribute.Int("http.response.status_code", resp.Status))
		if resp.Status >= 400 {
			s.s.SetStatus(codes.Error, fmt.Sprintf("HTTP %d", resp.Status))
		}
		if resp.Streaming() && !sent.IsZero() {
			s.s.SetAttributes(attribute.Float64("frontdoor.ttft_ms", float64(time.Since(sent).Microseconds())/1000))
		}
	}
	s.s.End()
}
