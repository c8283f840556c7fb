package gpusim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Stats is a snapshot of the server's request counters. Received counts
// generation requests (chat and completions); each ends up in exactly one of
// Rejected (answered 4xx: auth, validation, unknown model, queue full, rate
// limit), Failed (injected 500), Completed, or Cancelled (client went away,
// or a hanging/aborted request ended by Shutdown), or is still Running or
// Waiting. MaxRunning is the high-water mark of Running. JudgeYes, JudgeNo
// and JudgeUnsure count the judge requests (see Config.JudgeLabels) that
// Completed, by answer. EmbeddingRequests counts the embeddings requests
// answered, and EmbeddingInputs the inputs they embedded: what reached the
// node.
type Stats struct {
	Received, Completed, Cancelled, Failed, Rejected, Running, Waiting, MaxRunning int64
	JudgeYes, JudgeNo, JudgeUnsure                                                 int64
	EmbeddingRequests, EmbeddingInputs                                             int64
}

// Server is one simulated inference node.
type Server struct {
	cfg               Config
	srv               *fasthttp.Server
	sched             *scheduler
	limiter           *rateLimiter // nil when RPM == 0
	wantAuth          []byte       // "Bearer <key>", nil when no key
	modelsBody        []byte       // precomputed /v1/models response
	modelLabel        string       // `model_name="<first model>"`
	cacheConfigLabels string       // vllm:cache_config_info's labels
	idPrefix          [16]byte     // random hex prefix of response ids
	idSeq             atomic.Uint64
	failRate          atomic.Uint64 // float64 bits
	healthy           atomic.Bool

	rngMu sync.Mutex
	rng   *mrand.Rand

	stopHang  chan struct{} // closed when Shutdown starts: hanging requests end
	abort     chan struct{} // closed when Shutdown's ctx expires: everything ends
	stopOnce  sync.Once
	abortOnce sync.Once
	active    tracker // generation requests not yet finished

	mu        sync.Mutex // guards ln, serveDone
	ln        net.Listener
	serveDone chan struct{}

	connMu sync.Mutex
	conns  map[net.Conn]struct{} // open client connections, closed on abort

	received, completed, cancelled, failed, rejected atomic.Int64
	kvTokens, promptTokens, genTokens                atomic.Int64
	embeddingRequests, embeddingInputs               atomic.Int64 // answered embeddings requests, and their inputs
	ttft, e2e                                        *histogram
	prefix                                           *prefixCache              // nil unless PrefixCache
	judged                                           [numVerdicts]atomic.Int64 // completed judge requests by verdict

	rec    recorder
	stored respStore // Responses API responses kept for GET and DELETE by id
}

// New validates cfg (zero fields take their defaults) and builds a server.
// Nothing listens until Start or Serve.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gpusim: invalid config: %w", err)
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:      cfg,
		sched:    newScheduler(cfg.MaxNumSeqs, cfg.MaxWaiting),
		stopHang: make(chan struct{}),
		abort:    make(chan struct{}),
		conns:    make(map[net.Conn]struct{}),
		ttft:     newHistogram(ttftBuckets),
		e2e:      newHistogram(e2eBuckets),
	}
	if cfg.PrefixCache {
		s.prefix = newPrefixCache(cfg.KVBlocks)
	}
	if cfg.RPM > 0 {
		s.limiter = newRateLimiter(cfg.RPM, time.Now())
	}
	if cfg.APIKey != "" {
		s.wantAuth = []byte("Bearer " + cfg.APIKey)
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	s.rng = mrand.New(mrand.NewPCG(uint64(seed), 0x67707573696d)) // "gpusim"
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	hex.Encode(s.idPrefix[:], rnd[:])
	s.failRate.Store(math.Float64bits(cfg.FailRate))
	s.healthy.Store(true)
	s.modelLabel = `model_name="` + string(appendLabelValue(nil, cfg.Models[0])) + `"`
	s.cacheConfigLabels = fmt.Sprintf(`block_size="%d",enable_prefix_caching="%s",num_gpu_blocks="%d"`,
		cfg.BlockSize, map[bool]string{true: "True", false: "False"}[cfg.PrefixCache], cfg.KVBlocks)
	s.modelsBody = appendModels(nil, cfg.Models, time.Now().Unix())
	s.srv = &fasthttp.Server{
		Handler:                      s.handle,
		ConnState:                    s.connState,
		Name:                         "gpusim",
		CloseOnShutdown:              true,
		MaxRequestBodySize:           64 << 20,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		TCPKeepalive:                 true,
		Logger:                       log.New(io.Discard, "", 0), // clients hanging up are routine here
		MaxIdleWorkerDuration:        time.Second,                // bounds how long fasthttp's janitor outlives Shutdown
	}
	return s, nil
}

