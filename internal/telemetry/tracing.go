package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"frontdoor/internal/buildinfo"
	"frontdoor/internal/redact"
)

// TracingConfig is the tracing: section. Off by default; the standard OTEL_*
// variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER,
// OTEL_BSP_*) apply when it is on.
type TracingConfig struct {
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
func (t *TracingConfig) Validate() error {
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

// Tracer is the gateway's tracer; nil when tracing is off, and then no
// request does any tracing work (see Request).
type Tracer struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

// propagator reads and writes traceparent, tracestate and baggage.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// NewTracer starts the exporter of c; nil when tracing is off.
func NewTracer(ctx context.Context, c TracingConfig) (*Tracer, error) {
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
	return &Tracer{tp: tp, tracer: tp.Tracer("frontdoor/router")}, nil
}

// Shutdown exports the spans still waiting; nothing when t is nil.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Headers are an incoming request's headers (a *fasthttp.RequestHeader).
type Headers interface {
	Peek(key string) []byte
}

// requestCarrier reads an incoming request's trace headers.
type requestCarrier struct{ h Headers }

func (c requestCarrier) Get(k string) string { return string(c.h.Peek(k)) }
func (c requestCarrier) Set(string, string)  {}
func (c requestCarrier) Keys() []string      { return []string{"traceparent", "tracestate", "baggage"} }
