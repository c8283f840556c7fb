package balancer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// engineKind selects the metric names read from a node's /metrics.
type engineKind uint8

const (
	kindVLLM engineKind = iota
	kindTGI
	kindSGLang
	kindOpenAI // no engine metrics
)

func parseKind(s string) engineKind {
	switch s {
	case "tgi":
		return kindTGI
	case "sglang":
		return kindSGLang
	case "openai":
		return kindOpenAI
	}
	return kindVLLM
}

// engineMetrics is one scrape, immutable once stored. A NaN field was
// absent from the scrape.
type engineMetrics struct {
	at       int64 // unix ns (pool clock)
	inflight int64 // our in-flight count when the scrape was sent
	waiting  float64
	running  float64
	kv       float64 // KV-cache usage, 0..1
	// The engine's prefix cache, in tokens: cumulative hits and queries
	// (vLLM v1), and its KV capacity (vLLM's cache_config_info, SGLang's
	// num_used_tokens ÷ token_usage). NaN or 0 when absent.
	prefixHits, prefixQueries float64
	kvCapacity                float64
	// prefixRate is a hit rate the engine reports as a gauge over its own
	// recent window (SGLang's cache_hit_rate); NaN when absent.
	prefixRate float64
}

// metric families of interest, per kind.
const (
	famWaiting = iota
	famRunning
	famKV
	famKVLegacy   // vLLM before 0.9: gpu_cache_usage_perc
	famTokensUsed // TGI: tgi_batch_current_max_tokens
	famTokensMax  // TGI: tgi_batch_max_total_tokens
	famPrefixHits
	famPrefixQueries
	famUsedTokens // SGLang: num_used_tokens, with token_usage its KV capacity
	famPrefixRate // SGLang: cache_hit_rate
	numFams
)

func family(k engineKind, name []byte) int {
	switch k {
	case kindVLLM:
		switch string(name) {
		case "vllm:num_requests_waiting":
			return famWaiting
		case "vllm:num_requests_running":
			return famRunning
		case "vllm:kv_cache_usage_perc":
			return famKV
		case "vllm:gpu_cache_usage_perc":
			return famKVLegacy
		case "vllm:prefix_cache_hits_total":
			return famPrefixHits
		case "vllm:prefix_cache_queries_total":
			return famPrefixQueries
		}
	case kindTGI:
		switch string(name) {
		case "tgi_queue_size":
			return famWaiting
		case "tgi_batch_current_size":
			return famRunning
		case "tgi_batch_current_max_tokens":
			return famTokensUsed
		case "tgi_batch_max_total_tokens":
			return famTokensMax
		}
	case kindSGLang:
		switch string(name) {
		case "sglang:num_queue_reqs":
			return famWaiting
		case "sglang:num_running_reqs":
			return famRunning
		case "sglang:token_usage":
			return famKV
		case "sglang:num_used_tokens":
			return famUsedTokens
		case "sglang:cache_hit_rate":
			return famPrefixRate
		}
	}
	return -1
}

// rankSeries holds one family's value per data-parallel rank.
type rankSeries struct {
	ranks []string
	vals  []float64
}

// add folds one series in. Series of the same data-parallel rank (vLLM's
// engine label, SGLang's dp_rank) are replicas of one scheduler's view, as
// SGLang reports it once per tensor-parallel rank: they are maxed.
func (r *rankSeries) add(rank string, v float64) {
	for i, k := range r.ranks {
		if k == rank {
			r.vals[i] = max(r.vals[i], v)
			return
		}
	}
	r.ranks = append(r.ranks, rank)
	r.vals = append(r.vals, v)
}

// sum adds the ranks up (separate schedulers, separate queues).
func (r *rankSeries) sum() float64 {
	if len(r.vals) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, v := range r.vals {
		s += v
	}
	return s
}

// capacity is SGLang's KV capacity in tokens: each rank's used tokens
// over its usage share, summed over the ranks; 0 when a rank's usage is
// under 1% (too little to divide by) or either family is absent.
func (r *rankSeries) capacity(usage *rankSeries) float64 {
	total := 0.0
	for i, rank := range r.ranks {
		for j, k := range usage.ranks {
			if k == rank && usage.vals[j] >= 0.01 && usage.vals[j] <= 1 {
				total += r.vals[i] / usage.vals[j]
			}
		}
	}
	return total
}

