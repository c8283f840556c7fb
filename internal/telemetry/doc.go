// Package telemetry is how the gateway is observed: the process logger
// and its access log line (log.go), the batching log buffer
// (logbuffer.go), rate-limited log lines (ratelog.go), the # HELP text of
// every metric family and the /metrics writer (metrics_help.go), the
// OpenTelemetry set-up (tracing.go), and a request's spans (observer.go):
// a *Request that is nil for an untraced request and whose methods then do
// nothing, so the request path calls them without checking whether
// tracing is on.
package telemetry
