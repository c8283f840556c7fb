package telemetry

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"frontdoor/adapters"
)

// NewLogger builds the process logger: level is debug, info, warn or error
// (anything else: info), format json or text. Its JSON handler also writes
// the access log line directly (see AccessLine), which costs a fraction of
// a slog record on every request.
func NewLogger(levelName, format string, w io.Writer) *slog.Logger {
	var level slog.Level
	switch levelName {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	out := &lockedWriter{w: w}
	return slog.New(&logHandler{Handler: slog.NewJSONHandler(out, opts), out: out, access: level <= slog.LevelInfo})
}

// lockedWriter serializes the lines of slog's handler and of the access
// log, each one Write.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// logHandler is slog's JSON handler plus the access log's direct path.
type logHandler struct {
	slog.Handler
	out    *lockedWriter
	access bool // info lines are enabled
}

// AccessLine is one access log line, the fields in the order written.
type AccessLine struct {
	RequestID, Path, Model, Upstream, Cache string
	Status, Attempts                        int
	Stream                                  bool
	Duration                                time.Duration
}

var lineBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// writeAccess writes the line as slog's JSON handler would: the same
// keys, order and value encodings.
func (h *logHandler) writeAccess(now time.Time, a *AccessLine) {
	bp := lineBufs.Get().(*[]byte)
	b := append((*bp)[:0], `{"time":"`...)
	b = now.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"INFO","msg":"request","request_id":`...)
	b = adapters.AppendJSONString(b, a.RequestID)
	b = append(b, `,"path":`...)
	b = adapters.AppendJSONString(b, a.Path)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(a.Status), 10)
	b = append(b, `,"model":`...)
	b = adapters.AppendJSONString(b, a.Model)
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, a.Stream)
	b = append(b, `,"upstream":`...)
	b = adapters.AppendJSONString(b, a.Upstream)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(a.Attempts), 10)
	b = append(b, `,"cache":`...)
	b = adapters.AppendJSONString(b, a.Cache)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendFloat(b, durationMS(a.Duration), 'g', -1, 64)
	b = append(b, "}\n"...)
	_, _ = h.out.Write(b)
	*bp = b
	lineBufs.Put(bp)
}

func durationMS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// LogAccess writes the access line through log's fast path when it has
// one (a logger from NewLogger), or as a slog record.
func LogAccess(log *slog.Logger, now time.Time, a *AccessLine) {
	if h, ok := log.Handler().(*logHandler); ok {
		if h.access {
			h.writeAccess(now, a)
		}
		return
	}
	log.LogAttrs(context.Background(), slog.LevelInfo, "request",
		slog.String("request_id", a.RequestID), slog.String("path", a.Path), slog.Int("status", a.Status),
		slog.String("model", a.Model), slog.Bool("stream", a.Stream),
		slog.String("upstream", a.Upstream), slog.Int("attempts", a.Attempts), slog.String("cache", a.Cache),
		slog.Float64("duration_ms", durationMS(a.Duration)))
}