// max is the fullest rank (each has its own KV cache).
func (r *rankSeries) max() float64 {
	if len(r.vals) == 0 {
		return math.NaN()
	}
	m := r.vals[0]
	for _, v := range r.vals[1:] {
		m = max(m, v)
	}
	return m
}

// parseMetrics reads the Prometheus text exposition of a node of kind k.
// Counts are summed across data-parallel ranks and memory is the fullest
// rank; the model_name label is ignored (one engine per node). Absent
// families come back as NaN.
func parseMetrics(k engineKind, body []byte) engineMetrics {
	var fams [numFams]rankSeries
	var capacity float64
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if k == kindVLLM && bytes.HasPrefix(line, cacheConfigInfo) {
			capacity += labelNumber(line, "num_gpu_blocks") * labelNumber(line, "block_size")
			continue
		}
		name, rank, value, ok := parseSample(line)
		if !ok {
			continue
		}
		f := family(k, name)
		if f < 0 || math.IsNaN(value) || math.IsInf(value, 0) {
			continue
		}
		fams[f].add(rank, value)
	}
	m := engineMetrics{
		waiting: fams[famWaiting].sum(),
		running: fams[famRunning].sum(),
		kv:      fams[famKV].max(),

		prefixHits:    fams[famPrefixHits].sum(),
		prefixQueries: fams[famPrefixQueries].sum(),
		kvCapacity:    capacity,
	}
	if math.IsNaN(m.kv) {
		m.kv = fams[famKVLegacy].max()
	}
	m.prefixRate = fams[famPrefixRate].max()
	if k == kindSGLang {
		m.kvCapacity = fams[famUsedTokens].capacity(&fams[famKV])
	}
	if k == kindTGI {
		used, total := fams[famTokensUsed].sum(), fams[famTokensMax].sum()
		if total > 0 && !math.IsNaN(used) {
			m.kv = min(1, used/total)
		}
	}
	if !math.IsNaN(m.kv) {
		m.kv = min(1, max(0, m.kv))
	}
	return m
}

var cacheConfigInfo = []byte("vllm:cache_config_info{")

// labelNumber returns the number in label key of a sample line, 0 if the
// label is absent or not a number (vLLM writes "None" for unknowns).
func labelNumber(line []byte, key string) float64 {
	for rest := line; ; {
		i := bytes.Index(rest, []byte(key+`="`))
		if i < 0 {
			return 0
		}
		if i > 0 && (rest[i-1] == '{' || rest[i-1] == ',' || rest[i-1] == ' ') {
			v := rest[i+len(key)+2:]
			if j := bytes.IndexByte(v, '"'); j >= 0 {
				f, err := strconv.ParseFloat(string(v[:j]), 64)
				if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
					return 0
				}
				return f
			}
			return 0
		}
		rest = rest[i+len(key):]
	}
}

// parseSample splits `name{labels} value [timestamp]`. rank is the value of
// the engine or dp_rank label, "" if neither is present.
func parseSample(line []byte) (name []byte, rank string, value float64, ok bool) {
	i := 0
	for i < len(line) && line[i] != '{' && line[i] != ' ' && line[i] != '\t' {
		i++
	}
	name = line[:i]
	rest := line[i:]
	if len(rest) > 0 && rest[0] == '{' {
		var end int
		rank, end, ok = scanLabels(rest)
		if !ok {
			return nil, "", 0, false
		}
		rest = rest[end:]
	}
	rest = bytes.TrimLeft(rest, " \t")
	if j := bytes.IndexAny(rest, " \t"); j >= 0 {
		rest = rest[:j] // drop the optional timestamp
	}
	v, err := strconv.ParseFloat(string(rest), 64)
	if err != nil {
		return nil, "", 0, false
	}
	return name, rank, v, true
}

// scanLabels reads `{k="v",...}` from the start of b and returns the rank
// label's value and the index just past the closing brace.
func scanLabels(b []byte) (rank string, end int, ok bool) {
	i := 1
	for {
		for i < len(b) && (b[i] == ' ' || b[i] == ',') {
			i++
		}
		if i >= len(b) {
			return "", 0, false
		}
		if b[i] == '}' {
			return rank, i + 1, true
		}
		ks := i
		for i < len(b) && b[i] != '=' {
			i++
		}
		key := bytes.TrimSpace(b[ks:i])
		i++ // '='
		if i >= len(b) || b[i] != '"' {
			return "", 0, false
		}
		i++
		vs := i
		for i < len(b) && b[i] != '"' {
			if b[i] == '\\' {
				i++
			}
			i++
		}
		if i >= len(b) {
			return "", 0, false
		}
		if string(key) == "engine" || string(key) == "dp_rank" {
			rank = string(b[vs:i])
		}
		i++ // closing quote
	}
}

