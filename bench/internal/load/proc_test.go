package load

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"frontdoor/internal/testenv"
)

func TestProcsLaunchLogAndStop(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	var ps Procs
	defer ps.Stop()
	crash, err := ps.Launch(exec.Command("sh", "-c", "echo starting; echo 'panic: boom'; exit 3"), filepath.Join(dir, "crash.log"))
	if err != nil {
		t.Fatal(err)
	}
	sleeper, err := ps.Launch(exec.Command("sleep", "60"), "")
	if err != nil {
		t.Fatal(err)
	}
	if crash.Name != "sh" || sleeper.Name != "sleep" {
		t.Errorf("names %q, %q", crash.Name, sleeper.Name)
	}
	for deadline := time.Now().Add(5 * time.Second); crash.Exited() == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("sh did not exit")
		}
	}
	if got := crash.Exited(); !strings.Contains(got, "3") {
		t.Errorf("Exited() = %q, want exit status 3", got)
	}
	if got := crash.LogExcerpt(); got != "panic: boom" {
		t.Errorf("LogExcerpt() = %q, want the log from the panic on", got)
	}
	if sleeper.Exited() != "" {
		t.Fatal("sleep exited early")
	}
	ps.Stop(sleeper)
	if sleeper.Exited() == "" {
		t.Error("Stop(sleeper) left it running")
	}
	if len(ps.list) != 0 {
		t.Errorf("%d processes still listed", len(ps.list))
	}
	if _, err := ps.Launch(exec.Command(filepath.Join(dir, "no-such-binary")), ""); err == nil {
		t.Error("a missing binary started")
	}
}

func TestProcsTerminate(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep")
	}
	var ps Procs
	defer ps.Stop()
	p, err := ps.Launch(exec.Command("sleep", "60"), "")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	ps.Terminate(p, 10*time.Second)
	if p.Exited() == "" || time.Since(t0) > 5*time.Second {
		t.Errorf("SIGTERM did not end sleep at once: %q after %s", p.Exited(), time.Since(t0))
	}
}

func TestEveryStops(t *testing.T) {
	var n atomic.Int32
	stop := Every(time.Millisecond, func() { n.Add(1) })
	time.Sleep(30 * time.Millisecond)
	stop()
	after := n.Load()
	if after == 0 {
		t.Fatal("f was never called")
	}
	time.Sleep(20 * time.Millisecond)
	if n.Load() != after {
		t.Error("f was called after stop returned")
	}
}

func TestProcStatus(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	kb, err := ProcStatus(os.Getpid(), "VmRSS")
	if err != nil || kb <= 0 {
		t.Errorf("VmRSS = %d, %v", kb, err)
	}
	if _, err := ProcStatus(os.Getpid(), "NoSuchField"); err == nil {
		t.Error("a missing field was read")
	}
}

func TestStartRedis(t *testing.T) {
	testenv.RedisBinary(t) // skips without redis-server, unless make test requires it
	ctx := context.Background()
	var ps Procs
	defer ps.Stop()
	r, err := ps.StartRedis(ctx, t.TempDir(), "--maxmemory", "10mb")
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	got, err := rdb.ConfigGet(ctx, "maxmemory").Result()
	if err != nil || got["maxmemory"] != "10485760" {
		t.Errorf("maxmemory = %v, %v: the extra arguments were not passed", got, err)
	}
	ps.Stop(r.Proc)
	if r.Proc.Exited() == "" {
		t.Error("redis-server still runs")
	}
}

func TestRediSearchModuleMissing(t *testing.T) {
	t.Setenv("FRONTDOOR_REDISEARCH_MODULE", filepath.Join(t.TempDir(), "none.so"))
	if _, err := RediSearchModule(); err == nil {
		t.Error("a module that is not there was found")
	}
}
