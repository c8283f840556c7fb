package main

// The report: the Markdown table and its notes.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"frontdoor/bench/internal/load"
)

func report(o opts, e *env, rs []*result) {
	fmt.Printf("command: %s\n\n", commandLine())
	setup := "one frontdoor"
	if e.module != "" {
		ver := "redis-server"
		if out, err := exec.Command("redis-server", "--version").Output(); err == nil {
			if f := strings.Fields(string(out)); len(f) >= 3 {
				ver += " " + strings.TrimPrefix(f[2], "v=")
			}
		}
		setup = fmt.Sprintf("memory: one frontdoor; Redis backends: %d frontdoor replicas on one %s with %s", o.replicas, ver, filepath.Base(e.module))
	}
	fmt.Printf("Each backend and size on fresh processes (%s), one gpusim (ttft 0, itl 0, 16 tokens), %d clients round-robin over "+
		"the replicas, %d CPUs. Corpus (seed %d): %d stored questions in %d scopes (%d tenants × %d system prompts), sent with "+
		"Cache-Control: no-cache after the distractor fill, then %d paraphrases of them (%.0f%% same wording with a greeting, "+
		"thanks, case, punctuation or typo change; %.0f%% synonyms changed; %.0f%% rephrased). Hit rate and latencies are of the "+
		"query phase; store rps is of the stored questions. %s\n\n",
		setup, o.conc, runtime.NumCPU(), o.seed, len(e.stored), len(tenants)*len(systemPrompts), len(tenants), len(systemPrompts),
		len(e.queryReqs), 100*paraSameWording, 100*paraSynonyms, 100*(1-paraSameWording-paraSynonyms), pacing(o.queryRPS))
	fmt.Println("| backend | replicas | entries at query time | store rps | hit rate | hits on another entry | client errors (stores / queries) | cache errors (stores / queries) | breaker openings (stores / queries) | dropped writes (stores / queries) | search p50 / p99 | get p50 / p99 | request p50 / p99 |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	var notes []string
	for _, r := range rs {
		if r.err != nil && r.mQuery == nil {
			fmt.Printf("| %s | %d | fill %d: failed | | | | | | | | | | |\n", r.backend, r.replicas, r.fill)
			notes = append(notes, fmt.Sprintf("%s, fill %d: %s", r.backend, r.fill, strings.Join(append([]string{firstLine(r.err.Error())}, r.crashes...), "; ")))
			continue
		}
		hits := r.semantic + r.exact
		errOps := func(s load.Metrics) (string, map[string]float64) {
			m, ok := s.By("frontdoor_cache_errors_total", "op", nil)
			if !ok {
				return "n/a", nil
			}
			return fmtCount(sumOf(m)), m
		}
		eS, eSOps := errOps(r.mStore)
		eQ, eQOps := errOps(r.mQuery)
		open := map[string]string{"to": "open"}
		bS, bSPaths := counter(r.mStore, "frontdoor_cache_breaker_transitions_total", "path", open)
		bQ, bQPaths := counter(r.mQuery, "frontdoor_cache_breaker_transitions_total", "path", open)
		dS, dSReasons := counter(r.mStore, "frontdoor_cache_writes_dropped_total", "reason", nil)
		dQ, dQReasons := counter(r.mQuery, "frontdoor_cache_writes_dropped_total", "reason", nil)
		fmt.Printf("| %s | %d | %s | %.0f | **%.1f%%** | %.1f%% | %d / %d | %s / %s | %s / %s | %s / %s | %s | %s | %s / %s |\n",
			r.backend, r.replicas, fmtEntries(r.entries, r.redisEntries), r.storeRPS, 100*float64(hits)/float64(r.queries),
			100*float64(r.wrong)/float64(max(1, hits)), r.storeErrs, r.queryErrs, eS, eQ, bS, bQ, dS, dQ,
			histCell(r.mQuery, "search"), histCell(r.mQuery, "get"), fmtDur(r.reqP50), fmtDur(r.reqP99))
		var parts []string
		if r.fill > 0 {
			parts = append(parts, fmt.Sprintf("fill of %d at %.0f req/s settled in %s", r.fill, r.fillRPS, r.fillSettle.Round(100*time.Millisecond)))
		}
		parts = append(parts, fmt.Sprintf("stores settled in %s", r.storeSettle.Round(100*time.Millisecond)),
			fmt.Sprintf("queries at %.0f req/s: %d semantic and %d exact hits, %d on another entry than the paraphrased one", r.queryRPS, r.semantic, r.exact, r.wrong))
		for _, d := range []struct {
			what string
			m    map[string]float64
		}{{"cache errors by op, stores", eSOps}, {"cache errors by op, queries", eQOps}, {"breaker openings by path, stores", bSPaths},
			{"breaker openings by path, queries", bQPaths}, {"dropped writes by reason, stores", dSReasons}, {"dropped writes by reason, queries", dQReasons}} {
			if s := nonZero(d.m); s != "" {
				parts = append(parts, d.what+": "+s)
			}
		}
		if r.redis != "" {
			parts = append(parts, "during the queries, "+r.redis)
		}
		if r.storeErrs+r.queryErrs > 0 {
			parts = append(parts, "first client error: "+r.firstErr)
		}
		if r.err != nil {
			parts = append(parts, "error: "+firstLine(r.err.Error()))
		}
		parts = append(parts, r.crashes...)
		notes = append(notes, fmt.Sprintf("%s, fill %d: %s", r.backend, r.fill, strings.Join(parts, "; ")))
	}
	fmt.Println()
	for _, n := range notes {
		fmt.Println("- " + n)
	}
	fmt.Println("\nentries at query time: cache.vector_entries of each replica's GET /status (a range when they differ), and the vector " +
		"HASHes counted in Redis when that differs. hit rate: hits (X-Cache hit-semantic or hit-exact) over queries; hits on another entry: hits whose X-Cache-Entry is not the " +
		"entry stored for the paraphrased question (a distractor or a near-duplicate answered instead). Cache errors, breaker openings and " +
		"dropped writes are frontdoor_cache_errors_total, frontdoor_cache_breaker_transitions_total{to=\"open\"} and " +
		"frontdoor_cache_writes_dropped_total summed over the replicas: before the queries (fill, stores and their write-back) / during the " +
		"queries and their write-back; n/a: the gateway has no such series. search and get are frontdoor_cache_lookup_seconds (the " +
		"gateway's store calls) over the query phase, interpolated inside buckets; request is the client's latency of the queries.")
}

func counter(s load.Metrics, name, label string, match map[string]string) (string, map[string]float64) {
	m, ok := s.By(name, label, match)
	if !ok {
		return "n/a", nil
	}
	return fmtCount(sumOf(m)), m
}

func histCell(s load.Metrics, op string) string {
	bs, ok := s.Buckets("frontdoor_cache_lookup_seconds", map[string]string{"op": op})
	if !ok {
		return "n/a"
	}
	q := func(p float64) string {
		v, over, ok := load.BucketQuantile(bs, p)
		if !ok {
			return "–"
		}
		if over {
			return "> " + fmtDur(time.Duration(v*1e9))
		}
		return fmtDur(time.Duration(v * 1e9))
	}
	return q(0.5) + " / " + q(0.99)
}

func sumOf(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

func nonZero(m map[string]float64) string {
	var parts []string
	for k, v := range m {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s %s", k, fmtCount(v)))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func fmtCount(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func fmtEntries(c []int64, inRedis int64) string {
	if len(c) == 0 {
		return "?"
	}
	lo, hi := c[0], c[0]
	for _, v := range c {
		lo, hi = min(lo, v), max(hi, v)
	}
	s := strconv.FormatInt(lo, 10)
	if lo != hi {
		s = fmt.Sprintf("%d–%d", lo, hi)
	}
	if inRedis >= 0 && inRedis != hi {
		s += fmt.Sprintf(" (in Redis: %d)", inRedis)
	}
	return s
}

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	}
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// commandLine is the command as typed, shell-quoted where needed.
func commandLine() string {
	parts := []string{"go run ./bench/rediscache"}
	for _, a := range os.Args[1:] {
		if a == "" || strings.ContainsAny(a, " \t\n'\"$`\\|&;<>(){}*?#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

func pacing(rps float64) string {
	if rps > 0 {
		return fmt.Sprintf("Queries are paced at %.0f per second.", rps)
	}
	return "Queries are sent as fast as the clients get answers."
}