var errNoMetrics = errors.New("none of the engine's load metrics are present")

// scrape reads the node's /metrics once and, on success, stores the
// snapshot and runs the ejection check.
func (p *Pool) scrape(n *Node) {
	before := n.inflight.Load()
	err := p.get(n.metricsURL, n.shownMetricsURL, p.conf().ScrapeInterval.D(), func(body []byte) error {
		m := parseMetrics(n.kind, body)
		if math.IsNaN(m.waiting) && math.IsNaN(m.running) && math.IsNaN(m.kv) {
			return fmt.Errorf("%s: %w", n.cfg.Kind, errNoMetrics)
		}
		p.record(n, m, before)
		return nil
	})
	n.mu.Lock()
	n.scrapeErr = ""
	if err != nil {
		n.scrapeErr = err.Error()
	}
	n.mu.Unlock()
}

// record stores a scrape taken when our in-flight count was inflight:
// the snapshot, the engine's batch size if it shows, and the ejection check.
func (p *Pool) record(n *Node, m engineMetrics, inflight int64) {
	m.at, m.inflight = p.nowNanos(), inflight
	if m.waiting > 0 && m.running > 0 {
		// The engine queues: what runs now is its real batch size.
		if old := math.Float64frombits(n.slots.Load()); m.running > old {
			n.slots.Store(math.Float64bits(m.running))
		}
	}
	if m.kvCapacity >= 1 && m.kvCapacity < 1<<50 {
		n.kvCapacity.Store(int64(m.kvCapacity))
	}
	if rate, ok := n.notePrefixHits(n.scraped.Load(), &m); ok {
		n.prefix.calibrate(rate)
	}
	n.prefix.expire(p.capacityTokens(n))
	n.scraped.Store(&m)
	n.evaluateEjection(&m, m.at)
}

// notePrefixHits updates the node's prefix-cache hit rate from two
// scrapes: the hits over the queries since the previous one, or since the
// engine started when there is none (or its counters were reset). Without
// new queries the last rate stands. It returns the new rate, if any.
func (n *Node) notePrefixHits(prev, m *engineMetrics) (rate float64, ok bool) {
	if math.IsNaN(m.prefixQueries) || math.IsNaN(m.prefixHits) {
		if !math.IsNaN(m.prefixRate) && m.prefixRate >= 0 && m.prefixRate <= 1 {
			// SGLang's own recent hit rate, a gauge.
			n.prefixHits.Store(math.Float64bits(m.prefixRate + 1))
			return m.prefixRate, true
		}
		return 0, false
	}
	dq, dh := m.prefixQueries, m.prefixHits
	if prev != nil && !math.IsNaN(prev.prefixQueries) && !math.IsNaN(prev.prefixHits) && prev.prefixQueries <= m.prefixQueries {
		dq, dh = m.prefixQueries-prev.prefixQueries, m.prefixHits-prev.prefixHits
	}
	if dq <= 0 {
		return 0, false
	}
	rate = min(1, max(0, dh/dq))
	n.prefixHits.Store(math.Float64bits(rate + 1)) // +1: 0 bits mean unknown
	return rate, true
}

// PrefixCacheHitRate returns the engine's own prefix-cache hit rate over
// the last scrape interval with queries (vLLM's prefix_cache_hits_total
// over prefix_cache_queries_total); ok is false if it publishes none.
func (n *Node) PrefixCacheHitRate() (rate float64, ok bool) {
	b := n.prefixHits.Load()
	if b == 0 {
		return 0, false
	}
	return math.Float64frombits(b) - 1, true
}

