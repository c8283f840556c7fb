// Command verified measures the verified semantic cache (issue 27): it
// replays labelled sentence pairs through frontdoor processes, one with a
// fixed threshold and one with cache.semantic.verify (a gpusim judge that
// answers from the same labels), for each starting threshold, and prints
// markdown tables.
//
//	go run ./bench/verified [-data ../shared/eval/pawsx_zh_valid.tsv] [-thresholds 0.75,0.99] [-target 0.02] [-limit N] [-seed 1]
//
// The pairs are shuffled with -seed and split: the first -learn share is
// the learn phase, the rest is measured. For each pair the first sentence
// is sent as a chat request that skips the lookup (Cache-Control:
// no-cache), so it misses and is stored; once the entry is stored (GET
// /admin/cache/{id}) the second sentence is sent lookup-only (X-Cache-Only:
// 1), so it is answered from the cache or not at all and the cache only
// ever holds first sentences. A hit on the pair's own first sentence is a
// true hit for label 1 and a false hit for label 0; a hit on another pair's
// entry has no label and is reported apart. Pairs whose texts are equal
// after trimming are left out (an exact hit is no semantic decision).
// The data is read from -data and never copied into the repository.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"frontdoor/bench/internal/load"
	"frontdoor/cache"
)

const (
	model       = "qwen3-8b"
	judgeModel  = "judge"
	adminToken  = "270771fa6c406e8d9de0c5fa050111e42b14ad04ac0b9c1fd09d1500bda8d110"
	systemMsg   = "You are a helpful assistant. Answer the question."
	storeWait   = 5 * time.Second
	drainWait   = 120 * time.Second
	tokenEnvVar = "FRONTDOOR_ADMIN_TOKEN"
)

type options struct {
	data       string
	thresholds []float64
	target     float64
	limit      int
	seed       uint64
	learn      float64
	grey       float64
	keep       bool
	repeats    int
}

type pair struct {
	s1, s2 string
	label  int
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "verified:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	var o options
	var thr string
	fs := flag.NewFlagSet("verified", flag.ContinueOnError)
	fs.StringVar(&o.data, "data", "../shared/eval/pawsx_zh_valid.tsv", "labelled pairs, sentence1<TAB>sentence2<TAB>label (also gpusim's --judge-labels)")
	fs.StringVar(&thr, "thresholds", "0.75,0.99", "starting thresholds, comma-separated: each runs fixed and verified")
	fs.Float64Var(&o.target, "target", 0.02, "verify.target_false_hit_rate")
	fs.IntVar(&o.limit, "limit", 0, "use only the first N pairs after the shuffle (0: all)")
	fs.Uint64Var(&o.seed, "seed", 1, "shuffle seed")
	fs.Float64Var(&o.learn, "learn", 0.6, "share of the pairs in the learn phase")
	fs.Float64Var(&o.grey, "grey-zone", 0.1, "verify.grey_zone")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary folder with the configs and logs")
	fs.IntVar(&o.repeats, "repeats", 2000, "after the measured part, ask this many second sentences again, Zipf-distributed over the measured pairs (0: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for f := range strings.SplitSeq(thr, ",") {
		t, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || t <= 0 || t > 1 {
			return fmt.Errorf("-thresholds: %q is not in (0, 1]", f)
		}
		o.thresholds = append(o.thresholds, t)
	}
	data, err := filepath.Abs(o.data)
	if err != nil {
		return err
	}
	pairs, same, err := readPairs(data)
	if err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(o.seed, 0))
	total := len(pairs)
	r.Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
	if o.limit > 0 && o.limit < len(pairs) {
		pairs = pairs[:o.limit]
	}
	split := int(float64(len(pairs)) * o.learn)
	learn, measure := pairs[:split], pairs[split:]

	dir, err := load.BuildTemp("fd-verified", "frontdoor", "gpusim")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "verified: configs and logs in", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	var procs load.Procs
	defer procs.Stop()
	simAddr := load.Addr(load.FreePort())
	sim := exec.Command(filepath.Join(dir, "gpusim"), "--listen", simAddr, "--judge-labels", data, "--ttft", "0", "--itl", "0",
		"--model", model, "--model", judgeModel, "--max-num-seqs", "64", "--output-tokens", "8", "--seed", "1")
	if _, err := procs.Launch(sim, filepath.Join(dir, "gpusim.log")); err != nil {
		return err
	}
	if err := load.WaitUp("http://" + simAddr + "/health"); err != nil {
		return err
	}

	start := time.Now()
	var results []result
	for _, t := range o.thresholds {
		// fixed: no judge; audited: every hit judged, the threshold fixed
		// (entries judged wrong are still refused); verified: the
		// threshold follows the evidence to the target.
		for _, mode := range []string{"fixed", "audited", "verified"} {
			name := fmt.Sprintf("%s-%.2f", mode, t)
			verified := mode != "fixed"
			target := o.target
			if mode == "audited" {
				target = 0
			}
			base, p, err := procs.StartFrontdoor(load.Frontdoor{Dir: dir, Name: name, Config: config(o, simAddr, t, verified, target),
				Env: []string{tokenEnvVar + "=" + adminToken}})
			if err != nil {
				return err
			}
			res, err := replay(base, learn, measure, verified, o)
			procs.Stop(p)
			if err != nil {
				return fmt.Errorf("%s: %w\n%s", name, err, p.LogExcerpt())
			}
			res.start, res.verified, res.mode = t, verified, mode
			results = append(results, res)
			fmt.Fprintf(os.Stderr, "verified: %s done (%s so far)\n", name, time.Since(start).Round(time.Second))
		}
	}
	report(out, o, args, total, same, len(learn), len(measure), results, time.Since(start))
	return nil
}

