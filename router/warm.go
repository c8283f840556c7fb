package router

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/internal/warm"
)

// warmToken authenticates the gateway's own warm-up requests, which may name
// their tenant in X-Frontdoor-Tenant. It is random per process and never
// leaves it.
var warmToken = func() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// Warm-up job history: the last ones are kept for GET /admin/cache/warm/{id}
// and /status; a job keeps its first failures only.
const (
	warmJobsKept    = 20
	warmFailuresMax = 100
)

// WarmStatus is a warm-up job as /status and GET /admin/cache/warm/{id}
// show it.
type WarmStatus struct {
	ID     string `json:"id"`
	Source string `json:"source"` // "warm.files" or the file name posted
	Tag    string `json:"tag,omitempty"`
	State  string `json:"state"` // running, done, interrupted
	warm.Progress
	Finished *time.Time     `json:"finished,omitempty"`
	Failures []warm.Failure `json:"failures,omitempty"`
}

type warmJob struct {
	mu     sync.Mutex
	st     WarmStatus
	cancel context.CancelFunc
	done   chan struct{}
}

func (j *warmJob) status() WarmStatus {
	j.mu.Lock()
	defer j.mu.Unlock()
	st := j.st
	st.Failures = slices.Clone(st.Failures)
	return st
}

// warmJobs are the gateway's warm-ups, running and recent.
type warmJobs struct {
	mu    sync.Mutex
	jobs  map[string]*warmJob
	order []string
}

func (w *warmJobs) add(j *warmJob) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.jobs == nil {
		w.jobs = map[string]*warmJob{}
	}
	w.jobs[j.st.ID] = j
	w.order = append(w.order, j.st.ID)
	for len(w.order) > warmJobsKept {
		old := w.jobs[w.order[0]]
		select {
		case <-old.done:
		default:
			return // the oldest still runs: keep it
		}
		delete(w.jobs, w.order[0])
		w.order = w.order[1:]
	}
}

func (w *warmJobs) get(id string) *warmJob {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.jobs[id]
}

func (w *warmJobs) list() []WarmStatus {
	w.mu.Lock()
	ids := slices.Clone(w.order)
	w.mu.Unlock()
	out := make([]WarmStatus, 0, len(ids))
	for _, id := range ids {
		if j := w.get(id); j != nil {
			out = append(out, j.status())
		}
	}
	return out
}

// stop interrupts every running job: no further item starts; those in
// flight end with the server's shutdown.
func (w *warmJobs) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range w.jobs {
		j.cancel()
	}
}

// startWarm runs items in the background against the gateway at addr
// (host:port) and returns the job. Entries are tagged tag, or (when "")
// with their file's name.
func (g *Gateway) startWarm(source, tag, addr string, items []warm.Item) *warmJob {
	ctx, cancel := context.WithCancel(context.Background())
	var b [6]byte
	_, _ = rand.Read(b[:])
	j := &warmJob{cancel: cancel, done: make(chan struct{}),
		st: WarmStatus{ID: "warm-" + hex.EncodeToString(b[:]), Source: source, Tag: tag, State: "running",
			Progress: warm.Progress{Total: int64(len(items)), Started: time.Now()}}}
	g.warms.add(j)
	t := &selfTarget{g: g, addr: addr, tag: tag,
		client: &fasthttp.HostClient{Addr: addr, MaxConns: g.conf().Warm.Concurrency}}
	go func() {
		defer close(j.done)
		defer cancel()
		sum := warm.Run(ctx, items, t, warm.Options{Concurrency: g.conf().Warm.Concurrency, OnProgress: func(p warm.Progress) {
			j.mu.Lock()
			j.st.Progress = p
			j.mu.Unlock()
		}})
		now := time.Now()
		j.mu.Lock()
		j.st.Progress, j.st.Finished, j.st.State = sum.Progress, &now, "done"
		if sum.Interrupted {
			j.st.State = "interrupted"
		}
		j.st.Failures = sum.Failures[:min(len(sum.Failures), warmFailuresMax)]
		j.mu.Unlock()
		for _, f := range j.st.Failures {
			g.log.Warn("cache warm-up: item failed", "job", j.st.ID, "file", f.File, "line", f.Line, "error", f.Error)
		}
		g.log.Info("cache warm-up finished", "job", j.st.ID, "source", source, "state", j.st.State,
			"warmed", sum.Warmed, "already_cached", sum.Cached, "failed", sum.Failed)
	}()
	return j
}

