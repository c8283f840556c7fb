package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"frontdoor/internal/buildinfo"
	"frontdoor/internal/redact"
)

// otlpTarget is where and how spans are posted: the config's endpoint and
// the standard OTEL_EXPORTER_OTLP_* variables, read once at start.
type otlpTarget struct {
	url     string
	headers [][2]string
	timeout time.Duration
	gzip    bool
	tls     *tls.Config // nil: the system's roots
}

const defaultOTLPTimeout = 10 * time.Second

// resolveOTLP reads the target of c. A signal's own variable
// (OTEL_EXPORTER_OTLP_TRACES_*) wins over the general one. Every value that
// can't be used is an error naming its variable, never echoing a header's
// value (it may be an API key).
func resolveOTLP(c TracingConfig, getenv func(string) string) (otlpTarget, error) {
	env := func(name string) (string, string) {
		if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_" + name)); v != "" {
			return v, "OTEL_EXPORTER_OTLP_TRACES_" + name
		}
		return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_" + name)), "OTEL_EXPORTER_OTLP_" + name
	}
	t := otlpTarget{timeout: defaultOTLPTimeout}
	checkURL := func(raw, from string) error {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s: %q is not an http:// or https:// URL", from, redact.URL(raw))
		}
		return nil
	}
	switch sig, gen := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")), strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); {
	case c.Endpoint != "":
		t.url = c.Endpoint
		if u, _ := url.Parse(t.url); u != nil && (u.Path == "" || u.Path == "/") {
			t.url = strings.TrimSuffix(t.url, "/") + "/v1/traces"
		}
		if err := checkURL(c.Endpoint, "endpoint"); err != nil {
			return t, err
		}
	case sig != "": // the whole URL, as given
		t.url = sig
		if err := checkURL(sig, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); err != nil {
			return t, err
		}
	case gen != "": // a base URL: the signal's path goes under it
		t.url = strings.TrimSuffix(gen, "/") + "/v1/traces"
		if err := checkURL(gen, "OTEL_EXPORTER_OTLP_ENDPOINT"); err != nil {
			return t, err
		}
	default:
		t.url = "http://localhost:4318/v1/traces"
	}
	if v, from := env("PROTOCOL"); v != "" && v != "http/protobuf" {
		return t, fmt.Errorf("%s: %q is not supported; frontdoor exports OTLP over HTTP with protobuf (http/protobuf, port 4318)", from, v)
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			continue
		}
		for i, pair := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(pair, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return t, fmt.Errorf("%s: pair %d is not key=value", name, i+1)
			}
			dec, err := url.PathUnescape(strings.TrimSpace(val))
			if err != nil {
				return t, fmt.Errorf("%s: the value of %q is not percent-encoded correctly", name, k)
			}
			t.headers = setHeader(t.headers, k, dec) // the signal's own wins
		}
	}
	if v, from := env("TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return t, fmt.Errorf("%s: %q is not a positive number of milliseconds", from, v)
		}
		t.timeout = time.Duration(ms) * time.Millisecond
	}
	switch v, from := env("COMPRESSION"); strings.ToLower(v) {
	case "", "none":
	case "gzip":
		t.gzip = true
	default:
		return t, fmt.Errorf("%s: %q is not gzip or none", from, v)
	}
	ca, caFrom := env("CERTIFICATE")
	cert, certFrom := env("CLIENT_CERTIFICATE")
	key, keyFrom := env("CLIENT_KEY")
	if ca != "" || cert != "" || key != "" {
		t.tls = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return t, fmt.Errorf("%s: %w", caFrom, err)
		}
		t.tls.RootCAs = x509.NewCertPool()
		if !t.tls.RootCAs.AppendCertsFromPEM(pem) {
			return t, fmt.Errorf("%s: %s holds no PEM certificate", caFrom, ca)
		}
	}
	if (cert == "") != (key == "") {
		return t, fmt.Errorf("%s and %s: set both or neither", certFrom, keyFrom)
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return t, fmt.Errorf("%s, %s: %w", certFrom, keyFrom, err)
		}
		t.tls.Certificates = []tls.Certificate{pair}
	}
	return t, nil
}

func setHeader(h [][2]string, k, v string) [][2]string {
	for i := range h {
		if strings.EqualFold(h[i][0], k) {
			h[i][1] = v
			return h
		}
	}
	return append(h, [2]string{k, v})
}

// otlpExporter posts finished spans to an OTLP/HTTP receiver as protobuf.
// A batch that can't be delivered (after retries of 429, 502, 503, 504 and
// connection errors within the timeout) is dropped: it counts in
// frontdoor_trace_spans_dropped_total{reason="export_failed"}, shows in
// /status and writes a rate-limited WARN line. Requests never wait for it.
type otlpExporter struct {
	target    otlpTarget
	client    *http.Client
	warn      *RateLog
	exported  *metrics.Counter
	dropped   *metrics.Counter // export_failed
	queueDrop *metrics.Counter // queue_full, counted by spanQueue
	stopped   atomic.Bool

	mu      sync.Mutex
	lastErr string
	lastAt  time.Time
}