func appendModels(dst []byte, models []string, created int64) []byte {
	dst = append(dst, `{"object":"list","data":[`...)
	for i, m := range models {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"id":`...)
		dst = appendJSONString(dst, m)
		dst = append(dst, `,"object":"model","created":`...)
		dst = strconv.AppendInt(dst, created, 10)
		dst = append(dst, `,"owned_by":"gpusim","root":`...)
		dst = appendJSONString(dst, m)
		dst = append(dst, `,"parent":null}`...)
	}
	return append(dst, "]}"...)
}

// Serve answers requests on ln until Shutdown; it blocks. It returns nil
// after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	done, err := s.register(ln)
	if err != nil {
		return err
	}
	return s.serve(ln, done)
}

// Start listens on cfg.Listen (port 0 picks a free port) and serves in a
// goroutine. It returns the bound address, e.g. "127.0.0.1:43121".
func (s *Server) Start() (addr string, err error) {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return "", fmt.Errorf("gpusim: listen %s: %w", s.cfg.Listen, err)
	}
	done, err := s.register(ln)
	if err != nil {
		_ = ln.Close()
		return "", err
	}
	go func() { _ = s.serve(ln, done) }()
	return s.Addr(), nil
}

// register makes ln the server's listener so Addr and Shutdown see it.
func (s *Server) register(ln net.Listener) (chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return nil, errors.New("gpusim: already serving")
	}
	if isClosed(s.stopHang) {
		return nil, errors.New("gpusim: server is shut down")
	}
	s.ln = ln
	s.serveDone = make(chan struct{})
	return s.serveDone, nil
}

func (s *Server) serve(ln net.Listener, done chan struct{}) error {
	defer close(done)
	err := s.srv.Serve(ln)
	if err != nil && isClosed(s.stopHang) {
		err = nil // listener closed by Shutdown
	}
	if err != nil {
		return fmt.Errorf("gpusim: serve: %w", err)
	}
	return nil
}

// Addr is the bound address ("127.0.0.1:PORT"); "" before Start/Serve.
// An unspecified listen host (0.0.0.0, ::) is reported as 127.0.0.1.
func (s *Server) Addr() string {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln == nil {
		return ""
	}
	a := ln.Addr().String()
	if ta, ok := ln.Addr().(*net.TCPAddr); ok && (ta.IP == nil || ta.IP.IsUnspecified()) {
		a = net.JoinHostPort("127.0.0.1", strconv.Itoa(ta.Port))
	}
	return a
}

// URL is "http://" + Addr().
func (s *Server) URL() string { return "http://" + s.Addr() }

// Shutdown stops accepting connections, ends hanging requests, and waits for
// in-flight requests to finish. If ctx expires first, every remaining
// request is aborted and ctx's error is returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stopHang) })
	s.mu.Lock()
	ln, done := s.ln, s.serveDone
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close() // in case Serve has not registered it with fasthttp yet
	}
	err := s.srv.ShutdownWithContext(ctx)
	if errors.Is(err, net.ErrClosed) {
		err = nil // we closed the listener above
	}
	if err == nil {
		err = s.active.wait(ctx)
	}
	if err == nil && done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil {
		// Out of time: abort every request (they end within a poll interval
		// and answer 503 with Connection: close), let those answers go out,
		// then drop whatever connection is left so nothing outlives Shutdown.
		s.abortOnce.Do(func() { close(s.abort) })
		s.drain(250 * time.Millisecond)
		s.closeConns()
		s.drain(time.Second)
		return fmt.Errorf("gpusim: shutdown: %w", err)
	}
	return nil
}

// drain waits up to d for in-flight requests to end and connections to close.
func (s *Server) drain(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = s.active.wait(ctx)
	for s.openConns() > 0 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
}

// connState tracks open connections so an aborted Shutdown can close them.
func (s *Server) connState(c net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateNew:
		s.connMu.Lock()
		s.conns[c] = struct{}{}
		s.connMu.Unlock()
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		s.connMu.Lock()
		delete(s.conns, c)
		s.connMu.Unlock()
	}
}

func (s *Server) closeConns() {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	for c := range s.conns {
		_ = c.Close()
	}
}

func (s *Server) openConns() int {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	return len(s.conns)
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	return Stats{
		Received:   s.received.Load(),
		Completed:  s.completed.Load(),
		Cancelled:  s.cancelled.Load(),
		Failed:     s.failed.Load(),
		Rejected:   s.rejected.Load(),
		Running:    s.sched.running.Load(),
		Waiting:    s.sched.waiting.Load(),
		MaxRunning: s.sched.highWater.Load(),

		JudgeYes:    s.judged[verdictYes].Load(),
		JudgeNo:     s.judged[verdictNo].Load(),
		JudgeUnsure: s.judged[verdictUnsure].Load(),

		EmbeddingRequests: s.embeddingRequests.Load(),
		EmbeddingInputs:   s.embeddingInputs.Load(),
	}
}

// Requests returns the last 256 requests received, oldest first. Every path
// is recorded except GET /health, GET /metrics and GET /v1/models, which a
// gateway polls.
func (s *Server) Requests() []RecordedRequest { return s.rec.snapshot() }

// ResetRecorded forgets the recorded requests.
func (s *Server) ResetRecorded() { s.rec.reset() }

// SetFailRate changes the fraction of generation requests answered with an
// injected HTTP 500 (clamped to 0..1).
func (s *Server) SetFailRate(f float64) {
	if f != f || f < 0 {
		f = 0
	}
	s.failRate.Store(math.Float64bits(min(f, 1)))
}

// SetHealthy makes /health answer 200 (true) or 503 (false).
func (s *Server) SetHealthy(ok bool) { s.healthy.Store(ok) }

// random returns a uniform draw in [0, 1).
func (s *Server) random() float64 {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Float64()
}

// jittered applies ±Jitter to d.
func (s *Server) jittered(d time.Duration) time.Duration {
	if d <= 0 || s.cfg.Jitter == 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + s.cfg.Jitter*(2*s.random()-1)))
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// tracker counts in-flight work and lets Shutdown wait for it (a WaitGroup
// cannot be waited on with a deadline, nor safely re-armed while waiting).
type tracker struct {
	mu     sync.Mutex
	n      int
	zeroCh chan struct{} // closed when n drops to 0; nil when nobody waits
}

func (t *tracker) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 && t.zeroCh != nil {
		close(t.zeroCh)
		t.zeroCh = nil
	}
	t.mu.Unlock()
}

func (t *tracker) wait(ctx context.Context) error {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return nil
	}
	if t.zeroCh == nil {
		t.zeroCh = make(chan struct{})
	}
	ch := t.zeroCh
	t.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
