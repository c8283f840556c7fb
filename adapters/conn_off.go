//go:build nodeferred

package adapters

// deferredConns: with the nodeferred build tag NewDeferredConn returns
// connections unwrapped (bench/overhead compares both builds).
const deferredConns = false
