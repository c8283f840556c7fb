package telemetry

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// One line per key per interval; the next says how many were held back.
func TestRateLogHoldsBackRepeats(t *testing.T) {
	var out bytes.Buffer
	r := NewRateLog(slog.New(slog.NewTextHandler(&out, nil)), time.Hour)
	for range 3 {
		r.Warn("a", "first key")
	}
	r.Info("b", "second key")
	if got := strings.Count(out.String(), "\n"); got != 2 {
		t.Fatalf("%d lines, want 2:\n%s", got, out.String())
	}
	r.keys["a"].last = time.Now().Add(-time.Hour) // the interval has passed
	r.Warn("a", "first key")
	if !strings.Contains(out.String(), "held_back=2") {
		t.Fatalf("no held_back count:\n%s", out.String())
	}
}
