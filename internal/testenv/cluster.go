package testenv

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisCluster is an open-source Redis Cluster of masters without replicas,
// owned by one test.
type RedisCluster struct {
	dir   string
	ports []int
	cmds  []*exec.Cmd
}

// StartRedisCluster starts masters redis-servers in cluster mode on free
// 127.0.0.1 ports, joins them with `redis-cli --cluster create` (slots split
// evenly) and waits until every node reports cluster_state:ok. args are extra
// server arguments, such as "--loadmodule", path.
func StartRedisCluster(t testing.TB, masters int, args ...string) *RedisCluster {
	t.Helper()
	server, cli := RedisBinary(t), redisCLI(t)
	c := &RedisCluster{dir: t.TempDir()}
	t.Cleanup(c.kill)
	create := []string{"--cluster", "create"}
	used := map[int]bool{}
	freePort := func() int { // distinct from the ones taken before
		for {
			if p := FreePort(t); !used[p] {
				used[p] = true
				return p
			}
		}
	}
	for range masters {
		// The bus port is set explicitly: the default, port+10000, may be
		// taken or above 65535.
		port, bus := freePort(), freePort()
		cmd := exec.Command(server, "--port", strconv.Itoa(port), "--cluster-port", strconv.Itoa(bus),
			"--bind", "127.0.0.1", "--protected-mode", "no", "--save", "", "--appendonly", "no",
			"--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", port),
			"--dir", c.dir, "--logfile", c.logFile(port))
		cmd.Args = append(cmd.Args, args...)
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		c.ports, c.cmds = append(c.ports, port), append(c.cmds, cmd)
		create = append(create, fmt.Sprintf("127.0.0.1:%d", port))
	}
	c.waitAll(t, 10*time.Second, "answer PING", func(addr string) bool { return ping(addr) })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, create...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s\n%s", err, out, c.logs())
	}
	c.waitAll(t, 15*time.Second, "report cluster_state:ok", func(addr string) bool {
		info, err := clusterInfo(addr)
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	return c
}

// Addrs lists the masters as host:port.
func (c *RedisCluster) Addrs() []string {
	out := make([]string, len(c.ports))
	for i, p := range c.ports {
		out[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	return out
}

func (c *RedisCluster) logFile(port int) string {
	return filepath.Join(c.dir, fmt.Sprintf("redis-%d.log", port))
}

// waitAll polls ok on every node until it holds for all, or fails the test
// with the servers' logs.
func (c *RedisCluster) waitAll(t testing.TB, d time.Duration, what string, ok func(addr string) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, addr := range c.Addrs() {
		for !ok(addr) {
			if time.Now().After(deadline) {
				t.Fatalf("redis cluster node %s did not %s within %v:\n%s", addr, what, d, c.logs())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func (c *RedisCluster) logs() string {
	var b strings.Builder
	for _, p := range c.ports {
		log, _ := os.ReadFile(c.logFile(p))
		fmt.Fprintf(&b, "--- redis-%d.log\n%s", p, log)
	}
	return b.String()
}

func (c *RedisCluster) kill() {
	for _, cmd := range c.cmds {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	c.cmds = nil
}

// redisCLI finds redis-cli, skipping or failing like RedisBinary.
func redisCLI(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("redis-cli"); err == nil {
		return p
	}
	const msg = "redis-cli is not installed (apt-get install -y redis-tools, which redis-server depends on); `make test` installs it"
	if os.Getenv("FRONTDOOR_REQUIRE_REDIS") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// clusterInfo returns the CLUSTER INFO text of one node.
func clusterInfo(addr string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := conn.Write([]byte("CLUSTER INFO\r\n")); err != nil {
		return "", err
	}
	rd := bufio.NewReader(conn)
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
	if !strings.HasPrefix(line, "$") || err != nil || n < 0 {
		return "", fmt.Errorf("CLUSTER INFO on %s: unexpected reply %q", addr, line)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(rd, body); err != nil {
		return "", err
	}
	return string(body), nil
}
