package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"frontdoor/balancer"
	"frontdoor/embed"
	"frontdoor/internal/gpusim"
	"frontdoor/router"
)

// demoAPIKey is the simulated DashScope's key; it never leaves this process.
const demoAPIKey = "sk-demo-dashscope"

// demoFlags are frontdoor demo's flags; the top-level usage lists them.
type demoFlags struct {
	listen, adminListen, warmFile, embedder string
	ttft, itl                               time.Duration
}

func newDemoFlags(stderr io.Writer) (*flag.FlagSet, *demoFlags) {
	var f demoFlags
	fs := newFlags("demo", "demo [flags]", stderr)
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "gateway listen address (loopback by default; :8080 listens on every interface)")
	fs.StringVar(&f.adminListen, "admin-listen", "", "admin listener, trusted with no token (default: 127.0.0.1 and the port after --listen's)")
	fs.DurationVar(&f.ttft, "ttft", 150*time.Millisecond, "simulated time to first token")
	fs.DurationVar(&f.itl, "itl", 25*time.Millisecond, "simulated time between tokens")
	fs.StringVar(&f.warmFile, "warm", "", "warm the cache from this file at start (any frontdoor warm format; plain text uses qwen3-8b)")
	fs.StringVar(&f.embedder, "embedder", "local", "semantic cache embedder: local (in process) or remote (an OpenAI-compatible /v1/embeddings, simulated)")
	return fs, &f
}

func cmdDemo(args []string, stdout, stderr io.Writer) int {
	fs, f := newDemoFlags(stderr)
	if code, done := parseFlags(fs, stdout, func() error { return fs.Parse(args) }); done {
		return code
	}
	listen, adminListen, ttft, itl, warmFile, embedder := &f.listen, &f.adminListen, &f.ttft, &f.itl, &f.warmFile, &f.embedder
	if *embedder != "local" && *embedder != "remote" {
		fmt.Fprintln(stderr, "frontdoor demo: --embedder must be local or remote")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *adminListen == "" {
		*adminListen = demoAdminListen(*listen)
	}
	if err := runDemo(ctx, *listen, *adminListen, *ttft, *itl, *warmFile, *embedder == "remote", stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "frontdoor demo:", err)
		return 1
	}
	return 0
}

// runDemo starts two simulated vLLM nodes, a simulated DashScope, with
// remoteEmbed a simulated embedding server, and the gateway in this
// process, prints a banner and serves until ctx ends.
func runDemo(ctx context.Context, listen, adminListen string, ttft, itl time.Duration, warmFile string, remoteEmbed bool, stdout, stderr io.Writer) error {
	var sims []*gpusim.Server
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range sims {
			_ = s.Shutdown(sctx)
		}
	}()
	start := func(c gpusim.Config) (*gpusim.Server, error) {
		s, err := gpusim.New(c)
		if err != nil {
			return nil, err
		}
		if _, err := s.Start(); err != nil {
			return nil, err
		}
		sims = append(sims, s)
		return s, nil
	}
	cfg := router.DefaultConfig()
	cfg.Listen = listen
	// The operator of a demo is the person at the keyboard: the admin
	// surface is on a loopback listener of its own (no token), and it
	// shows cached questions (so cache export works).
	cfg.Admin.Listen = adminListen
	cfg.Admin.ShowCachedQuestions = true
	cfg.Logging.Format = "text"
	cfg.Logging.AccessLog = false
	cfg.Shutdown.Grace = 10_000_000_000
	for _, name := range []string{"gpu-a", "gpu-b"} {
		c := gpusim.DefaultConfig()
		c.Listen, c.Models, c.MaxNumSeqs, c.TTFT, c.ITL, c.OutputTokens, c.Jitter = "127.0.0.1:0", []string{"qwen3-8b"}, 10, ttft, itl, 48, 0.2
		s, err := start(c)
		if err != nil {
			return fmt.Errorf("start simulated node %s: %w", name, err)
		}
		cfg.Nodes = append(cfg.Nodes, balancer.NodeConfig{Name: name, URL: s.URL(), Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 10, Weight: 1})
	}
	// A simulated judge audits every semantic hit (cache.semantic.verify):
	// it knows the pairs of demoJudgeLabels and is unsure of any other.
	labels, err := gpusim.ReadJudgeLabels(strings.NewReader(demoJudgeLabels))
	if err != nil {
		return err
	}
	jc := gpusim.DefaultConfig()
	jc.Listen, jc.Models, jc.JudgeLabels, jc.TTFT, jc.ITL = "127.0.0.1:0", []string{"judge"}, labels, ttft, itl
	judge, err := start(jc)
	if err != nil {
		return fmt.Errorf("start simulated judge: %w", err)
	}
	cfg.Nodes = append(cfg.Nodes, balancer.NodeConfig{Name: "judge", URL: judge.URL(), Kind: "vllm", Models: []string{"judge"}, MaxConcurrency: 10, Weight: 1})
	v := &cfg.Cache.Semantic.Verify
	v.JudgeModel, v.AuditRate, v.MaxJudgeRPS = "judge", 1, 20
	dc := gpusim.DefaultConfig()
	dc.Listen, dc.Kind, dc.Models, dc.APIKey, dc.TTFT, dc.ITL, dc.MaxNumSeqs = "127.0.0.1:0", gpusim.KindDashScope, []string{"qwen-plus"}, demoAPIKey, ttft*2, itl, 1000
	qwen, err := start(dc)
	if err != nil {
		return fmt.Errorf("start simulated DashScope: %w", err)
	}
	os.Setenv("FRONTDOOR_DEMO_DASHSCOPE_KEY", demoAPIKey)
	cfg.Spillover.Enabled = true
	cfg.Spillover.BaseURL = qwen.URL() + "/compatible-mode/v1"
	cfg.Spillover.APIKeyEnv = "FRONTDOOR_DEMO_DASHSCOPE_KEY"
	cfg.Spillover.ModelMap = map[string]string{"qwen3-8b": "qwen-plus"}
	cfg.Models = []balancer.ModelAlias{{Name: "chat", Targets: []balancer.ModelTarget{{Model: "qwen3-8b", Weight: 1}}}}
	if warmFile != "" {
		if _, err := os.Stat(warmFile); err != nil {
			return fmt.Errorf("--warm: %w", err)
		}
		// In the background, as warm.files at serve start: /status shows it.
		cfg.Warm.Files, cfg.Warm.Model = []string{warmFile}, "qwen3-8b"
	}
	embedderLine := "local (in process)"
	if remoteEmbed {
		ec := gpusim.DefaultConfig()
		ec.Listen = "127.0.0.1:0"
		es, err := start(ec)
		if err != nil {
			return fmt.Errorf("start simulated embedding server: %w", err)
		}
		// The one config line a real model needs (TEI, vLLM --task embed, Ollama, DashScope).
		cfg.Cache.Embedder = embed.Config{Kind: embed.KindOpenAI, URL: es.URL() + "/v1", Model: "bge-m3", Dims: gpusim.DefaultEmbeddingDims}
		if err := cfg.Cache.Embedder.Validate(); err != nil {
			return err
		}
		embedderLine = es.URL() + "/v1/embeddings (simulated, OpenAI-compatible, " + fmt.Sprint(gpusim.DefaultEmbeddingDims) + " dims)"
	}

	return serve(ctx, cfg, "", stderr, func(addr, admin string) {
		fmt.Fprint(stdout, banner(addr, admin, cfg, qwen.URL(), embedderLine))
	})
}

