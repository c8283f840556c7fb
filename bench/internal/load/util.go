package load

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
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

// BuildTemp builds the packages (as Build) into a new temporary folder
// named after pattern (as os.MkdirTemp) and returns it; the caller removes
// it.
func BuildTemp(pattern string, names ...string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	if err := Build(dir, names...); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// Addr is the loopback address with port.
func Addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

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

// Every calls f every d, from a goroutine of its own, until stop is
// called; stop returns once f is done.
func Every(d time.Duration, f func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { close(quit); <-done }
}

// Median applies f to each of xs and returns the median.
func Median[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
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
