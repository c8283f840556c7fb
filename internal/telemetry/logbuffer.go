package telemetry

import (
	"io"
	"sync"
	"time"
)

// LogBuffer collects log lines and writes them in batches: every flush
// interval, as soon as logBufferKick bytes wait, and on Close. An access
// log line per request would otherwise cost a write(2) per request on the
// hot path. Writers never wait for the destination unless logBufferMax
// bytes are already waiting (a stuck destination then slows the gateway
// down instead of growing memory without bound). Lines written in the
// last interval before the process is killed (not stopped) are lost.
type LogBuffer struct {
	w       io.Writer
	mu      sync.Mutex
	buf     []byte
	closed  bool
	flushMu sync.Mutex // one write to w at a time, in order
	spare   []byte     // the buffer last written, reused; under flushMu
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

const (
	logBufferKick = 64 << 10
	logBufferMax  = 8 << 20
)

// NewLogBuffer starts a buffer that flushes to w every interval (> 0).
func NewLogBuffer(w io.Writer, every time.Duration) *LogBuffer {
	b := &LogBuffer{w: w, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go b.run(every)
	return b
}

func (b *LogBuffer) run(every time.Duration) {
	defer close(b.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-b.kick:
		case <-b.stop:
			_ = b.Flush()
			return
		}
		_ = b.Flush()
	}
}

// Write appends p, a whole line from a log handler.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.flushMu.Lock()
		defer b.flushMu.Unlock()
		return b.w.Write(p)
	}
	b.buf = append(b.buf, p...)
	n := len(b.buf)
	b.mu.Unlock()
	switch {
	case n >= logBufferMax:
		return len(p), b.Flush()
	case n >= logBufferKick:
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// Flush writes what is waiting.
func (b *LogBuffer) Flush() error {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	b.mu.Lock()
	out := b.buf
	b.buf = b.spare[:0]
	b.mu.Unlock()
	if len(out) == 0 {
		b.spare = out
		return nil
	}
	_, err := b.w.Write(out)
	if cap(out) > logBufferMax {
		out = nil // a burst's buffer is not kept
	}
	b.spare = out[:0]
	return err
}

// Close flushes and stops the flusher; later writes go straight to w.
func (b *LogBuffer) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	<-b.done
	return b.Flush()
}