// readPairs reads the labelled pairs, leaving out those whose two texts
// are equal after trimming (counted).
func readPairs(path string) (pairs []pair, same int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 3 || (fields[2] != "0" && fields[2] != "1") {
			continue
		}
		p := pair{s1: strings.TrimSpace(fields[0]), s2: strings.TrimSpace(fields[1]), label: int(fields[2][0] - '0')}
		if p.s1 == "" || p.s2 == "" {
			continue
		}
		if p.s1 == p.s2 {
			same++
			continue
		}
		pairs = append(pairs, p)
	}
	if err := sc.Err(); err != nil {
		return nil, 0, err
	}
	if len(pairs) == 0 {
		return nil, 0, fmt.Errorf("%s: no labelled pair", path)
	}
	return pairs, same, nil
}

// config is one frontdoor's configuration: the memory cache and the local
// embedder (defaults), threshold t, and the judge when verified.
func config(o options, simAddr string, t float64, verified bool, target float64) string {
	v := ""
	if verified {
		v = fmt.Sprintf("\n    verify: {judge_model: %s, audit_rate: 1, max_judge_rps: 1000, queue: 100000, target_false_hit_rate: %g, min_threshold: 0.75, max_threshold: 0.99, grey_zone: %g}",
			judgeModel, target, o.grey)
	}
	return fmt.Sprintf(`logging: {level: info, access_log: false}
admin: {show_cached_questions: true}
cache:
  backend: memory
  semantic:
    enabled: true
    threshold: %g%s
nodes:
  - {name: sim, url: http://%s, models: [%s, %s], max_concurrency: 256}
`, t, v, simAddr, model, judgeModel)
}

// tally counts the second sentences' answers of one phase.
type tally struct {
	pairs     [2]int // by label
	hits      [2]int // hits on the pair's own first sentence, by label
	otherHits int    // hits on another pair's entry with another text (no label)
	sameText  int    // hits counted in hits whose entry is another pair's with the same text
	// The similarity and label of each hit counted in hits.
	sims   []float64
	labels []int
}

func (t tally) paraphrase() float64 { return ratio(t.hits[1], t.pairs[1]) }
func (t tally) falseHits() float64  { return ratio(t.hits[0], t.pairs[0]) }
func (t tally) wrongShare() float64 { return ratio(t.hits[0], t.hits[0]+t.hits[1]) }

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

