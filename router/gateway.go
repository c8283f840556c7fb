package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/redis/go-redis/v9"

	"frontdoor/adapters"
	"frontdoor/admission"
	"frontdoor/balancer"
	"frontdoor/cache"
	"frontdoor/embed"
	"frontdoor/internal/redisconn"
	"frontdoor/internal/reply"
	"frontdoor/internal/telemetry"
	"frontdoor/internal/warm"
	"frontdoor/router/admin"
	"frontdoor/router/reuse"
)

// Deps are the components the gateway orchestrates. Nil fields are built
// from the config.
type Deps struct {
	Logger   *slog.Logger
	Pool     *balancer.Pool
	Backends map[string]adapters.Backend // by node name
	Metrics  *metrics.Set
	Store    cache.Store    // nil: built from cache: (memory or redis), none when off
	Embedder embed.Embedder // nil: built from cache.embedder
	Redis    redis.UniversalClient
	Admitter *admission.Admitter // nil: built from admission: and tenants:
	// ConfigPath is the file ReloadFile (SIGHUP, POST /admin/reload)
	// reads; empty: reloading is off.
	ConfigPath string
}

// liveConfig is what a reload replaces, swapped whole. A request reads the
// version current when it starts each step; the tenant and node it has
// chosen stay as they were.
type liveConfig struct {
	cfg         Config
	tenants     *tenantSet
	admin       *admin.Guard
	spill       *spillover
	maxModelLen map[string]int // model -> smallest declared context window
}

// Gateway is the frontdoor server.
type Gateway struct {
	rt      atomic.Pointer[liveConfig]
	log     *slog.Logger
	pool    *balancer.Pool
	up      *upstream // node choice, attempts, spill-over, the nodes' backends
	metrics *gatewayMetrics
	upLog   *telemetry.RateLog // rate-limited lines about nodes' answers
	bodies  *bodyRefusals
	server  *fasthttp.Server
	// adminServer serves admin.listen: the same routes, every request
	// trusted as an admin (handleAdminListener).
	adminServer *fasthttp.Server
	operator    *admin.Handler // /admin/*, /status, /dashboard, /debug/pprof/
	set         *metrics.Set
	reload      reloader

	cache         *reuse.Cache // the cache side of every request
	passthroughs  passthroughCounters
	spillInflight atomic.Int64
	adm           *admission.Admitter
	ownAdm        bool
	clients       []io.Closer // Redis clients the gateway built, closed last

	draining atomic.Bool // /readyz says 503; requests are still served
	warms    warm.Jobs   // warm-ups: warm.files and POST /admin/cache/warm
	addr     atomic.Pointer[string]
	tracer   *telemetry.Tracer // nil: tracing is off

	stopping atomic.Bool
	streams  sync.WaitGroup // live stream pumps
	live     liveStreams    // for the forced stop after the grace period

	runMu      sync.Mutex // guards runCancel, runDone and runStopped: Serve may start while Shutdown stops
	runCancel  context.CancelFunc
	runDone    chan struct{}
	runStopped bool

	self selfAddrs // every listener serving, so that discovery never makes a node of the gateway

	// hooks is the Responses API's state (responsesFeature), called at
	// the named points of every request's life; serveStored answers
	// GET/DELETE /v1/responses/{id}.
	hooks       requestHooks
	serveStored func(ctx *fasthttp.RequestCtx, reqID string)
}

// New wires a gateway from cfg and deps.
func New(cfg Config, deps Deps) (*Gateway, error) {
	if problems := cfg.Problems(); len(problems) > 0 {
		return nil, &ConfigError{Problems: problems}
	}
	g := &Gateway{log: deps.Logger, pool: deps.Pool}
	g.reload.path = deps.ConfigPath
	if g.log == nil {
		g.log = NewLogger(cfg.Logging, os.Stderr)
	}
	g.upLog = telemetry.NewRateLog(g.log, 10*time.Second)
	g.up = &upstream{rt: &g.rt, fixed: deps.Backends, log: g.log, upLog: g.upLog}
	set := deps.Metrics
	if set == nil {
		set = metrics.NewSet()
	}
	g.set = set
	if g.pool == nil {
		pool, err := balancer.New(cfg.Balancer, cfg.Nodes, cfg.Models,
			balancer.WithLogger(g.log), balancer.WithOnRemove(func(n *balancer.Node) { g.up.backends.Delete(n) }),
			balancer.WithSelfAddrs(func() []netip.AddrPort {
				listen := ""
				if rt := g.rt.Load(); rt != nil {
					listen = rt.cfg.Listen
				}
				return g.self.list(listen)
			}))
		if err != nil {
			return nil, fmt.Errorf("balancer: %w", err)
		}
		g.pool = pool
	}
	rt, err := g.newRuntime(cfg, nil)
	if err != nil {
		return nil, err
	}
	g.rt.Store(rt)
	g.up.pool = g.pool
	for _, n := range g.pool.Nodes() {
		if _, err := g.up.buildBackend(n); err != nil {
			return nil, err
		}
	}
	g.passthroughs.set = set
	g.cache, err = reuse.New(reuse.Options{Conf: cacheConf(&g.rt), Redis: cfg.Redis,
		HotEntries: cfg.Warm.HotEntries, Logger: g.log, Metrics: set, Store: deps.Store, Embedder: deps.Embedder,
		RedisClient: deps.Redis, Judge: g.up,
		Configured: func(tenant, model string) float64 { return g.rt.Load().semanticThreshold(tenant, model) }})
	if err != nil {
		return nil, err
	}
	var admClient redis.UniversalClient
	if g.adm, admClient, err = buildAdmission(g.conf(), deps, g.log); err != nil {
		return nil, err
	}
	g.ownAdm = deps.Admitter == nil
	if admClient != nil {
		g.clients = append(g.clients, admClient)
	}
	g.metrics = newGatewayMetrics(set, g)
	responses := newResponsesFeature(g, cfg, set)
	g.hooks, g.serveStored = responses, responses.serveStored
	g.up.metrics, g.up.hooks = g.metrics, g.hooks
	g.bodies = newBodyRefusals(set, g.log)
	g.adm.RegisterMetrics(set)
	g.reload.register(set)
	if g.tracer, err = telemetry.NewTracer(context.Background(), cfg.Tracing, g.log, set); err != nil {
		return nil, err
	}
	g.operator = admin.New(operator{g}, g.log)
	g.server = newServer(cfg, g.handle, g.expectHandler(true), g.handleTransportError, g.log)
	g.adminServer = newServer(cfg, g.handleAdminListener, g.expectHandler(false), g.handleTransportError, g.log)
	return g, nil
}

