// Package router is the gateway: the fasthttp server, request validation,
// the cache lookups, admission, node choice with retries, spill-over, the
// streaming pump with write-back, and the admin and status endpoints. It
// wires the other packages together; nothing imports it.
package router
