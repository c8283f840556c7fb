// Package telemetry is how the gateway is observed: the process logger
// and its access log line (log.go), the batching log buffer
// (logbuffer.go), rate-limited log lines (ratelog.go), and the # HELP
// text of every metric family and the /metrics writer (metrics_help.go).
package telemetry
