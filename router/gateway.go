package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/balancer"
)

// Deps are the components the gateway orchestrates. Nil fields are built
// from the config.
type Deps struct {
	Logger   *slog.Logger
	Pool     *balancer.Pool
	Backends map[string]adapters.Backend // by node name
	Metrics  *metrics.Set
}

// Gateway is the frontdoor server.
type Gateway struct {
	cfg      Config
	log      *slog.Logger
	pool     *balancer.Pool
	backends map[string]adapters.Backend
	metrics  *gatewayMetrics
	admin    *adminGuard
	server   *fasthttp.Server

	models []byte // cached GET /v1/models body

	stopping atomic.Bool
	streams  sync.WaitGroup // live stream pumps
	live     liveStreams    // for the forced stop after the grace period

	runCancel context.CancelFunc
	runDone   chan struct{}
}

// New wires a gateway from cfg and deps.
func New(cfg Config, deps Deps) (*Gateway, error) {
	if problems := cfg.Problems(); len(problems) > 0 {
		return nil, &ConfigError{Problems: problems}
	}
	g := &Gateway{cfg: cfg, log: deps.Logger, pool: deps.Pool, backends: deps.Backends}
	if g.log == nil {
		g.log = NewLogger(cfg.Logging, os.Stderr)
	}
	set := deps.Metrics
	if set == nil {
		set = metrics.NewSet()
	}
	if g.pool == nil {
		pool, err := balancer.New(cfg.Balancer, cfg.Nodes, cfg.Models)
		if err != nil {
			return nil, fmt.Errorf("balancer: %w", err)
		}
		g.pool = pool
	}
	if g.backends == nil {
		backends, err := NodeBackends(cfg)
		if err != nil {
			return nil, err
		}
		g.backends = backends
	}
	for _, n := range g.pool.Nodes() {
		if g.backends[n.Name()] == nil {
			return nil, fmt.Errorf("node %q has no backend", n.Name())
		}
	}
	admin, err := newAdminGuard(cfg.Admin)
	if err != nil {
		return nil, err
	}
	g.admin = admin
	g.metrics = newGatewayMetrics(set, g)
	g.models = g.modelsBody()
	g.server = &fasthttp.Server{
		Handler:                       g.handle,
		ErrorHandler:                  g.handleTransportError,
		Name:                          "frontdoor",
		MaxRequestBodySize:            int(cfg.Limits.MaxBodyBytes),
		ReadTimeout:                   cfg.Timeouts.Total.D(),
		IdleTimeout:                   2 * time.Minute,
		NoDefaultServerHeader:         false,
		NoDefaultDate:                 true,
		DisableHeaderNamesNormalizing: false,
		CloseOnShutdown:               true,
		ReadBufferSize:                16 << 10,
		Logger:                        fasthttpLogger{g.log},
	}
	return g, nil
}

// UpstreamConfig derives the upstream client settings from timeouts:.
func UpstreamConfig(cfg Config) adapters.Config {
	ac := adapters.DefaultConfig()
	ac.Connect, ac.FirstByte = cfg.Timeouts.Connect.D(), cfg.Timeouts.FirstByte.D()
	ac.Idle, ac.Total = cfg.Timeouts.Idle.D(), cfg.Timeouts.Total.D()
	return ac
}

// NodeBackends builds one OpenAI-compatible backend per configured node,
// reading each node's key from its api_key_env.
func NodeBackends(cfg Config) (map[string]adapters.Backend, error) {
	out := make(map[string]adapters.Backend, len(cfg.Nodes))
	ac := UpstreamConfig(cfg)
	for _, n := range cfg.Nodes {
		t := adapters.Target{Name: n.Name, URL: n.URL, Kind: adapters.Kind(n.Kind)}
		if n.APIKeyEnv != "" {
			t.APIKey = os.Getenv(n.APIKeyEnv)
		}
		ac.MaxConns = max(64, 4*n.MaxConcurrency)
		b, err := adapters.NewHTTPBackend(t, ac)
		if err != nil {
			return nil, fmt.Errorf("nodes: %w", err)
		}
		out[n.Name] = b
	}
	return out, nil
}

// Pool returns the node pool.
func (g *Gateway) Pool() *balancer.Pool { return g.pool }

// Start runs the background work (health probes) until Shutdown.
func (g *Gateway) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	g.runCancel, g.runDone = cancel, make(chan struct{})
	go func() {
		defer close(g.runDone)
		g.pool.Run(ctx)
	}()
}

// Serve serves HTTP on ln until Shutdown.
func (g *Gateway) Serve(ln net.Listener) error {
	if g.runCancel == nil {
		g.Start()
	}
	err := g.server.Serve(ln)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections, lets in-flight requests and streams
// finish until ctx ends, then cuts the remaining streams.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.stopping.Store(true)
	err := g.server.ShutdownWithContext(ctx)
	if err != nil {
		g.live.closeAll()
	}
	done := make(chan struct{})
	go func() { g.streams.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	if g.runCancel != nil {
		g.runCancel()
		<-g.runDone
	}
	return err
}

// liveStreams tracks open upstream streams so a shutdown past its grace
// period can end them.
type liveStreams struct {
	mu sync.Mutex
	m  map[*adapters.UpstreamResponse]struct{}
}

func (l *liveStreams) add(r *adapters.UpstreamResponse) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[*adapters.UpstreamResponse]struct{}{}
	}
	l.m[r] = struct{}{}
	l.mu.Unlock()
}

func (l *liveStreams) remove(r *adapters.UpstreamResponse) {
	l.mu.Lock()
	delete(l.m, r)
	l.mu.Unlock()
}

func (l *liveStreams) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for r := range l.m {
		r.Interrupt()
	}
}

type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Debug("fasthttp", "msg", fmt.Sprintf(format, args...))
}
