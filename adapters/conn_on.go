//go:build !nodeferred

package adapters

// deferredConns: NewDeferredConn wraps TCP connections. The nodeferred
// build tag turns it off, for bench/overhead's side-by-side comparison.
const deferredConns = true
