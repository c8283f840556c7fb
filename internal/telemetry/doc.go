// Package telemetry is how the gateway is observed: the process logger
// and its access log line (log.go), the batching log buffer
// (logbuffer.go), rate-limited log lines (ratelog.go), metric families
// and the /metrics writer (metrics.go: each family is declared once, with
// NewFamily, beside its # HELP text, and makes its series; the writer
// takes the help texts from the declarations), the OpenTelemetry set-up
// (tracing.go), and a request's spans (observer.go): a *Request that is
// nil for an untraced request and whose methods then do nothing, so the
// request path calls them without checking whether tracing is on.
package telemetry