// probe asks the node's health endpoint; 200 is healthy. A node that
// passes is then asked which models it serves (served.go). A node that has
// passed a probe is marked unhealthy after health_failures failed probes in
// a row (one that never has, at its first failure), healthy again after
// one good one. It reports whether the node is healthy now.
func (p *Pool) probe(n *Node) bool {
	err := p.get(n.healthURL, n.shownHealthURL, p.conf().HealthInterval.D(), nil)
	ok := err == nil
	var up, logUp, logDown bool
	n.mu.Lock()
	if ok {
		n.probeErr, n.probeFails, n.probedOK = "", 0, true
	} else {
		n.probeErr = err.Error()
		n.probeFails++
	}
	if !ok && n.probedOK && n.healthy.Load() && n.probeFails < p.conf().HealthFailures {
		n.mu.Unlock()
		return true // a miss, not yet an outage
	}
	switch was := n.healthy.Swap(ok); {
	case ok && !was:
		up, logUp, n.downInLog = true, n.downInLog, false
	case !ok && was:
		// At most one line a minute per node, with the flips in between;
		// a recovery is logged when its outage was.
		if now := p.now(); now.Sub(n.downLogged) >= time.Minute {
			logDown, n.downLogged, n.downInLog = true, now, true
		} else {
			n.downQuiet++
		}
	}
	fails, quiet, probeErr := n.probeFails, n.downQuiet, n.probeErr
	if logDown {
		n.downQuiet = 0
	}
	n.mu.Unlock()
	if up {
		n.wake()
	}
	if logUp {
		p.log.Info("node healthy again", "node", n.cfg.Name)
	}
	if logDown {
		p.log.Warn("node unhealthy: its health probe failed; it gets no requests until a probe passes",
			"node", n.cfg.Name, "failed_probes", fails, "times_unhealthy_since_last_line", quiet, "error", probeErr)
	}
	if ok {
		p.checkModels(n)
	}
	return ok
}

// get fetches url within min(interval, 2s) and hands a 200 body to read.
// Errors name shown, the URL with its user information masked (fasthttp
// sends that information as basic auth).
func (p *Pool) get(url, shown string, interval time.Duration, read func([]byte) error) error {
	return p.fetch(url, shown, interval, "", nil, read)
}

// fetch is get with an Authorization header (auth, "" none), storing the
// answer's status in *status (0 when there was none) if status is not nil.
func (p *Pool) fetch(url, shown string, interval time.Duration, auth string, status *int, read func([]byte) error) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(url)
	if auth != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, auth)
	}
	timeout := min(interval, 2*time.Second)
	if err := p.client.DoTimeout(req, resp, timeout); err != nil {
		return fmt.Errorf("GET %s: %w", shown, err)
	}
	if status != nil {
		*status = resp.StatusCode()
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return fmt.Errorf("GET %s: status %d", shown, resp.StatusCode())
	}
	if read == nil {
		return nil
	}
	return read(resp.Body())
}

// ProbeAll runs one round of health probes, one node after another.
func (p *Pool) ProbeAll() {
	for _, n := range p.Nodes() {
		p.probe(n)
	}
}

// ScrapeAll scrapes every node's engine metrics once (kind openai has none).
func (p *Pool) ScrapeAll() {
	for _, n := range p.Nodes() {
		if n.kind != kindOpenAI {
			p.scrape(n)
		}
	}
}

// Run probes each node's health every health_interval and scrapes its
// engine metrics every scrape_interval, each node on its own goroutines so
// a slow node delays no other, and re-resolves discover entries every
// discover_interval, until ctx ends. Nodes that join later get their
// goroutines when they join. It returns once they have all stopped.
func (p *Pool) Run(ctx context.Context) {
	p.mu.Lock()
	p.runCtx = ctx
	for _, n := range p.set.Load().nodes {
		p.startNodeLocked(n)
	}
	p.reconcileDiscoveryLocked()
	p.mu.Unlock()
	<-ctx.Done()
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.wg.Wait()
}

// running reports whether Run is active, so goroutines may be started.
func (p *Pool) runningLocked() bool { return p.runCtx != nil && !p.stopped && p.runCtx.Err() == nil }

// startNodeLocked starts n's probe and scrape loops if Run is active.
func (p *Pool) startNodeLocked(n *Node) {
	if !p.runningLocked() || p.loops[n] != nil {
		return
	}
	ctx, cancel := context.WithCancel(p.runCtx)
	p.loops[n] = cancel
	p.wg.Go(func() { every(ctx, func() time.Duration { return p.conf().HealthInterval.D() }, func() { p.probe(n) }) })
	if n.kind != kindOpenAI {
		p.wg.Go(func() {
			every(ctx, func() time.Duration { return p.conf().ScrapeInterval.D() }, func() { p.scrape(n) })
		})
	}
}

// every runs f now and then every d() (read again each time, so a reload
// takes effect) until ctx ends.
func every(ctx context.Context, d func() time.Duration, f func()) {
	t := time.NewTimer(d())
	defer t.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			t.Reset(d())
		}
	}
}
