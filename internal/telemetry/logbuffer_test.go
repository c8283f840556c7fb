package telemetry

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"frontdoor/internal/testenv"
)

// countingWriter is a destination that counts its writes.
type countingWriter struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *countingWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *countingWriter) snapshot() (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String(), s.writes
}

// Lines reach the destination within the interval, in batches, whole and
// in order per writer; Close writes the rest and later lines go straight
// through.
func TestLogBufferBatchesLines(t *testing.T) {
	dst := &countingWriter{}
	lb := NewLogBuffer(dst, 20*time.Millisecond)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 250 {
				fmt.Fprintf(lb, "writer %d line %03d\n", w, i)
			}
		}()
	}
	wg.Wait()
	testenv.Eventually(t, 2*time.Second, func() bool {
		out, _ := dst.snapshot()
		return strings.Count(out, "\n") == 1000
	}, "lines not flushed within the interval")
	out, writes := dst.snapshot()
	if writes >= 1000 {
		t.Fatalf("%d writes for 1000 lines: not batched", writes)
	}
	next := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var w, i int
		if _, err := fmt.Sscanf(line, "writer %d line %d", &w, &i); err != nil {
			t.Fatalf("torn line %q", line)
		}
		key := fmt.Sprint(w)
		if i != next[key] {
			t.Fatalf("writer %d: line %d after %d", w, i, next[key]-1)
		}
		next[key]++
	}

	fmt.Fprintln(lb, "before close")
	if err := lb.Close(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(lb, "after close")
	if out, _ := dst.snapshot(); !strings.HasSuffix(out, "before close\nafter close\n") {
		t.Fatalf("close lost or reordered lines: %q", out[max(0, len(out)-60):])
	}
}

// A burst of the kick size is written at once, not at the next tick. (The
// flusher may take it before the burst's last line: what must arrive is
// the kick size, not the whole burst.)
func TestLogBufferFlushesBurstsEarly(t *testing.T) {
	dst := &countingWriter{}
	lb := NewLogBuffer(dst, time.Hour)
	defer lb.Close()
	line := strings.Repeat("x", 1023) + "\n"
	for range logBufferKick/len(line) + 1 {
		_, _ = lb.Write([]byte(line))
	}
	testenv.Eventually(t, 2*time.Second, func() bool {
		out, _ := dst.snapshot()
		return len(out) >= logBufferKick
	}, "a burst waited for the hourly tick")
}
