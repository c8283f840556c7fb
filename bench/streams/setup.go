package main

// The targets: gpusim, nginx + Lua, the bare proxies and the frontdoors.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"frontdoor/bench/internal/load"
)

// adminToken lets -profile fetch frontdoor's profiles (/debug/pprof/
// wants the admin token).
const adminToken = "49cccc4a0f8aced7178f666a6747200a08562d1ca0cdc95e6c5c9ebf35d91394"

// target is one process to measure and how to reach it.
type target struct {
	name   string
	url    string
	pid    int    // 0: gpusim itself (direct)
	admin  string // frontdoor's base URL, for pprof
	unique bool   // a new prompt per request (frontdoor's default config)
}

// env is a set of processes started for one part of the run.
type env struct {
	dir   string
	procs load.Procs
	stops []func()
}

func (e *env) close() {
	for _, s := range e.stops {
		s()
	}
	e.procs.Stop()
}

// setup starts gpusim with simArgs, nginx + Lua, the two bare proxies and
// two frontdoors (cache off, default config) in front of it.
func setup(o opts, bin string, maxConns int, simArgs ...string) (*env, []target, error) {
	e := &env{dir: bin}
	simAddr := load.Addr(load.FreePort())
	args := append([]string{"--listen", simAddr, "--model", "qwen3-8b", "--max-num-seqs", "20000", "--kv-capacity", "1000000000"}, simArgs...)
	sim := exec.Command(filepath.Join(bin, "gpusim"), args...)
	if err := e.procs.Start(sim, "http://"+simAddr+"/health"); err != nil {
		return e, nil, fmt.Errorf("gpusim: %w", err)
	}
	ts := []target{{name: "direct", url: "http://" + simAddr + "/v1/chat/completions", pid: sim.Process.Pid}}

	ng, err := startNginx(e, o.nginxDir, simAddr, maxConns)
	if err != nil {
		return e, nil, err
	}
	ts = append(ts, ng)
	// The floors: the smallest streaming proxies on Go's two HTTP stacks.
	for _, b := range []struct{ name, flag string }{{"bare proxy, fasthttp", "-stream"}, {"bare proxy, net/http", "-nethttp"}} {
		port := load.FreePort()
		c := exec.Command(filepath.Join(bin, "bareproxy"), "-listen", load.Addr(port), "-upstream", simAddr, b.flag)
		if err := e.procs.Start(c, fmt.Sprintf("http://%s/health", load.Addr(port))); err != nil {
			return e, nil, fmt.Errorf("%s: %w", b.name, err)
		}
		ts = append(ts, target{name: b.name, url: fmt.Sprintf("http://%s/v1/chat/completions", load.Addr(port)), pid: c.Process.Pid})
	}
	type fdTarget struct{ name, cache, bin, env string }
	fds := []fdTarget{
		{"frontdoor, cache off", "cache: {backend: off}\n", filepath.Join(bin, "frontdoor"), ""},
		{"frontdoor, default", "", filepath.Join(bin, "frontdoor"), ""},
	}
	if o.variant != "" {
		fds = append(fds, fdTarget{"frontdoor, cache off, " + o.variant, "cache: {backend: off}\n", filepath.Join(bin, "frontdoor"), o.variant})
	}
	if o.before != "" {
		fds = append(fds, fdTarget{"before: frontdoor, cache off", "cache: {backend: off}\n", o.before, ""},
			fdTarget{"before: frontdoor, default", "", o.before, ""})
	}
	for _, fd := range fds {
		base, p, err := e.procs.StartFrontdoor(load.Frontdoor{Dir: bin, Name: strings.NewReplacer(",", "", " ", "-", ":", "").Replace(fd.name),
			Config: fmt.Sprintf("logging: {level: info}\n%snodes:\n  - {name: sim, url: http://%s, models: [qwen3-8b], max_concurrency: %d}\n",
				fd.cache, simAddr, maxConns),
			Bin: fd.bin, Env: append([]string{"FRONTDOOR_ADMIN_TOKEN=" + adminToken}, append(strings.Fields(o.fdEnv), strings.Fields(fd.env)...)...)})
		if err != nil {
			return e, nil, err
		}
		ts = append(ts, target{name: fd.name, url: base + "/v1/chat/completions", pid: p.Pid(), admin: base, unique: fd.cache == ""})
	}
	return e, ts, nil
}

// startNginx renders the peer's template (as its start.sh does) with both
// upstreams on gpusim and starts nginx in the foreground of its own folder.
func startNginx(e *env, peer, simAddr string, maxConns int) (target, error) {
	if _, err := exec.LookPath("nginx"); err != nil {
		return target{}, fmt.Errorf("nginx is not installed (apt-get install -y nginx libnginx-mod-http-lua): %w", err)
	}
	tmpl, err := os.ReadFile(filepath.Join(peer, "nginx.conf.tmpl"))
	if err != nil {
		return target{}, fmt.Errorf("the nginx + Lua peer (-nginx): %w", err)
	}
	d := filepath.Join(e.dir, fmt.Sprintf("nginx-%d", load.FreePort()))
	for _, s := range []string{"logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(d, s), 0o700); err != nil {
			return target{}, err
		}
	}
	_, simPort, _ := net.SplitHostPort(simAddr)
	port := load.FreePort()
	conf := strings.NewReplacer("@DIR@", d, "@LISTEN_PORT@", strconv.Itoa(port), "@A_PORT@", simPort, "@B_PORT@", simPort).Replace(string(tmpl))
	if wc := 2*maxConns + 512; wc > 8192 {
		conf = strings.Replace(conf, "worker_connections 8192;", fmt.Sprintf("worker_connections %d;", wc), 1)
	}
	if err := os.WriteFile(filepath.Join(d, "nginx.conf"), []byte(conf), 0o600); err != nil {
		return target{}, err
	}
	c := exec.Command("nginx", "-p", d, "-c", "nginx.conf")
	if err := e.procs.Start(c, fmt.Sprintf("http://%s/__inflight", load.Addr(port))); err != nil {
		return target{}, fmt.Errorf("nginx: %w (see %s/logs/error.log)", err, d)
	}
	// The master forks one worker, which does the work: watch it.
	var worker int
	for i := 0; i < 50 && worker == 0; i++ {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", c.Process.Pid, c.Process.Pid))
		if f := strings.Fields(string(b)); len(f) == 1 {
			worker, _ = strconv.Atoi(f[0])
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if worker == 0 {
		return target{}, errors.New("nginx: no single worker process found")
	}
	e.stops = append(e.stops, func() { _ = c.Process.Signal(syscall.SIGQUIT) })
	return target{name: "nginx + Lua", url: fmt.Sprintf("http://%s/v1/chat/completions", load.Addr(port)), pid: worker}, nil
}