// demoJudgeLabels are the pairs the demo's judge knows (tab-separated:
// cached question, new question, 1 when the cached answer serves it).
const demoJudgeLabels = "Hello, who are you?\thello who are you\t1\n" +
	"What is the capital of France?\twhat is the capital of france\t1\n" +
	"How do I reset my password?\thow do i reset my password\t1\n" +
	"How do I reset my password?\thow do i reset my password?\t1\n"

// demoAdminListen is 127.0.0.1 and the port after listen's (0 stays 0).
func demoAdminListen(listen string) string {
	_, port, err := net.SplitHostPort(listen)
	p, perr := strconv.Atoi(port)
	if err != nil || perr != nil || p == 0 || p == 65535 {
		return "127.0.0.1:0"
	}
	return "127.0.0.1:" + strconv.Itoa(p+1)
}

// selfCommand is how to run this program again from a shell: "go run
// ./cmd/frontdoor" under go run (the binary is in a temporary build
// folder), "frontdoor" when that is what PATH finds, else the path it was
// started as.
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil || strings.Contains(exe, string(os.PathSeparator)+"go-build") {
		return "go run ./cmd/frontdoor"
	}
	if p, err := exec.LookPath("frontdoor"); err == nil {
		if a, b := realPath(p), realPath(exe); a == b {
			return "frontdoor"
		}
	}
	return os.Args[0]
}

func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func banner(addr, admin string, cfg router.Config, qwenURL, embedder string) string {
	self := selfCommand()
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1" // every interface: loopback is one of them
	}
	base := "http://" + net.JoinHostPort(host, port)
	adminBase := "http://" + admin
	return fmt.Sprintf(`
frontdoor demo is running (Ctrl-C stops everything)

  gateway         %[1]s/v1            (OpenAI-compatible)
  models          %[1]s/v1/models
  metrics         %[1]s/metrics
  admin           %[6]s   (loopback only, no token: /status, /admin/*)
  dashboard       %[6]s/dashboard     (cache hit rate, spill-over, node load)
  simulated GPUs  %[2]s (gpu-a), %[3]s (gpu-b): vLLM, max-num-seqs 10
  simulated Qwen  %[4]s (DashScope compatible mode, spill-over)
  embedder        %[5]s
  judge           simulated: audits every semantic hit (docs/verify.md); the
                  dashboard shows the share judged wrong

Try it (ask twice, or reworded, to see X-Cache: hit-exact / hit-semantic):

  curl -s %[1]s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"qwen3-8b","messages":[{"role":"user","content":"Hello, who are you?"}]}'
  curl -si %[1]s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"qwen3-8b","messages":[{"role":"user","content":"hello who are you"}]}' | grep X-Cache

  curl -sN %[1]s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"qwen3-8b","stream":true,"messages":[{"role":"user","content":"Tell me a story"}]}'

Warm the cache (prompts go through the gateway; answered pairs are imported,
which is an admin call):

  %[7]s warm deploy/examples/hot-prompts.txt --target %[1]s --model qwen3-8b
  %[7]s warm deploy/examples/faq.jsonl --target %[6]s
  %[7]s cache export --target %[6]s --top 100 --out hot.jsonl

`, base, cfg.Nodes[0].URL, cfg.Nodes[1].URL, qwenURL, embedder, adminBase, self)
}
