package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
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
// OTEL_BSP_*) apply when it is on, read by frontdoor's exporter and batch
// queue (spanQueue), which refuse a value they can't use.
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
	if t.Enabled { // the OTEL_EXPORTER_OTLP_* variables serve reads
		if _, err := resolveOTLP(*t, os.Getenv); err != nil {
			return fmt.Errorf(": %w", err) // the section's, not a key's
		}
		if _, err := resolveBatch(os.Getenv); err != nil {
			return fmt.Errorf(": %w", err)
		}
	}
	return nil
}

// Tracer is the gateway's tracer; nil when tracing is off, and then no
// request does any tracing work (see Request).
type Tracer struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	exp    *otlpExporter
}

// propagator reads and writes traceparent, tracestate and baggage.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// NewTracer starts the exporter of c, which counts its spans in set and
// writes its failures to log; nil when tracing is off.
func NewTracer(ctx context.Context, c TracingConfig, log *slog.Logger, set *metrics.Set) (*Tracer, error) {
	if !c.Enabled {
		return nil, nil
	}
	target, err := resolveOTLP(c, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	batch, err := resolveBatch(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	exp := newOTLPExporter(target, log, set)
	// The SDK's own errors go to the log as WARN lines, not to the
	// standard logger.
	sdkErrs := NewRateLog(log, time.Minute)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		sdkErrs.Warn("sdk", "opentelemetry error", "error", err)
	}))
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
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(newSpanQueue(exp, batch)), sdktrace.WithResource(res)}
	if os.Getenv("OTEL_TRACES_SAMPLER") == "" {
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	return &Tracer{tp: tp, tracer: tp.Tracer("frontdoor/router"), exp: exp}, nil
}

// Status is the tracing part of /status; nil when tracing is off.
func (t *Tracer) Status() *TracingStatus {
	if t == nil {
		return nil
	}
	return t.exp.status()
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
