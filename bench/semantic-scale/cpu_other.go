//go:build !linux

package main

import "time"

var start = time.Now()

// threadCPU: elsewhere than Linux, wall-clock time stands in for the
// thread's CPU time.
func threadCPU() time.Duration { return time.Since(start) }
