package load

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a child process that Procs started.
type Proc struct {
	// Name names the process in messages: the program's file name unless
	// the caller sets another.
	Name string
	Cmd  *exec.Cmd
	// Log is the file that has its output, or "".
	Log  string
	done chan struct{} // closed once it has exited and been reaped
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Exited describes how the process ended, or is "" while it runs.
func (p *Proc) Exited() string {
	select {
	case <-p.done:
		return p.Cmd.ProcessState.String()
	default:
		return ""
	}
}

// LogExcerpt is the process's log from its first panic or fatal error,
// else its end ("" without a log).
func (p *Proc) LogExcerpt() string {
	if p.Log == "" {
		return ""
	}
	b, _ := os.ReadFile(p.Log)
	s := string(b)
	for _, mark := range []string{"panic:", "fatal error:"} {
		if i := strings.Index(s, mark); i >= 0 {
			return strings.TrimSpace(s[i:min(len(s), i+2500)])
		}
	}
	return strings.TrimSpace(s[max(0, len(s)-1500):])
}

// Procs starts the processes of a benchmark and stops them; every exit
// path calls Stop. On Linux a child also gets SIGKILL when the benchmark
// itself dies.
type Procs struct {
	mu   sync.Mutex
	list []*Proc
}

// Start starts c, killed if the benchmark dies first, and waits until
// health answers 200 (no wait when health is "").
func (ps *Procs) Start(c *exec.Cmd, health string) error {
	if _, err := ps.Launch(c, ""); err != nil {
		return err
	}
	if health == "" {
		return nil
	}
	return WaitUp(health)
}

// Launch starts c, with its standard output and error in the file logPath
// when that is not "", and returns it. It does not wait for anything.
func (ps *Procs) Launch(c *exec.Cmd, logPath string) (*Proc, error) {
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			return nil, fmt.Errorf("log file: %w", err)
		}
		defer f.Close() // the child has its own descriptor
		c.Stdout, c.Stderr = f, f
	}
	if c.SysProcAttr == nil {
		c.SysProcAttr = childAttr()
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(c.Path), err)
	}
	p := &Proc{Name: filepath.Base(c.Path), Cmd: c, Log: logPath, done: make(chan struct{})}
	go func() { _ = c.Wait(); close(p.done) }()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.list = append(ps.list, p)
	return p, nil
}

// Stop kills the given processes (every one started when none is given)
// and waits for them.
func (ps *Procs) Stop(which ...*Proc) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(which) == 0 {
		which = ps.list
	}
	for _, p := range which {
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
	ps.forget()
}

// Terminate sends p SIGTERM and gives it grace to exit before it kills it.
func (ps *Procs) Terminate(p *Proc, grace time.Duration) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
	ps.forget()
}

// forget drops the processes that have exited; ps.mu is held.
func (ps *Procs) forget() {
	kept := ps.list[:0]
	for _, p := range ps.list {
		if p.Exited() == "" {
			kept = append(kept, p)
		}
	}
	clear(ps.list[len(kept):])
	ps.list = kept
}

// Frontdoor says how StartFrontdoor runs one frontdoor.
type Frontdoor struct {
	// Dir holds the binary Dir/frontdoor, and gets the config
	// Dir/Name.yaml and the log Dir/Name.log.
	Dir, Name string
	// Config is the YAML config without its listen line.
	Config string
	// Bin, when set, is the binary instead of Dir/frontdoor.
	Bin string
	// Env is added to the benchmark's environment (KEY=VALUE).
	Env []string
	// Ready is the path waited for, /healthz when "" (e.g. /readyz).
	Ready string
}

// StartFrontdoor runs frontdoor serve on a free loopback port with f's
// config and waits until its Ready path answers 200. It returns the base
// URL (http://host:port) and the process, which is returned too when it
// started but did not get ready.
func (ps *Procs) StartFrontdoor(f Frontdoor) (string, *Proc, error) {
	addr := Addr(FreePort())
	path := filepath.Join(f.Dir, f.Name+".yaml")
	if err := os.WriteFile(path, []byte("listen: "+addr+"\n"+f.Config), 0o600); err != nil {
		return "", nil, err
	}
	bin := f.Bin
	if bin == "" {
		bin = filepath.Join(f.Dir, "frontdoor")
	}
	c := exec.Command(bin, "serve", "--config", path)
	if len(f.Env) > 0 {
		c.Env = append(os.Environ(), f.Env...)
	}
	p, err := ps.Launch(c, filepath.Join(f.Dir, f.Name+".log"))
	if err != nil {
		return "", nil, fmt.Errorf("frontdoor %s: %w", f.Name, err)
	}
	base, ready := "http://"+addr, f.Ready
	if ready == "" {
		ready = "/healthz"
	}
	if err := WaitUp(base + ready); err != nil {
		return "", p, fmt.Errorf("frontdoor %s: %w\n%s", f.Name, err, p.LogExcerpt())
	}
	return base, p, nil
}
