package load

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Build compiles each package into dir, named after its last element: a
// bare name is ./cmd/<name>, a path (./bench/x) is taken as is.
func Build(dir string, names ...string) error {
	for _, b := range names {
		pkg := "./cmd/" + b
		if strings.Contains(b, "/") {
			pkg, b = b, filepath.Base(b)
		}
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, b), pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w\n%s", b, err, out)
		}
	}
	return nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// WaitUp waits up to 15 s until a GET of url answers 200.
func WaitUp(url string) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no 200 from %s within 15s", url)
}

// Median applies f to each result and returns the median.
func Median(rs []Result, f func(Result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return MedianOf(v)
}

// MedianOf returns the median of v (the upper one for an even count).
func MedianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// Micros is d in microseconds.
func Micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// CPUTime is the user+system CPU time a process has used so far, from
// /proc/<pid>/stat (clock-tick resolution, so measure runs of seconds).
func CPUTime(pid int) (time.Duration, error) {
	u, s, err := CPUTimes(pid)
	return u + s, err
}

// CPUTimes is CPUTime split into user and system time.
func CPUTimes(pid int) (user, sys time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read stat: %w", err)
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the whole line.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(ut) * time.Second / ticksPerSecond, time.Duration(st) * time.Second / ticksPerSecond, nil
}
