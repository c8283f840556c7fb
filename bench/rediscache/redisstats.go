package main

// What Redis says of its own work: vectors stored, CPU, commands and
// latency events.

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisVectors counts the vector HASHes in Redis (SCAN, so only between phases).
func redisVectors(ctx context.Context, rdb *redis.Client) (int64, error) {
	var n int64
	iter := rdb.Scan(ctx, 0, keyPrefix+"c:v:*", 1000).Iterator()
	for iter.Next(ctx) {
		n++
	}
	if err := iter.Err(); err != nil {
		return 0, fmt.Errorf("scan vectors: %w", err)
	}
	return n, nil
}

// redisStats is what Redis says of its own work: CPU seconds and, by
// command, calls and microseconds.
type redisStats struct {
	cpu, forks, forkUsec float64
	calls                map[string][2]float64
}

func redisUsage(ctx context.Context, rdb *redis.Client) redisStats {
	st := redisStats{calls: map[string][2]float64{}}
	if rdb == nil {
		return st
	}
	info, err := rdb.Info(ctx, "cpu", "stats", "commandstats").Result()
	if err != nil {
		return st
	}
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case k == "used_cpu_sys" || k == "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			st.cpu += f
		case k == "total_forks":
			st.forks, _ = strconv.ParseFloat(v, 64)
		case k == "latest_fork_usec":
			st.forkUsec, _ = strconv.ParseFloat(v, 64)
		case strings.HasPrefix(k, "cmdstat_"):
			var calls, usec float64
			for _, kv := range strings.Split(v, ",") {
				name, val, _ := strings.Cut(kv, "=")
				switch name {
				case "calls":
					calls, _ = strconv.ParseFloat(val, 64)
				case "usec":
					usec, _ = strconv.ParseFloat(val, 64)
				}
			}
			st.calls[strings.TrimPrefix(k, "cmdstat_")] = [2]float64{calls, usec}
		}
	}
	return st
}

// since describes the work between before and st over d: Redis's share of
// a core, and the commands that took most of its time.
func (st redisStats) since(before redisStats, d time.Duration) string {
	if len(st.calls) == 0 {
		return ""
	}
	type cmd struct {
		name        string
		calls, usec float64
	}
	var cmds []cmd
	var total float64
	for name, cu := range st.calls {
		b := before.calls[name]
		c := cmd{strings.ToLower(name), cu[0] - b[0], cu[1] - b[1]}
		if c.calls > 0 {
			cmds = append(cmds, c)
			total += c.usec
		}
	}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].usec > cmds[j].usec })
	out := fmt.Sprintf("Redis used %.0f%% of a core (commands %.0f%%)", 100*(st.cpu-before.cpu)/d.Seconds(), 100*total/1e6/d.Seconds())
	for _, c := range cmds[:min(4, len(cmds))] {
		out += fmt.Sprintf("; %s %.0f calls, %.0f µs each", c.name, c.calls, c.usec/c.calls)
	}
	if n := st.forks - before.forks; n > 0 {
		out += fmt.Sprintf("; %.0f forks (the last stopped Redis for %.0f ms)", n, st.forkUsec/1000)
	}
	return out
}

// latencyEvents lists the events in which Redis itself was busy for 10 ms
// or more (LATENCY LATEST), after "; ", or is "".
func latencyEvents(ctx context.Context, rdb *redis.Client) string {
	if rdb == nil {
		return ""
	}
	ev, err := rdb.Do(ctx, "LATENCY", "LATEST").Slice()
	if err != nil || len(ev) == 0 {
		return ""
	}
	var parts []string
	for _, e := range ev {
		if f, ok := e.([]any); ok && len(f) >= 4 {
			parts = append(parts, fmt.Sprintf("%v (latest %v ms, max %v ms)", f[0], f[2], f[3]))
		}
	}
	return "; Redis latency events: " + strings.Join(parts, ", ")
}
