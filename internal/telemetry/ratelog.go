package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// RateLog writes at most one line per key per interval, and says how many
// it held back.
type RateLog struct {
	l     *slog.Logger
	every time.Duration
	mu    sync.Mutex
	keys  map[string]*rateSlot
}

type rateSlot struct {
	last       time.Time
	suppressed int
}

// NewRateLog writes to l at most one line per key every interval.
func NewRateLog(l *slog.Logger, every time.Duration) *RateLog {
	return &RateLog{l: l, every: every, keys: map[string]*rateSlot{}}
}

// Warn writes a WARN line, unless key had one within the interval.
func (r *RateLog) Warn(key, msg string, args ...any) { r.emit(slog.LevelWarn, key, msg, args) }

// Info writes an INFO line, unless key had one within the interval.
func (r *RateLog) Info(key, msg string, args ...any) { r.emit(slog.LevelInfo, key, msg, args) }

func (r *RateLog) emit(level slog.Level, key, msg string, args []any) {
	now := time.Now()
	r.mu.Lock()
	s := r.keys[key]
	if s == nil {
		s = &rateSlot{}
		r.keys[key] = s
	}
	if !s.last.IsZero() && now.Sub(s.last) < r.every {
		s.suppressed++
		r.mu.Unlock()
		return
	}
	held := s.suppressed
	s.last, s.suppressed = now, 0
	r.mu.Unlock()
	if held > 0 {
		args = append(args, "held_back", held)
	}
	r.l.Log(context.Background(), level, msg, args...)
}