// newResponsesFeature wires the Responses API's state to what it needs of
// g: the configuration, the log, the errors, the admission of a GET or
// DELETE, the nodes' backends and the cache. Its ids are shared among the
// replicas through the cache's Redis, when there is one.
func newResponsesFeature(g *Gateway, cfg Config, set *metrics.Set) *responsesFeature {
	f := &responsesFeature{ids: newResponseIDs(cfg.Responses, set), conf: g.conf, log: g.log, writeError: reply.Error,
		badAnswer: g.up.badAnswer, cache: g.cache}
	if r := g.cache.Redis(); r != nil {
		f.ids.shared = newSharedIDs(r, cfg.Redis.KeyPrefix+"r:", cfg.Cache.Reads.Timeout.D(), g.upLog, set)
	}
	f.admit = func(ctx *fasthttp.RequestCtx) (string, func(), bool) {
		t, apiErr := g.rt.Load().tenants.resolve(ctx)
		if apiErr != nil {
			reply.Error(ctx, apiErr)
			return "", nil, false
		}
		pass, rej := g.adm.Enter(context.Background(), t.name)
		if rej != nil {
			reply.Error(ctx, reply.Rejected(rej))
			return "", nil, false
		}
		return t.name, pass.Release, true
	}
	f.backend = func(upstream string) adapters.StoredResponses {
		if s := g.rt.Load().spill; s != nil && s.name == upstream {
			return s.backend
		}
		n := g.pool.Node(upstream)
		if n == nil {
			return nil
		}
		be, _ := g.up.backendFor(n).(adapters.StoredResponses)
		return be
	}
	return f
}

// newServer is the HTTP server of a listener; the admin listener's differs
// only in its handlers.
func newServer(cfg Config, handler fasthttp.RequestHandler, expect func(*fasthttp.RequestCtx) int, onError func(*fasthttp.RequestCtx, error), log *slog.Logger) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:      handler,
		ErrorHandler: onError,
		Name:         "frontdoor",
		// Bodies up to twice the limit are read and answered with a clean
		// 413 by the handler; only larger ones are cut at the socket.
		MaxRequestBodySize:            2 * int(cfg.Limits.MaxBodyBytes),
		ReadTimeout:                   cfg.Timeouts.Client.D(),
		IdleTimeout:                   cfg.Timeouts.Client.D(),
		NoDefaultServerHeader:         false,
		NoDefaultDate:                 true,
		DisableHeaderNamesNormalizing: false,
		CloseOnShutdown:               true,
		ReadBufferSize:                16 << 10,
		// Hand the read buffer back to a pool once a request is read, so
		// an open stream does not hold 16 KiB it will never use (the
		// limit on header size stays 16 KiB).
		ReduceMemoryUsage: true,
		// An open stream holds its write buffer for its whole life; its
		// events are a few hundred bytes, flushed one by one. A larger
		// write goes to the socket directly (bufio), so 2 KiB costs a
		// JSON answer over 2 KiB one more write, and saves 2 KiB a stream.
		WriteBufferSize: 2 << 10,
		Logger:          fasthttpLogger{log},

		// Expect: 100-continue gets its 400, 401 or 413 before the body.
		ExpectHandler: expect,
	}
}

