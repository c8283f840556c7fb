package router

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"frontdoor/admission"
	"frontdoor/router/admin"
)

// newRuntime builds what a reload replaces. prev, if set, is the version
// in force: an unchanged spill-over keeps its quota buckets.
func (g *Gateway) newRuntime(cfg Config, prev *liveConfig) (*liveConfig, error) {
	rt := &liveConfig{cfg: cfg, maxModelLen: map[string]int{}}
	var err error
	if rt.admin, err = admin.NewGuard(cfg.Admin.TokenEnv, cfg.Admin.AllowCIDRs); err != nil {
		return nil, err
	}
	if rt.tenants, err = newTenantSet(cfg, rt.admin.AdminToken()); err != nil {
		return nil, err
	}
	if prev != nil && reflect.DeepEqual(prev.cfg.Spillover, cfg.Spillover) && UpstreamConfig(prev.cfg) == UpstreamConfig(cfg) {
		rt.spill = prev.spill
	} else if rt.spill, err = newSpillover(cfg, g.set, &g.spillInflight); err != nil {
		return nil, err
	}
	for _, n := range cfg.Nodes {
		for _, m := range n.Models {
			if l := n.MaxModelLen; l > 0 && (rt.maxModelLen[m] == 0 || l < rt.maxModelLen[m]) {
				rt.maxModelLen[m] = l
			}
		}
	}
	if len(rt.maxModelLen) > 0 {
		admission.WarmTokenizer() // context windows are checked in tokens
	}
	return rt, nil
}

func tenantLimits(cfg Config) map[string]admission.Limits {
	limits := map[string]admission.Limits{}
	for _, t := range cfg.Tenants {
		limits[t.Name] = admission.Limits{RPS: t.RPS, Burst: t.Burst, TokensPerMinute: t.TokensPerMinute, MaxConcurrency: t.MaxConcurrency}
	}
	return limits
}

// RestartError refuses a reload that changes settings only a restart can
// change.
type RestartError struct{ Keys []string }

func (e *RestartError) Error() string {
	return "these settings need a restart: " + strings.Join(e.Keys, ", ")
}

// restartKeys names the settings that differ between cur and next and
// cannot change in a running process: the listener and the HTTP server's
// limits, the logger, Redis, the cache's store, embedder and guards around
// the store, and admission's backend and global limits.
func restartKeys(cur, next *Config) []string {
	var out []string
	diff := func(name string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			out = append(out, name)
		}
	}
	diff("listen", cur.Listen, next.Listen)
	diff("admin.listen", cur.Admin.Listen, next.Admin.Listen)
	diff("limits.max_body_bytes", cur.Limits.MaxBodyBytes, next.Limits.MaxBodyBytes)
	diff("timeouts.client", cur.Timeouts.Client, next.Timeouts.Client)
	diff("logging", cur.Logging, next.Logging)
	diff("redis", cur.Redis, next.Redis)
	c, n := cur.Cache, next.Cache
	diff("cache.backend", c.Backend, n.Backend)
	diff("cache.max_bytes", c.MaxBytes, n.MaxBytes)
	diff("cache.vector_search", c.VectorSearch, n.VectorSearch)
	diff("cache.redis_index", c.RedisIndex, n.RedisIndex)
	diff("cache.reads", c.Reads, n.Reads)
	diff("cache.writes", c.Writes, n.Writes)
	diff("cache.embedder", c.Embedder, n.Embedder)
	diff("cache.semantic.enabled", c.Semantic.Enabled, n.Semantic.Enabled)
	diff("cache.semantic.verify", c.Semantic.Verify, n.Semantic.Verify)
	a, b := cur.Admission, next.Admission
	diff("admission.backend", a.Backend, b.Backend)
	diff("admission.global", a.Global, b.Global)
	diff("admission.max_wait", a.MaxWait, b.MaxWait)
	diff("admission.default_max_tokens", a.DefaultMaxTokens, b.DefaultMaxTokens)
	diff("admission.replicas", a.Replicas, b.Replicas)
	return out
}

// Reload applies next in place: nodes (added ones join, removed ones
// drain), tenants and their keys and limits, the balancer's weights and
// thresholds, model aliases, spill-over, the admin guard, the cache's
// thresholds, guards and TTLs, timeouts other than client, and shutdown.
// Requests in flight finish on the node, tenant and limits they started
// with. An invalid config, or one that changes a setting needing a
// restart, is refused as a whole (*ConfigError, *RestartError) and the
// running one stays.
func (g *Gateway) Reload(next Config) error {
	g.reload.mu.Lock()
	defer g.reload.mu.Unlock()
	if problems := next.Problems(); len(problems) > 0 {
		return &ConfigError{Problems: problems}
	}
	cur := g.rt.Load()
	if keys := restartKeys(&cur.cfg, &next); len(keys) > 0 {
		return &RestartError{Keys: keys}
	}
	rt, err := g.newRuntime(next, cur)
	if err != nil {
		return err
	}
	if err := g.adm.SetTenants(tenantLimits(next)); err != nil {
		return err
	}
	if err := g.pool.Update(next.Balancer, next.Nodes, next.Models); err != nil {
		return fmt.Errorf("balancer: %w", err)
	}
	if UpstreamConfig(cur.cfg) != UpstreamConfig(next) {
		g.up.backends.Clear() // requests in flight keep theirs; new ones get the new timeouts and limit
	}
	g.metrics.setTenants(next.Tenants)
	g.rt.Store(rt)
	return nil
}

// ReloadFile reads Deps.ConfigPath and applies it with Reload, logging the
// outcome: INFO when applied, ERROR with every problem when refused.
func (g *Gateway) ReloadFile(trigger string) error {
	err := g.reloadFile()
	g.reload.record(err)
	if err != nil {
		g.log.Error("config reload refused; the running config is unchanged", "trigger", trigger,
			"path", g.reload.path, "error", err.Error())
		return err
	}
	c := g.conf()
	g.log.Info("config reloaded", "trigger", trigger, "path", g.reload.path,
		"nodes", len(c.Nodes), "tenants", len(c.Tenants), "spillover", c.Spillover.Enabled)
	return nil
}

// ErrNoConfigFile means the gateway was not started from a file.
var ErrNoConfigFile = errors.New("no config file to reload (the gateway was not started with --config)")

func (g *Gateway) reloadFile() error {
	if g.reload.path == "" {
		return ErrNoConfigFile
	}
	next, err := Load(g.reload.path)
	if err != nil {
		return err
	}
	return g.Reload(next)
}

// Config returns the configuration in force (as last reloaded).
func (g *Gateway) Config() Config { return *g.conf() }

// BeginDrain turns /readyz to 503 while requests are still served, so that
// load balancers stop sending new ones before Shutdown.
func (g *Gateway) BeginDrain() { g.draining.Store(true) }

// reloader is the reload bookkeeping.
type reloader struct {
	path string
	mu   sync.Mutex // one reload at a time

	smu     sync.Mutex
	last    time.Time
	lastErr string
	ok, bad *metrics.Counter
}

func (r *reloader) record(err error) {
	r.smu.Lock()
	defer r.smu.Unlock()
	r.last, r.lastErr = time.Now().UTC(), ""
	c := r.ok
	if err != nil {
		r.lastErr, c = err.Error(), r.bad
	}
	if c != nil {
		c.Inc()
	}
}

func (r *reloader) status() *admin.ReloadStatus {
	r.smu.Lock()
	defer r.smu.Unlock()
	if r.last.IsZero() {
		return nil
	}
	return &admin.ReloadStatus{At: r.last, Error: r.lastErr}
}
