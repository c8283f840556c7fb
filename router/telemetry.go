package router

import (
	"io"
	"log/slog"

	"frontdoor/internal/telemetry"
)

// Tracing is the tracing: section (see telemetry.TracingConfig).
type Tracing = telemetry.TracingConfig

// NewLogger builds the process logger from logging: (see
// telemetry.NewLogger).
func NewLogger(c Logging, w io.Writer) *slog.Logger {
	return telemetry.NewLogger(c.Level, c.Format, w)
}