// UpstreamConfig derives the upstream client settings from timeouts:.
func UpstreamConfig(cfg Config) adapters.Config {
	ac := adapters.DefaultConfig()
	ac.Connect, ac.FirstByte = cfg.Timeouts.Connect.D(), cfg.Timeouts.FirstByte.D()
	ac.Idle, ac.Total = cfg.Timeouts.Idle.D(), cfg.Timeouts.Total.D()
	ac.MaxBody = int(cfg.Limits.MaxUpstreamBodyBytes)
	return ac
}

// NodeBackends builds one OpenAI-compatible backend per configured node,
// reading each node's key from its api_key_env. (The gateway builds its
// own, per node in service, discovered ones included.)
func NodeBackends(cfg Config) (map[string]adapters.Backend, error) {
	out := make(map[string]adapters.Backend, len(cfg.Nodes))
	for _, n := range cfg.Nodes {
		b, err := nodeBackend(n, cfg)
		if err != nil {
			return nil, err
		}
		out[n.Name] = b
	}
	return out, nil
}

func nodeBackend(n balancer.NodeConfig, cfg Config) (adapters.Backend, error) {
	t := adapters.Target{Name: n.Name, URL: n.URL, Kind: adapters.Kind(n.Kind)}
	if n.APIKeyEnv != "" {
		t.APIKey = os.Getenv(n.APIKeyEnv)
	}
	ac := UpstreamConfig(cfg)
	ac.MaxConns = max(64, 4*n.MaxConcurrency)
	b, err := adapters.NewHTTPBackend(t, ac)
	if err != nil {
		return nil, fmt.Errorf("nodes: %w", err)
	}
	return b, nil
}

// Pool returns the node pool.
func (g *Gateway) Pool() *balancer.Pool { return g.pool }

// Start runs the background work (health probes) until Shutdown. It does
// nothing if it has run, or after Shutdown.
func (g *Gateway) Start() {
	g.runMu.Lock()
	defer g.runMu.Unlock()
	if g.runCancel != nil || g.runStopped {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.runCancel, g.runDone = cancel, make(chan struct{})
	runDone := g.runDone
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); g.pool.Run(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); g.operator.Run(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); g.cache.Run(ctx) }()
	go func() { wg.Wait(); close(runDone) }()
}

// buildAdmission sets up the tenants' and the global limits, sharing the
// cache's Redis client when both use Redis.
func buildAdmission(cfg *Config, deps Deps, log *slog.Logger) (adm *admission.Admitter, built redis.UniversalClient, err error) {
	if deps.Admitter != nil {
		return deps.Admitter, nil, nil
	}
	a := cfg.Admission
	var client redis.UniversalClient
	if a.Backend == "redis" {
		client = deps.Redis
		if client == nil {
			if client, err = redisconn.New(cfg.Redis, redisconn.Password(cfg.Redis)); err != nil {
				return nil, nil, err
			}
			built = client
		}
	}
	adm, err = admission.New(admission.Config{Backend: a.Backend, MaxWait: a.MaxWait.D(), Replicas: a.Replicas,
		KeyPrefix: cfg.Redis.KeyPrefix, DefaultMaxTokens: a.DefaultMaxTokens, Log: log,
		Global: admission.Limits{RPS: a.Global.RPS, Burst: a.Global.Burst, TokensPerMinute: a.Global.TokensPerMinute}}, tenantLimits(*cfg), client)
	if err != nil {
		if built != nil {
			_ = built.Close()
		}
		return nil, nil, fmt.Errorf("admission: %w", err)
	}
	return adm, built, nil
}

// Serve serves HTTP on ln until Shutdown.
func (g *Gateway) Serve(ln net.Listener) error {
	g.Start()
	addr := ln.Addr().String()
	g.addr.Store(&addr)
	defer g.self.add(ln)()
	err := g.server.Serve(ln)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// ServeAdmin serves the admin listener (admin.listen) on ln until
// Shutdown: every route of Serve, each request trusted as if it carried
// the admin token, once its Host and Origin show no browser acting for
// another site.
func (g *Gateway) ServeAdmin(ln net.Listener) error {
	defer g.self.add(ln)()
	err := g.adminServer.Serve(ln)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections, lets in-flight requests and streams
// finish until ctx ends, then cuts the remaining streams.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.stopping.Store(true)
	g.warms.Stop()
	aerr := g.adminServer.ShutdownWithContext(ctx)
	err := g.server.ShutdownWithContext(ctx)
	if err == nil {
		err = aerr
	}
	if err != nil {
		g.live.closeAll()
	}
	done := make(chan struct{})
	go func() { g.streams.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	g.runMu.Lock()
	g.runStopped = true
	cancel, runDone := g.runCancel, g.runDone
	g.runMu.Unlock()
	if cancel != nil {
		cancel()
		<-runDone
	}
	g.cache.Close(ctx) // queued write-backs get what is left of the grace period
	if g.ownAdm {
		_ = g.adm.Close()
	}
	for _, c := range g.clients {
		_ = c.Close()
	}
	if terr := g.tracer.Shutdown(ctx); terr != nil {
		g.log.Warn("tracing: spans not exported at shutdown", "error", terr.Error())
	}
	return err
}

type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Debug("fasthttp", "msg", fmt.Sprintf(format, args...))
}
