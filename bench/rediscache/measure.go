package main

// One run: a backend at one fill, through the fill, store and query phases.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"frontdoor/bench/internal/load"
)

// result is one backend at one size.
type result struct {
	backend        string
	fill, replicas int
	err            error

	fillRPS, storeRPS float64
	fillSettle        time.Duration
	entries           []int64 // vector entries per replica (GET /status) when the queries began
	redisEntries      int64   // vector HASHes in Redis then; -1 for memory
	storeSettle       time.Duration

	queries, semantic, exact, wrong int
	storeErrs, queryErrs            int // client-visible: non-200 or no answer
	firstErr                        string
	reqP50, reqP99                  time.Duration
	queryRPS                        float64

	// Metrics: before the queries (fill and stores) and over the query phase.
	mStore, mQuery load.Metrics
	crashes        []string // processes that died during the run
	redis          string   // Redis's own view of the query phase
}

// runOne measures one backend at one fill on fresh processes.
func runOne(ctx context.Context, o opts, e *env, backend string, fill int) *result {
	r := &result{backend: backend, fill: fill, replicas: o.replicas}
	if backend == "memory" {
		r.replicas = 1
	}
	tag := fmt.Sprintf("%s, fill %d", backend, fill)
	fmt.Fprintf(os.Stderr, "%s: %d replica(s)\n", tag, r.replicas)
	dir := filepath.Join(e.dir, fmt.Sprintf("%s-%d", backend, fill))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		r.err = err
		return r
	}
	var started []*load.Proc
	defer func() { e.procs.Stop(started...) }()
	// A replica or Redis that died explains most failures: say so.
	defer func() {
		for _, p := range started {
			if how := p.Exited(); how != "" {
				excerpt := p.LogExcerpt()
				fmt.Fprintf(os.Stderr, "  %s exited during the run (%s); its log:\n%s\n", p.Name, how, excerpt)
				r.crashes = append(r.crashes, fmt.Sprintf("%s exited during the run (%s): %s", p.Name, how, firstLine(excerpt)))
			}
		}
	}()
	urls, rdb, err := startGateways(ctx, o, e, backend, dir, r.replicas, &started)
	if rdb != nil {
		defer rdb.Close()
	}
	if err != nil {
		r.err = err
		return r
	}

	if fill > 0 {
		if err := fillPhase(ctx, o, e, r, urls, rdb, fill); err != nil {
			r.err = err
			return r
		}
	}

	replies, d := send(ctx, urls, e.storeReqs, o.conc, true, "stores", 0)
	if ctx.Err() != nil {
		return r
	}
	errs, first := countErrors(replies)
	r.storeErrs += errs
	if r.firstErr == "" {
		r.firstErr = first
	}
	r.storeRPS = float64(len(replies)) / d.Seconds()
	entryOf := make([]string, len(replies))
	for i, rep := range replies {
		entryOf[i] = rep.entry
	}
	counts, waited, err := settle(ctx, urls, rdb, int64(fill+len(e.stored)), o.settleQuiet, o.settleMax)
	if err != nil {
		r.err = fmt.Errorf("settle after stores: %w", err)
		return r
	}
	r.entries, r.storeSettle, r.redisEntries = counts, waited, -1
	if rdb != nil {
		if r.redisEntries, err = redisVectors(ctx, rdb); err != nil {
			r.err = err
			return r
		}
	}
	inRedis := ""
	if r.redisEntries >= 0 {
		inRedis = fmt.Sprintf(" (in Redis: %d)", r.redisEntries)
	}
	fmt.Fprintf(os.Stderr, "  stores: %d in %s (%.0f/s), %d errors; settled after %s at %v vector entries%s\n",
		len(replies), d.Round(time.Millisecond), r.storeRPS, errs, waited.Round(100*time.Millisecond), counts, inRedis)
	before, err := load.ScrapeMetrics(urls...)
	if err != nil {
		r.err = err
		return r
	}
	r.mStore = before
	redisBefore := redisUsage(ctx, rdb)

	replies, d = send(ctx, urls, e.queryReqs, o.conc, false, "queries", o.queryRPS)
	r.redis = redisUsage(ctx, rdb).since(redisBefore, d) + latencyEvents(ctx, rdb)
	if ctx.Err() != nil {
		return r
	}
	r.queries = len(replies)
	r.queryRPS = float64(len(replies)) / d.Seconds()
	r.queryErrs, first = countErrors(replies)
	if r.firstErr == "" {
		r.firstErr = first
	}
	lats := make([]time.Duration, 0, len(replies))
	for i, rep := range replies {
		lats = append(lats, rep.lat)
		if rep.status != 200 {
			continue
		}
		switch rep.cache {
		case "hit-semantic":
			r.semantic++
		case "hit-exact":
			r.exact++
		default:
			continue
		}
		if rep.entry != entryOf[e.queryOf[i]] {
			r.wrong++
		}
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	r.reqP50, r.reqP99 = lats[len(lats)/2], lats[min(len(lats)-1, len(lats)*99/100)]
	// Let the misses' write-back finish, so that its errors count here.
	if _, _, err := settle(ctx, urls, rdb, int64(fill+len(e.stored)+len(replies)), o.settleQuiet, 30*time.Second); err != nil {
		r.err = fmt.Errorf("settle after queries: %w", err)
		return r
	}
	after, err := load.ScrapeMetrics(urls...)
	if err != nil {
		r.err = err
		return r
	}
	r.mQuery = after.Minus(before)
	fmt.Fprintf(os.Stderr, "  queries: %d in %s (%.0f/s), %d errors; hit rate %.1f%% (%d semantic, %d exact, %d on another entry); p50 %s p99 %s\n",
		r.queries, d.Round(time.Millisecond), r.queryRPS, r.queryErrs, 100*float64(r.semantic+r.exact)/float64(r.queries),
		r.semantic, r.exact, r.wrong, fmtDur(r.reqP50), fmtDur(r.reqP99))
	return r
}

// fillPhase stores fill distractors before the measured stores. The fill
// is set-up, not the measured load: it goes in chunks that the write-back
// queues can hold, each settled before the next, so that it drops nothing.
func fillPhase(ctx context.Context, o opts, e *env, r *result, urls []string, rdb *redis.Client, fill int) error {
	const chunk = 5000
	var counts []int64
	var waited, sent time.Duration
	for at := 0; at < fill; at += chunk {
		part := e.distract[at:min(at+chunk, fill)]
		reqs := make([]request, len(part))
		for i, f := range part {
			reqs[i] = request{f.body(f.text), tenants[f.tenant].key}
		}
		replies, d := send(ctx, urls, reqs, o.conc, true, "fill", 0)
		sent += d
		errs, first := countErrors(replies)
		r.storeErrs += errs
		if r.firstErr == "" {
			r.firstErr = first
		}
		var w time.Duration
		var err error
		counts, w, err = settle(ctx, urls, rdb, int64(at+len(part)), o.settleQuiet, o.settleMax)
		if err != nil {
			return fmt.Errorf("settle after fill: %w", err)
		}
		waited += w
	}
	r.fillRPS = float64(fill) / sent.Seconds()
	r.fillSettle = waited
	fmt.Fprintf(os.Stderr, "  fill: %d stores in %s (%.0f/s) in chunks of %d, %d errors; settled after %s at %v vector entries\n",
		fill, sent.Round(time.Millisecond), r.fillRPS, chunk, r.storeErrs, waited.Round(100*time.Millisecond), counts)
	return nil
}
