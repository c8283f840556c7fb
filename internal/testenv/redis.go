// Package testenv starts real dependencies for tests: a redis-server on a
// free loopback port and gpusim nodes in process. Everything it starts is
// stopped by t.Cleanup.
package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Redis is a redis-server process owned by one test.
type Redis struct {
	t    testing.TB
	port int
	dir  string
	args []string // extra server arguments, e.g. --loadmodule

	mu  sync.Mutex
	cmd *exec.Cmd
}

// RedisBinary finds redis-server, or skips the test with the install command
// when it is missing and FRONTDOOR_REQUIRE_REDIS is unset. `make test`
// installs it, so CI never skips.
func RedisBinary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	missing(t, "redis-server is not installed (apt-get install -y redis-server); `make test` installs it")
	return ""
}

// missing skips the test for want of a package, or fails it where
// FRONTDOOR_REQUIRE_REDIS says the packages must be there (make test).
func missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("FRONTDOOR_REQUIRE_REDIS") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// StartRedis starts a fresh, empty redis-server on a free 127.0.0.1 port.
// args are extra server arguments, such as "--maxmemory", "2mb".
func StartRedis(t testing.TB, args ...string) *Redis {
	t.Helper()
	RedisBinary(t)
	r := &Redis{t: t, port: FreePort(t), dir: t.TempDir(), args: args}
	r.Start()
	t.Cleanup(r.Kill)
	return r
}

// RediSearchModule finds the RediSearch module with vector search: the path
// in FRONTDOOR_REDISEARCH_MODULE, else shared/redis-modules beside the
// repository (CI has it). It skips the test with a clear message when there
// is none, so that `make test` passes on a machine without it.
func RediSearchModule(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("FRONTDOOR_REDISEARCH_MODULE"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("FRONTDOOR_REDISEARCH_MODULE=%s: %v", p, err)
		}
		return p
	}
	if p, ok := findUp("shared/redis-modules/redisearch-2.6.37.so"); ok {
		return p
	}
	t.Skip("RediSearch module not found (set FRONTDOOR_REDISEARCH_MODULE or put shared/redis-modules/redisearch-2.6.37.so beside the repository): the RediSearch vector path is untested in this run")
	return ""
}

// DebianRediSearch is Debian's redis-redisearch module (RediSearch 1.2: FT.*
// without vector fields), the "module without vector support" case. The test
// is skipped when the package is not installed; `make test` installs it.
func DebianRediSearch(t testing.TB) string {
	t.Helper()
	const p = "/usr/lib/redis/modules/redisearch.so"
	if _, err := os.Stat(p); err == nil {
		return p
	}
	missing(t, "Debian's redis-redisearch is not installed (apt-get install -y redis-redisearch); `make test` installs it")
	return ""
}

// StartRediSearch starts a fresh redis-server with the RediSearch module
// (vector search), or skips the test when the module is absent.
func StartRediSearch(t testing.TB, args ...string) *Redis {
	t.Helper()
	return StartRedis(t, append([]string{"--loadmodule", RediSearchModule(t)}, args...)...)
}

// findUp looks for rel in each parent of the working directory.
func findUp(rel string) (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// Addr is host:port.
func (r *Redis) Addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// URL is redis://host:port/0.
func (r *Redis) URL() string { return "redis://" + r.Addr() + "/0" }

// Start (re)starts the server on its port and waits until it answers PING.
func (r *Redis) Start() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return
	}
	cmd := exec.Command(RedisBinary(r.t), "--port", fmt.Sprint(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--protected-mode", "no",
		"--logfile", filepath.Join(r.dir, "redis.log"))
	cmd.Args = append(cmd.Args, r.args...)
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	r.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ping(r.Addr()) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
	r.t.Fatalf("redis-server on %s did not answer PING within 10s:\n%s", r.Addr(), log)
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (r *Redis) Kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