// Warm replays the warm.files through the gateway at addr (host:port), as
// a background job that /status shows, and waits for it. Each file is in
// one of the formats internal/warm reads; warm.model is the model of
// plain-text prompts. Entries are tagged warm.tag, or with their file's
// base name.
func (g *Gateway) Warm(ctx context.Context, addr string) (warm.Summary, error) {
	if g.store == nil {
		return warm.Summary{}, errors.New("warm: the cache is off (cache.backend: off): warm.files ignored")
	}
	var items []warm.Item
	for _, path := range g.conf().Warm.Files {
		data, err := os.ReadFile(path)
		if err != nil {
			return warm.Summary{}, fmt.Errorf("warm: %w", err)
		}
		its, _, err := warm.Parse(filepath.Base(path), data, warm.Defaults{Model: g.conf().Warm.Model})
		if err != nil {
			return warm.Summary{}, fmt.Errorf("warm: %w", err)
		}
		items = append(items, its...)
	}
	j := g.startWarm("warm.files", g.conf().Warm.Tag, addr, items)
	select {
	case <-j.done:
	case <-ctx.Done():
		j.cancel()
		<-j.done
	}
	st := j.status()
	return warm.Summary{Progress: st.Progress, Failures: st.Failures, Interrupted: st.State == "interrupted"}, ctx.Err()
}

// selfTarget warms this gateway: requests go through its own HTTP server
// (so admission, balancing and write-back apply), answered pairs are
// imported directly.
type selfTarget struct {
	g      *Gateway
	addr   string
	tag    string
	client *fasthttp.HostClient
}

var _ warm.Target = (*selfTarget)(nil)

func (s *selfTarget) tagOf(it *warm.Item) string {
	if s.tag != "" {
		return s.tag
	}
	return warm.TagFor(it.File)
}

func (s *selfTarget) Lookup(ctx context.Context, it *warm.Item) (bool, error) {
	if it.Kind == warm.KindPair {
		r, err := s.g.ImportAnswer(ctx, warm.ImportRequest{Tenant: it.Tenant, Request: it.Request, Answer: it.Answer, Check: true})
		return r.Result == "cached", err
	}
	status, _, err := s.send(ctx, it, true)
	switch {
	case err != nil:
		return false, err
	case status == fasthttp.StatusOK:
		return true, nil
	case status == fasthttp.StatusNoContent:
		return false, nil
	}
	return false, fmt.Errorf("lookup: HTTP %d", status)
}

func (s *selfTarget) Warm(ctx context.Context, it *warm.Item) (warm.Result, error) {
	if it.Kind == warm.KindPair {
		r, err := s.g.ImportAnswer(ctx, warm.ImportRequest{Tenant: it.Tenant, Tag: s.tagOf(it), Request: it.Request, Answer: it.Answer})
		if r.Result == "cached" {
			return warm.Cached, err
		}
		return warm.Warmed, err
	}
	status, xc, err := s.send(ctx, it, false)
	switch {
	case err != nil:
		return 0, err
	case status != fasthttp.StatusOK:
		return 0, fmt.Errorf("request: HTTP %d", status)
	case xc == resultMiss.header():
		return warm.Warmed, nil
	case xc == resultHitExact.header() || xc == resultHitSemantic.header():
		return warm.Cached, nil
	}
	return 0, fmt.Errorf("answered but not cached (X-Cache: %q)", xc)
}

func (s *selfTarget) send(ctx context.Context, it *warm.Item, lookup bool) (int, string, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + s.addr + "/v1/chat/completions")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("X-Frontdoor-Warm", warmToken)
	if it.Tenant != "" {
		req.Header.Set(warm.HeaderTenant, it.Tenant)
	}
	if lookup {
		req.Header.Set(warm.HeaderCacheOnly, "1")
	} else {
		req.Header.Set(warm.HeaderCacheTag, s.tagOf(it))
	}
	req.SetBody(it.Request)
	timeout := s.g.conf().Timeouts.Total.D()
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if err := s.client.DoTimeout(req, resp, timeout); err != nil {
		if errors.Is(err, fasthttp.ErrTimeout) {
			return 0, "", fmt.Errorf("no answer within %s", timeout)
		}
		return 0, "", err
	}
	return resp.StatusCode(), string(resp.Header.Peek("X-Cache")), nil
}
