package telemetry

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// batchSettings are the batch span processor's OTEL_BSP_* variables.
type batchSettings struct {
	delay   time.Duration // OTEL_BSP_SCHEDULE_DELAY: the longest a span waits for its batch
	timeout time.Duration // OTEL_BSP_EXPORT_TIMEOUT: one batch's export, the exporter's retries included
	queue   int           // OTEL_BSP_MAX_QUEUE_SIZE: spans waiting; past it they are dropped
	batch   int           // OTEL_BSP_MAX_EXPORT_BATCH_SIZE
}

// resolveBatch reads the OTEL_BSP_* variables. Unlike the SDK, which falls
// back to its defaults, a value that can't be used is an error naming its
// variable.
func resolveBatch(getenv func(string) string) (batchSettings, error) {
	b := batchSettings{delay: 5 * time.Second, timeout: 30 * time.Second, queue: 2048, batch: 512}
	positive := func(name string, dst *int) error {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("%s: %q is not a positive integer", name, v)
		}
		*dst = n
		return nil
	}
	delayMs, timeoutMs := int(b.delay/time.Millisecond), int(b.timeout/time.Millisecond)
	for _, f := range []struct {
		name string
		dst  *int
	}{
		{"OTEL_BSP_SCHEDULE_DELAY", &delayMs}, {"OTEL_BSP_EXPORT_TIMEOUT", &timeoutMs},
		{"OTEL_BSP_MAX_QUEUE_SIZE", &b.queue}, {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", &b.batch},
	} {
		if err := positive(f.name, f.dst); err != nil {
			return b, err
		}
	}
	b.delay, b.timeout = time.Duration(delayMs)*time.Millisecond, time.Duration(timeoutMs)*time.Millisecond
	if b.batch > b.queue {
		return b, fmt.Errorf("OTEL_BSP_MAX_EXPORT_BATCH_SIZE: %d is more than OTEL_BSP_MAX_QUEUE_SIZE (%d)", b.batch, b.queue)
	}
	return b, nil
}

// spanQueue is the batch span processor: ended spans wait in a bounded
// queue and leave in batches, when a batch is full or the oldest has waited
// the schedule delay. Ending a span never blocks a request: a span that
// finds the queue full is dropped, and counted
// (frontdoor_trace_spans_dropped_total{reason="queue_full"}, /status, a
// rate-limited WARN line) as the exporter counts a batch it can't deliver.
// The SDK's own processor drops such spans without a count.
type spanQueue struct {
	exp     *otlpExporter
	set     batchSettings
	spans   chan sdktrace.ReadOnlySpan
	flushes chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	closed  atomic.Bool
}

var _ sdktrace.SpanProcessor = (*spanQueue)(nil)

func newSpanQueue(exp *otlpExporter, set batchSettings) *spanQueue {
	q := &spanQueue{exp: exp, set: set, spans: make(chan sdktrace.ReadOnlySpan, set.queue),
		flushes: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go q.run()
	return q
}

func (q *spanQueue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues a sampled span, or drops it when the queue is full.
func (q *spanQueue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() || q.closed.Load() {
		return
	}
	select {
	case q.spans <- s:
	default:
		q.exp.queueFull(1, q.set.queue)
	}
}

// ForceFlush exports every span queued before the call.
func (q *spanQueue) ForceFlush(ctx context.Context) error {
	if q.closed.Load() {
		return nil
	}
	ack := make(chan struct{})
	select {
	case q.flushes <- ack:
	case <-q.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("trace flush: %w", ctx.Err())
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("trace flush: %w", ctx.Err())
	}
}

// Shutdown exports what is queued, then stops the exporter.
func (q *spanQueue) Shutdown(ctx context.Context) error {
	q.once.Do(func() {
		q.closed.Store(true)
		close(q.stop)
	})
	select {
	case <-q.done:
	case <-ctx.Done():
		return fmt.Errorf("trace shutdown: %w", ctx.Err())
	}
	return q.exp.Shutdown(ctx)
}

func (q *spanQueue) run() {
	defer close(q.done)
	batch := make([]sdktrace.ReadOnlySpan, 0, q.set.batch)
	timer := time.NewTimer(q.set.delay)
	defer timer.Stop()
	export := func() {
		if len(batch) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), q.set.timeout)
			_ = q.exp.ExportSpans(ctx, batch) // it counts and logs its own failures
			cancel()
			clear(batch) // the spans' memory goes now, not at the next batch
			batch = batch[:0]
		}
		timer.Reset(q.set.delay)
	}
	// drain exports what is queued now, in batches.
	drain := func() {
		for n := len(q.spans); n > 0; n-- {
			batch = append(batch, <-q.spans)
			if len(batch) == q.set.batch {
				export()
			}
		}
		export()
	}
	for {
		select {
		case s := <-q.spans:
			batch = append(batch, s)
			if len(batch) == q.set.batch {
				export()
			}
		case <-timer.C:
			export()
		case ack := <-q.flushes:
			drain()
			close(ack)
		case <-q.stop:
			drain()
			return
		}
	}
}
