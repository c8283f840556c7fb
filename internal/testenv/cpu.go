package testenv

import (
	"syscall"
	"testing"
	"time"
)

// ReportCPU reports the process's CPU time (user and system, every
// goroutine) a b.N as cpu-µs/op, from the call to the returned func's:
// steadier than ns/op on a shared machine, and it counts work done off the
// benchmark's goroutine (write-back workers).
func ReportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpu()-start)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
		}
	}
}
