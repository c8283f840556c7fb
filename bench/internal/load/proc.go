package load

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"
)

// Procs starts the processes of a benchmark and stops them all at the end.
type Procs struct{ cmds []*exec.Cmd }

// Start starts c, killed if the benchmark dies first, and waits until
// health answers 200 (no wait when health is "").
func (p *Procs) Start(c *exec.Cmd, health string) error {
	if c.SysProcAttr == nil {
		c.SysProcAttr = childAttr()
	}
	if err := c.Start(); err != nil {
		return err
	}
	p.cmds = append(p.cmds, c)
	if health == "" {
		return nil
	}
	return WaitUp(health)
}

// Stop kills and reaps every process started.
func (p *Procs) Stop() {
	for _, c := range p.cmds {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	p.cmds = nil
}

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

// StartFrontdoor runs dir/frontdoor serve on a free loopback port with
// config (YAML without a listen line, written to dir/name.yaml; its log
// goes to dir/name.log) and waits for /healthz. It returns the base URL
// (http://host:port) and the process.
func (p *Procs) StartFrontdoor(dir, name, config string) (string, *exec.Cmd, error) {
	addr := fmt.Sprintf("127.0.0.1:%d", FreePort())
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte("listen: "+addr+"\n"+config), 0o600); err != nil {
		return "", nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return "", nil, err
	}
	defer logFile.Close() // the child has its own descriptor
	c := exec.Command(filepath.Join(dir, "frontdoor"), "serve", "--config", path)
	c.Stderr = logFile
	base := "http://" + addr
	if err := p.Start(c, base+"/healthz"); err != nil {
		return "", nil, fmt.Errorf("frontdoor %s: %w", name, err)
	}
	return base, c, nil
}
