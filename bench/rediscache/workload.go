package main

// The load: sending a phase's requests and waiting for the write-back to
// settle.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"frontdoor/bench/internal/load"
)

// request is one chat request of a phase.
type request struct {
	body []byte
	key  string // the tenant's API key
}

// reply is what a request got.
type reply struct {
	status       int // 0: transport error
	cache, entry string
	lat          time.Duration
}

// send posts every request once, from conc clients; request i goes to
// gateway i mod len(urls). It stops early only when ctx is done.
// send sends reqs from conc clients, as fast as they answer, or, with rate
// > 0, request i at start + i/rate (a client that is behind sends at once).
func send(ctx context.Context, urls []string, reqs []request, conc int, noCache bool, label string, rate float64) ([]reply, time.Duration) {
	client := &fasthttp.Client{MaxConnsPerHost: conc, ReadTimeout: time.Minute, WriteTimeout: 10 * time.Second,
		NoDefaultUserAgentHeader: true, MaxIdemponentCallAttempts: 1}
	defer client.CloseIdleConnections()
	out := make([]reply, len(reqs))
	var next, done atomic.Int64
	start := time.Now()
	stopProgress := load.Every(20*time.Second, func() {
		fmt.Fprintf(os.Stderr, "    %s: %d/%d after %s\n", label, done.Load(), len(reqs), time.Since(start).Round(time.Second))
	})
	load.Workers(conc, func(req *fasthttp.Request, resp *fasthttp.Response) {
		for ctx.Err() == nil {
			i := int(next.Add(1) - 1)
			if i >= len(reqs) {
				return
			}
			if rate > 0 {
				time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
			}
			req.Reset()
			req.SetRequestURI(urls[i%len(urls)] + "/v1/chat/completions")
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.SetContentType("application/json")
			req.Header.Set("Authorization", "Bearer "+reqs[i].key)
			if noCache {
				req.Header.Set("Cache-Control", "no-cache")
			}
			req.SetBodyRaw(reqs[i].body)
			t0 := time.Now()
			err := client.Do(req, resp)
			r := reply{lat: time.Since(t0)}
			if err == nil {
				r.status = resp.StatusCode()
				r.cache, r.entry = string(resp.Header.Peek("X-Cache")), string(resp.Header.Peek("X-Cache-Entry"))
			}
			out[i] = r
			done.Add(1)
		}
	})
	stopProgress()
	return out, time.Since(start)
}

// vectorCounts reads cache.vector_entries from each gateway's /status.
func vectorCounts(urls []string) ([]int64, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	out := make([]int64, len(urls))
	for i, u := range urls {
		resp, err := c.Get(u + "/status")
		if err != nil {
			return nil, fmt.Errorf("status: %w", err)
		}
		var st struct {
			Cache *struct {
				Vectors int64 `json:"vector_entries"`
			} `json:"cache"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		switch {
		case err != nil:
			return nil, fmt.Errorf("status of %s: %w", u, err)
		case st.Cache == nil:
			return nil, fmt.Errorf("status of %s has no cache section", u)
		}
		out[i] = st.Cache.Vectors
	}
	return out, nil
}

// settle waits until every gateway reports want vector entries, or neither
// their counts nor Redis's key count (rdb, when not nil) changed for quiet,
// or limit has passed, and returns the gateways' counts.
func settle(ctx context.Context, urls []string, rdb *redis.Client, want int64, quiet, limit time.Duration) ([]int64, time.Duration, error) {
	start := time.Now()
	last := ""
	changed := start
	for {
		counts, err := vectorCounts(urls)
		if err == nil && rdb != nil {
			var keys int64
			keys, err = rdb.DBSize(ctx).Result()
			counts = append(counts, keys)
		}
		if err != nil && time.Since(start) > limit {
			return nil, time.Since(start), err
		}
		if err == nil {
			if now := fmt.Sprint(counts); now != last {
				last, changed = now, time.Now()
			}
			if rdb != nil {
				counts = counts[:len(counts)-1]
			}
			if minOf(counts) >= want || time.Since(changed) >= quiet || time.Since(start) > limit {
				return counts, time.Since(start), nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, time.Since(start), ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func minOf(v []int64) int64 {
	m := int64(math.MaxInt64)
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

// countErrors counts replies that are not 200 and describes the first.
func countErrors(rs []reply) (int, string) {
	n, first := 0, ""
	for _, r := range rs {
		if r.status == 200 {
			continue
		}
		n++
		if first == "" {
			first = fmt.Sprintf("status %d", r.status)
			if r.status == 0 {
				first = "no answer (transport error or timeout)"
			}
		}
	}
	return n, first
}
