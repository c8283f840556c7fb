package load

import (
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"time"
)

// WrkResult is one wrk run.
type WrkResult struct {
	Rate     float64 // requests a second
	Requests int
}

var (
	wrkRate   = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkCount  = regexp.MustCompile(`(\d+) requests in`)
	wrkErrors = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)|Socket errors: .*`)
)

// Wrk drives url with wrk (one thread, conc connections, for dur) and the
// Lua script, passing args to the script; a non-2xx answer or a socket
// error fails the run.
func Wrk(script, url string, conc int, dur time.Duration, args ...string) (WrkResult, error) {
	cmd := []string{"-t1", fmt.Sprintf("-c%d", conc), fmt.Sprintf("-d%ds", int(dur.Seconds())), "-s", script, url}
	if len(args) > 0 {
		cmd = append(append(cmd, "--"), args...)
	}
	out, err := exec.Command("wrk", cmd...).CombinedOutput()
	if err != nil {
		return WrkResult{}, fmt.Errorf("wrk: %w: %s", err, out)
	}
	if m := wrkErrors.Find(out); m != nil {
		return WrkResult{}, fmt.Errorf("wrk saw errors: %s", m)
	}
	r, c := wrkRate.FindSubmatch(out), wrkCount.FindSubmatch(out)
	if r == nil || c == nil {
		return WrkResult{}, fmt.Errorf("no Requests/sec in wrk output: %s", out)
	}
	rate, err := strconv.ParseFloat(string(r[1]), 64)
	if err != nil {
		return WrkResult{}, fmt.Errorf("wrk rate: %w", err)
	}
	n, err := strconv.Atoi(string(c[1]))
	if err != nil || n == 0 {
		return WrkResult{}, fmt.Errorf("wrk made no requests: %s", bytes.TrimSpace(out))
	}
	return WrkResult{Rate: rate, Requests: n}, nil
}
