package load

import (
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"time"
)

// Build compiles ./cmd/<name> for each name into dir.
func Build(dir string, names ...string) error {
	for _, b := range names {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, b), "./cmd/"+b).CombinedOutput(); err != nil {
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

// WaitUp waits until something answers HTTP at base (scheme://host:port).
func WaitUp(base string) error {
	for i := 0; i < 200; i++ {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not come up", base)
}

// Median applies f to each result and returns the median.
func Median(rs []Result, f func(Result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	return v[len(v)/2]
}

// Micros is d in microseconds.
func Micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
