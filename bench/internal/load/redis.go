package load

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRediSearchModule is where RediSearchModule looks when
// $FRONTDOOR_REDISEARCH_MODULE is unset, from the repository root.
const DefaultRediSearchModule = "../shared/redis-modules/redisearch-2.6.37.so"

// RediSearchModule is the absolute path of the RediSearch module:
// $FRONTDOOR_REDISEARCH_MODULE, else DefaultRediSearchModule. It fails
// when the file is not there.
func RediSearchModule() (string, error) {
	if p := os.Getenv("FRONTDOOR_REDISEARCH_MODULE"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("FRONTDOOR_REDISEARCH_MODULE: %w", err)
		}
		return filepath.Abs(p)
	}
	p, err := filepath.Abs(DefaultRediSearchModule)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("the RediSearch module: set FRONTDOOR_REDISEARCH_MODULE or put it at %s (run from the repository root): %w", p, err)
	}
	return p, nil
}

// Redis is a redis-server that StartRedis started.
type Redis struct {
	Addr string // 127.0.0.1:port
	Port int
	Proc *Proc
}

// StartRedis starts an empty redis-server on a free loopback port that
// keeps nothing on disk (--save "" --appendonly no), with dir as its
// folder, its output in dir/redis.log and args added (such as
// --loadmodule PATH), and waits until it answers PING.
func (ps *Procs) StartRedis(ctx context.Context, dir string, args ...string) (Redis, error) {
	port := FreePort()
	args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}, args...)
	p, err := ps.Launch(exec.Command("redis-server", args...), filepath.Join(dir, "redis.log"))
	if err != nil {
		return Redis{}, err
	}
	r := Redis{Addr: Addr(port), Port: port, Proc: p}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err = rdb.Ping(ctx).Err(); err == nil {
			return r, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			ps.Stop(p)
			return Redis{}, fmt.Errorf("redis-server on %s: %w\n%s", r.Addr, err, p.LogExcerpt())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