var _ sdktrace.SpanExporter = (*otlpExporter)(nil)

var (
	spansExported = NewFamily("frontdoor_trace_spans_exported_total", "Spans delivered to the OTLP receiver (tracing on only).")
	spansDropped  = NewFamily("frontdoor_trace_spans_dropped_total", "Spans dropped, by reason: export_failed (the OTLP receiver could not take them within the export timeout, retries included), queue_full (ended while the batch queue, OTEL_BSP_MAX_QUEUE_SIZE, was full) (tracing on only).")
)

func newOTLPExporter(t otlpTarget, log *slog.Logger, set *metrics.Set) *otlpExporter {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if t.tls != nil {
		tr.TLSClientConfig = t.tls
	}
	return &otlpExporter{
		target:    t,
		client:    &http.Client{Transport: tr},
		warn:      NewRateLog(log, time.Minute),
		exported:  spansExported.NewCounter(set),
		dropped:   spansDropped.NewCounter(set, "reason", "export_failed"),
		queueDrop: spansDropped.NewCounter(set, "reason", "queue_full"),
	}
}

// queueFull counts n spans that found the batch queue (of size) full.
func (e *otlpExporter) queueFull(n, size int) {
	e.queueDrop.Add(n)
	e.warn.Warn("queue", "trace queue full: spans dropped", "queue_size", size,
		"hint", "the receiver is slow or down (see frontdoor_trace_spans_dropped_total), or OTEL_BSP_MAX_QUEUE_SIZE is too small for the load")
}

// ExportSpans posts one batch. A failure is recorded here, so the SDK gets
// nil and doesn't report it a second time.
func (e *otlpExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	err := errors.New("the exporter is shut down")
	if !e.stopped.Load() {
		ctx, cancel := context.WithTimeout(ctx, e.target.timeout)
		err = e.post(ctx, encodeTraces(make([]byte, 0, 512*len(spans)), spans))
		cancel()
	}
	if err != nil {
		e.dropped.Add(len(spans))
		e.mu.Lock()
		e.lastErr, e.lastAt = err.Error(), time.Now()
		e.mu.Unlock()
		e.warn.Warn("export", "trace export failed: spans dropped", "endpoint", redact.URL(e.target.url), "spans", len(spans), "error", err)
		return nil
	}
	e.exported.Add(len(spans))
	return nil
}

// Shutdown stops exporting; the SDK flushes before it calls this.
func (e *otlpExporter) Shutdown(context.Context) error {
	e.stopped.Store(true)
	e.client.CloseIdleConnections()
	return nil
}

// post sends body, retrying what the receiver says is temporary while the
// context's deadline leaves time for the wait.
func (e *otlpExporter) post(ctx context.Context, body []byte) error {
	if e.target.gzip {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, _ = zw.Write(body)
		_ = zw.Close()
		body = z.Bytes()
	}
	backoff := time.Second
	for {
		wait, err := e.once(ctx, body)
		if err == nil || wait < 0 {
			return err
		}
		if wait == 0 {
			wait = backoff
			backoff = min(2*backoff, 30*time.Second)
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// once makes one attempt. wait < 0: don't retry; 0: retry after the
// backoff; > 0: retry after the receiver's Retry-After.
func (e *otlpExporter) once(ctx context.Context, body []byte) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.target.url, bytes.NewReader(body))
	if err != nil {
		return -1, fmt.Errorf("otlp: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("User-Agent", "frontdoor/"+buildinfo.Get().Version+" (OTLP/HTTP)")
	if e.target.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	for _, h := range e.target.headers {
		req.Header.Set(h[0], h[1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return -1, fmt.Errorf("otlp: %w", ctx.Err())
		}
		return 0, fmt.Errorf("otlp: %w", errors.Unwrap(err)) // *url.Error repeats the URL
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return 0, nil
	}
	err = fmt.Errorf("otlp: the receiver answered %s", resp.Status)
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
			return time.Duration(min(s, 3600)) * time.Second, err
		}
		return 0, err
	}
	return -1, err
}

// TracingStatus is the tracing part of /status.
type TracingStatus struct {
	Endpoint    string    `json:"endpoint"`
	Exported    uint64    `json:"spans_exported"`
	Dropped     uint64    `json:"spans_dropped"`            // both reasons
	QueueFull   uint64    `json:"spans_dropped_queue_full"` // of Dropped, those that found the queue full
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

func (e *otlpExporter) status() *TracingStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	return &TracingStatus{Endpoint: redact.URL(e.target.url), Exported: e.exported.Get(),
		Dropped: e.dropped.Get() + e.queueDrop.Get(), QueueFull: e.queueDrop.Get(), LastError: e.lastErr, LastErrorAt: e.lastAt}
}