type result struct {
	start          float64
	verified       bool   // a judge audits the hits
	mode           string // fixed, audited or verified
	learn, measure tally
	// After the learn phase (drained) and at the end (drained).
	learnStatus, endStatus verifyStatus
	duration               time.Duration
	repeats                [4]tally // the repeated asks, by quarter
}

type verifyStatus struct {
	FalseHitRate cache.Interval `json:"false_hit_rate"`
	Calls        int64          `json:"judge_calls"`
	Failures     int64          `json:"judge_failures"`
	Queued       int            `json:"queued"`
	Dropped      uint64         `json:"dropped_audits"`
	Thresholds   []struct {
		Model     string  `json:"model"`
		Threshold float64 `json:"threshold"`
		Samples   int     `json:"samples"`
	} `json:"thresholds"`
}

// threshold is the model's threshold as the judge moved it, or 0.
func (s verifyStatus) threshold() (float64, int) {
	for _, t := range s.Thresholds {
		if t.Model == model {
			return t.Threshold, t.Samples
		}
	}
	return 0, 0
}

var client = &http.Client{Timeout: 30 * time.Second}

func replay(base string, learn, measure []pair, verified bool, o options) (result, error) {
	var res result
	t0 := time.Now()
	var err error
	if res.learn, err = phase(base, learn); err != nil {
		return res, err
	}
	if verified {
		if res.learnStatus, err = drain(base); err != nil {
			return res, err
		}
	}
	if res.measure, err = phase(base, measure); err != nil {
		return res, err
	}
	if verified {
		if res.endStatus, err = drain(base); err != nil {
			return res, err
		}
	}
	res.duration = time.Since(t0)
	if o.repeats > 0 && len(measure) > 1 {
		// The same questions again, popular ones often: the judge's
		// verdicts on an entry and a question accumulate.
		z := rand.NewZipf(rand.New(rand.NewPCG(o.seed, 2)), 1.2, 1, uint64(len(measure)-1))
		for i := range o.repeats {
			p := measure[z.Uint64()]
			st, h, err := chat(base, p.s2, "X-Cache-Only", "1")
			if err != nil {
				return res, err
			}
			q := &res.repeats[min(3, 4*i/o.repeats)]
			q.pairs[p.label]++
			if err := q.count(base, p, "", st, h); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

func phase(base string, pairs []pair) (tally, error) {
	var t tally
	for _, p := range pairs {
		st, h, err := chat(base, p.s1, "Cache-Control", "no-cache")
		if err != nil {
			return t, err
		}
		id := h.Get("X-Cache-Entry")
		if st != 200 || h.Get("X-Cache") != "miss" || id == "" {
			return t, fmt.Errorf("first sentence: status %d, X-Cache %q, X-Cache-Entry %q", st, h.Get("X-Cache"), id)
		}
		if err := waitStored(base, id); err != nil {
			return t, err
		}
		st, h, err = chat(base, p.s2, "X-Cache-Only", "1")
		if err != nil {
			return t, err
		}
		t.pairs[p.label]++
		if err := t.count(base, p, id, st, h); err != nil {
			return t, err
		}
	}
	return t, nil
}

// count classifies the answer (st, h) to p's second sentence: a hit on the
// pair's own entry (id, or one storing the same first sentence) counts
// under the pair's label, another pair's entry as unlabelled.
func (t *tally) count(base string, p pair, id string, st int, h http.Header) error {
	switch xc := h.Get("X-Cache"); {
	case st == 204:
	case st != 200:
		return fmt.Errorf("second sentence: status %d", st)
	case xc == "hit-semantic" || xc == "hit-exact":
		matched := h.Get("X-Cache-Matched")
		if matched == "" {
			matched = h.Get("X-Cache-Entry")
		}
		own := matched == id
		if !own {
			// Another pair's entry: the pair's label applies when it
			// stores the same question as this pair's first sentence.
			var e struct {
				Question *string `json:"question"`
			}
			if st, err := adminGet(base, "/admin/cache/"+matched, &e); err != nil || st != 200 || e.Question == nil {
				return fmt.Errorf("GET /admin/cache/%s: status %d, %v", matched, st, err)
			}
			if own = strings.TrimSpace(*e.Question) == p.s1; own {
				t.sameText++
			}
		}
		if !own {
			t.otherHits++
			return nil
		}
		t.hits[p.label]++
		sim, _ := strconv.ParseFloat(h.Get("X-Cache-Similarity"), 64)
		if xc == "hit-exact" {
			sim = 1
		}
		t.sims, t.labels = append(t.sims, sim), append(t.labels, p.label)
	}
	return nil
}

// chat sends text as the user message and returns the status and headers.
func chat(base, text string, hdr ...string) (int, http.Header, error) {
	body, _ := json.Marshal(map[string]any{
		"model": model, "temperature": 0, "max_tokens": 8,
		"messages": []map[string]string{{"role": "system", "content": systemMsg}, {"role": "user", "content": text}},
	})
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(string(body)))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, nil
}

func adminGet(base, path string, into any) (int, error) {
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if into == nil || resp.StatusCode != 200 {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	return resp.StatusCode, json.NewDecoder(resp.Body).Decode(into)
}

// waitStored waits until the write-back has stored entry id.
func waitStored(base, id string) error {
	deadline := time.Now().Add(storeWait)
	for {
		st, err := adminGet(base, "/admin/cache/"+id, nil)
		if err != nil {
			return err
		}
		if st == 200 {
			return nil
		}
		if st != 404 {
			return fmt.Errorf("GET /admin/cache/%s: status %d", id, st)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("entry %s not stored within %s", id, storeWait)
		}
		time.Sleep(time.Millisecond)
	}
}

// drain waits until the judge's queue is empty and every call has its
// verdict counted, and returns /status cache.verify.
func drain(base string) (verifyStatus, error) {
	deadline := time.Now().Add(drainWait)
	for {
		var s struct {
			Cache struct {
				Verify *verifyStatus `json:"verify"`
			} `json:"cache"`
		}
		if _, err := adminGet(base, "/status", &s); err != nil {
			return verifyStatus{}, err
		}
		if s.Cache.Verify == nil {
			return verifyStatus{}, errors.New("/status has no cache.verify")
		}
		m, err := load.ScrapeMetrics(base)
		if err != nil {
			return verifyStatus{}, err
		}
		done, _ := m.Sum("frontdoor_cache_verify_total", nil)
		v := *s.Cache.Verify
		if v.Queued == 0 && int64(done) >= v.Calls {
			return v, nil
		}
		if time.Now().After(deadline) {
			return v, fmt.Errorf("the judge queue did not drain within %s (queued %d, calls %d, verdicts %.0f)", drainWait, v.Queued, v.Calls, done)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func report(out io.Writer, o options, args []string, total, same, nLearn, nMeasure int, rs []result, took time.Duration) {
	fmt.Fprintf(out, "`%s`\n\n", strings.TrimSpace("go run ./bench/verified "+strings.Join(args, " ")))
	fmt.Fprintf(out, "%d labelled pairs with two different texts (%d with equal texts left out), shuffled with seed %d: %d to learn, %d measured; target_false_hit_rate %g, grey_zone %g, min/max threshold 0.75/0.99; %s in all.\n\n",
		total, same, o.seed, nLearn, nMeasure, o.target, o.grey, took.Round(time.Second))
	fmt.Fprintln(out, "Measured part (40%):")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| start | cache | paraphrase hits | false hits on label-0 pairs | wrong share of hits | of the hits, on another pair's entry with the same first sentence | hits on other pairs' entries (no label) | threshold at the end | judge calls |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		m := r.measure
		kind, thr, calls := r.mode, fmt.Sprintf("%.2f", r.start), "-"
		if r.verified {
			t, n := r.endStatus.threshold()
			if t == 0 {
				t = r.start
			}
			thr = fmt.Sprintf("%.3f (%d samples)", t, n)
			calls = strconv.FormatInt(r.endStatus.Calls, 10)
		}
		fmt.Fprintf(out, "| %.2f | %s | %s (%d/%d) | %s (%d/%d) | %s | %d | %d | %s | %s |\n", r.start, kind,
			pct(m.paraphrase()), m.hits[1], m.pairs[1], pct(m.falseHits()), m.hits[0], m.pairs[0], pct(m.wrongShare()),
			m.sameText, m.otherHits, thr, calls)
	}
	sweep(out, rs)
	if o.repeats > 0 {
		fmt.Fprintln(out)
		fmt.Fprintf(out, "Then %d asks of the measured pairs' second sentences again, Zipf (s 1.2) over the pairs, lookup only: hits on label-0 pairs (wrong) and label-1 pairs (right) per quarter of the asks:\n\n", o.repeats)
		fmt.Fprintln(out, "| start | cache | wrong hits, quarters 1 / 2 / 3 / 4 | right hits, quarters 1 / 2 / 3 / 4 |")
		fmt.Fprintln(out, "|---|---|---|---|")
		for _, r := range rs {
			kind := r.mode
			q := r.repeats
			fmt.Fprintf(out, "| %.2f | %s | %d / %d / %d / %d | %d / %d / %d / %d |\n", r.start, kind,
				q[0].hits[0], q[1].hits[0], q[2].hits[0], q[3].hits[0], q[0].hits[1], q[1].hits[1], q[2].hits[1], q[3].hits[1])
		}
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Learn phase (60%), with a judge: /status's false-hit rate after it (audit_rate 1) against the true wrong share of its hits on labelled pairs:")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| start | cache | learn hits (label 1 / label 0 / other) | true wrong share | /status estimate [95% interval], samples | contains it | threshold after learn | judge calls, failures, dropped |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		if !r.verified {
			continue
		}
		l, s := r.learn, r.learnStatus
		w := l.wrongShare()
		in := "yes"
		switch {
		case s.FalseHitRate.Samples == 0:
			in = "n/a (no sample)"
		case w < s.FalseHitRate.Lower || w > s.FalseHitRate.Upper:
			in = "no"
		}
		t, _ := s.threshold()
		if t == 0 {
			t = r.start
		}
		fmt.Fprintf(out, "| %.2f | %s | %d / %d / %d | %s | %s [%s, %s], %d | %s | %.3f | %d, %d, %d |\n", r.start, r.mode, l.hits[1], l.hits[0], l.otherHits,
			pct(w), pct(s.FalseHitRate.Estimate), pct(s.FalseHitRate.Lower), pct(s.FalseHitRate.Upper), s.FalseHitRate.Samples, in, t,
			s.Calls, s.Failures, s.Dropped)
	}
}

// sweep prints what fixed thresholds at or above the lowest fixed run's
// would have served on the measured part: a hit at similarity s there is
// one for every threshold up to s (approximately: at a higher threshold
// another entry that was nearer but vetoed, or a lower-ranked one, cannot
// take its place, as it could in a real run).
func sweep(out io.Writer, rs []result) {
	var low *result
	for i := range rs {
		if !rs[i].verified && (low == nil || rs[i].start < low.start) {
			low = &rs[i]
		}
	}
	if low == nil {
		return
	}
	m := low.measure
	fmt.Fprintf(out, "\nFixed thresholds on the measured part, from the fixed %.2f run's hits and their X-Cache-Similarity:\n\n", low.start)
	fmt.Fprintln(out, "| threshold | paraphrase hits | false hits on label-0 pairs | wrong share of hits |")
	fmt.Fprintln(out, "|---|---|---|---|")
	for _, t := range []float64{0.75, 0.80, 0.85, 0.90, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99} {
		if t < low.start {
			continue
		}
		var h [2]int
		for i, s := range m.sims {
			if s >= t-1e-9 {
				h[m.labels[i]]++
			}
		}
		fmt.Fprintf(out, "| %.2f | %s | %s | %s |\n", t, pct(ratio(h[1], m.pairs[1])), pct(ratio(h[0], m.pairs[0])), pct(ratio(h[0], h[0]+h[1])))
	}
}
