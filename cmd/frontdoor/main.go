// Command frontdoor is the OpenAI-compatible gateway. Subcommands: serve,
// demo, check-config, calibrate, warm, cache export, healthcheck, version.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/balancer"
	"frontdoor/internal/buildinfo"
	"frontdoor/internal/telemetry"
	"frontdoor/router"
	"frontdoor/router/admin"
)

const usage = `frontdoor: an OpenAI-compatible front door for self-hosted LLM inference

Usage:
  frontdoor serve --config FILE         run the gateway
  frontdoor demo [flags]                run gateway + simulated GPU nodes + simulated Qwen, no setup:
      --listen ADDR                     gateway address (default 127.0.0.1:8080: loopback only;
                                        :8080 for every interface)
      --admin-listen ADDR               admin listener, no token (default 127.0.0.1, port after --listen's)
      --embedder local|remote           semantic cache embedder: in process, or a simulated
                                        OpenAI-compatible /v1/embeddings
      --warm FILE                       warm the cache from FILE at start
      --ttft DURATION, --itl DURATION   simulated time to first token (150ms), between tokens (25ms)
  frontdoor check-config --config FILE [--strict] [--probe]
                                        validate a config file and report every problem;
                                        --strict: an unset *_env variable is a problem too;
                                        --probe: reach every node, and check the models its
                                        engine serves against its models:
  frontdoor warm FILE... --target URL   warm the cache of a running gateway (see frontdoor warm -h)
  frontdoor cache export --target URL   write the most-hit entries as a JSONL to warm from
  frontdoor calibrate --pairs FILE [--config FILE] [--max-false 0.01]
                                        hit and false-hit rates of the semantic cache per threshold,
                                        on your own labelled pairs, with your embedder and guards
  frontdoor healthcheck [--url URL]     exit 0 if URL (default http://127.0.0.1:8080/healthz) answers 200
  frontdoor version                     print the version

Every command's flags: frontdoor COMMAND --help.

serve reloads FILE on SIGHUP (and POST /admin/reload); on SIGTERM it drains:
/readyz answers 503 for shutdown.drain_delay, then streams get shutdown.grace.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return cmdServe(args[1:], stdout, stderr)
	case "demo":
		return cmdDemo(args[1:], stdout, stderr)
	case "check-config":
		return cmdCheckConfig(args[1:], stdout, stderr)
	case "healthcheck":
		return cmdHealthcheck(args[1:], stdout, stderr)
	case "warm":
		return cmdWarm(args[1:], stdout, stderr)
	case "cache":
		return cmdCache(args[1:], stdout, stderr)
	case "calibrate":
		return cmdCalibrate(args[1:], stdout, stderr)
	case "version", "--version", "-v":
		if isHelp(args[1:]) {
			fmt.Fprint(stdout, "Usage: frontdoor version\n\nPrints the version, the revision it was built from and the Go version.\n")
			return 0
		}
		fmt.Fprintln(stdout, "frontdoor", buildinfo.Get())
		return 0
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		if c := suggestCommand(args[0]); c != "" {
			fmt.Fprintf(stderr, "frontdoor: unknown command %q; did you mean %q?\n\n%s", args[0], c, usage)
			return 2
		}
		fmt.Fprintf(stderr, "frontdoor: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// configFlags parses --config (and --strict and --probe, for
// check-config). done: exit with code (--help, or a bad or missing flag).
func configFlags(name string, args []string, stdout, stderr io.Writer, withStrict bool) (path string, strict, probe bool, code int, done bool) {
	synopsis := name + " --config FILE"
	if withStrict {
		synopsis += " [--strict] [--probe]"
	}
	fs := newFlags(name, synopsis, stderr)
	p := fs.String("config", "", "config file (YAML)")
	var st, pr *bool
	if withStrict {
		st = fs.Bool("strict", false, "treat warnings (an unset *_env variable) as problems")
		pr = fs.Bool("probe", false, "also reach every node: its health endpoint, and the models its engine serves\n(/v1/models, TGI's /info) against its models:")
	}
	if code, done := parseFlags(fs, stdout, func() error { return fs.Parse(args) }); done {
		return "", false, false, code, true
	}
	if *p == "" {
		fmt.Fprintf(stderr, "frontdoor %s: --config FILE is required\n", name)
		return "", false, false, 2, true
	}
	return *p, st != nil && *st, pr != nil && *pr, 0, false
}

func cmdCheckConfig(args []string, stdout, stderr io.Writer) int {
	path, strict, probe, code, done := configFlags("check-config", args, stdout, stderr, true)
	if done {
		return code
	}
	cfg, err := router.Load(path)
	var problems []string
	if err != nil {
		var ce *router.ConfigError
		if !errors.As(err, &ce) {
			fmt.Fprintln(stderr, err)
			return 1
		}
		problems = ce.Problems
	}
	// Keys named by *_env must be set where frontdoor runs: a warning,
	// or a problem with --strict.
	var warnings []string
	for _, e := range cfg.EnvVars() {
		if _, set := os.LookupEnv(e.Name); !set {
			msg := e.Path + ": environment variable " + e.Name + " is not set"
			if strict {
				problems = append(problems, msg)
			} else {
				warnings = append(warnings, msg)
			}
		}
	}
	if probe && len(problems) == 0 {
		p, w := probeNodes(cfg)
		problems, warnings = append(problems, p...), append(warnings, w...)
	}
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning: "+w)
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "%s: %d problem(s)\n", path, len(problems))
		for _, p := range problems {
			fmt.Fprintln(stderr, "  "+p)
		}
		return 1
	}
	probed := ""
	if probe {
		probed = ", nodes probed"
	}
	fmt.Fprintf(stdout, "%s: ok (%s, %s, cache %s, admission %s%s)\n",
		path, plural(len(cfg.Nodes), "node"), plural(len(cfg.Tenants), "tenant"), cfg.Cache.Backend, cfg.Admission.Backend, probed)
	return 0
}

// probeNodes is check-config --probe: each node's health, and the models
// its engine serves against its models:, as serve checks them at start.
func probeNodes(cfg router.Config) (problems, warnings []string) {
	pool, err := balancer.New(cfg.Balancer, cfg.Nodes, cfg.Models)
	if err != nil {
		return []string{"nodes: " + err.Error()}, nil
	}
	for _, r := range pool.CheckNodes() {
		problems = append(problems, r.Problems...)
		warnings = append(warnings, r.Notes...)
	}
	return problems, warnings
}

func cmdServe(args []string, stdout, stderr io.Writer) int {
	path, _, _, code, done := configFlags("serve", args, stdout, stderr, false)
	if done {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return serveFile(ctx, path, stderr)
}

// serveFile is serve --config path until ctx ends: the exit code, with
// what refused the config or stopped the gateway on stderr.
func serveFile(ctx context.Context, path string, stderr io.Writer) int {
	cfg, err := router.Load(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if err := serve(ctx, cfg, path, stderr, nil); err != nil {
		fmt.Fprintln(stderr, "frontdoor:", err)
		return 1
	}
	return 0
}

// logAdminSurface says at start how the admin surface is reached; a
// trusted listener or trusted peers that are not loopback are a WARN.
func logAdminSurface(logger *slog.Logger, cfg router.Config, adminAddr string) {
	tok, _ := router.AdminToken(cfg.Admin) // New has refused a weak one
	var ways []string
	if tok != "" {
		ways = append(ways, "bearer token ("+cfg.Admin.TokenEnv+") on the main listener")
	}
	if adminAddr != "" {
		ways = append(ways, "admin listener "+adminAddr+" (no token)")
		if !admin.LoopbackAddr(adminAddr) {
			logger.Warn("admin.listen is not a loopback address: whoever reaches it is an admin", "addr", adminAddr)
		}
	}
	if len(cfg.Admin.AllowCIDRs) > 0 {
		ways = append(ways, "peers in admin.allow_cidrs (no token)")
		logger.Warn("admin.allow_cidrs trusts peers by address on the main listener: a proxy or sidecar in that range makes every client behind it an admin", "allow_cidrs", strings.Join(cfg.Admin.AllowCIDRs, ","))
	}
	if len(ways) == 0 {
		logger.Info("admin surface closed: set " + cfg.Admin.TokenEnv + " or admin.listen to reach /status, /dashboard and /admin/*")
		return
	}
	logger.Info("admin surface", "access", strings.Join(ways, "; "))
}

// cmdHealthcheck is the container's health check (distroless has no curl).
func cmdHealthcheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("healthcheck", "healthcheck [--url URL]", stderr)
	url := fs.String("url", "http://127.0.0.1:8080/healthz", "URL that must answer 200")
	if code, done := parseFlags(fs, stdout, func() error { return fs.Parse(args) }); done {
		return code
	}
	status, _, err := fasthttp.GetTimeout(nil, *url, 2*time.Second)
	if err != nil {
		fmt.Fprintf(stderr, "healthcheck %s: %v\n", *url, err)
		return 1
	}
	if status != fasthttp.StatusOK {
		fmt.Fprintf(stderr, "healthcheck %s: status %d\n", *url, status)
		return 1
	}
	return 0
}

// serve wires the gateway from cfg and runs it until ctx ends, then drains
// and shuts down gracefully. path, if set, is reloaded on SIGHUP. ready,
// if set, receives the listening addresses (admin: "" without
// admin.listen).
func serve(ctx context.Context, cfg router.Config, path string, logOut io.Writer, ready func(addr, admin string)) error {
	if every := cfg.Logging.FlushInterval.D(); every > 0 {
		lb := telemetry.NewLogBuffer(logOut, every)
		defer lb.Close()
		logOut = lb
	}
	logger := router.NewLogger(cfg.Logging, logOut)
	gw, err := router.New(cfg, router.Deps{Logger: logger, ConfigPath: path})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	logger.Info("frontdoor listening", "addr", ln.Addr().String(), "version", buildinfo.Get().Version, "revision", buildinfo.Get().Revision, "nodes", len(cfg.Nodes))
	var adminAddr string
	if cfg.Admin.Listen != "" {
		aln, err := net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("admin.listen %s: %w", cfg.Admin.Listen, err)
		}
		adminAddr = aln.Addr().String()
		go func() {
			if err := gw.ServeAdmin(aln); err != nil {
				logger.Error("admin listener stopped", "error", err.Error())
			}
		}()
	}
	logAdminSurface(logger, cfg, adminAddr)
	if ready != nil {
		ready(ln.Addr().String(), adminAddr)
	}
	errc := make(chan error, 1)
	go func() { errc <- gw.Serve(ln) }()
	if len(cfg.Warm.Files) > 0 {
		go func() {
			// In the background: readiness doesn't wait, /status shows it.
			if _, err := gw.Warm(ctx, ln.Addr().String()); err != nil && ctx.Err() == nil {
				logger.Warn("cache warm-up failed", "error", err.Error())
			}
		}()
	}
	hup := make(chan os.Signal, 1)
	if path != "" {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	for done := false; !done; {
		select {
		case err := <-errc:
			return err
		case <-hup:
			_ = gw.ReloadFile("SIGHUP") // logs the outcome
		case <-ctx.Done():
			done = true
		}
	}
	sd := gw.Config().Shutdown // as reloaded
	gw.BeginDrain()
	if d := sd.DrainDelay.D(); d > 0 {
		logger.Info("draining: /readyz answers 503, requests still served", "drain_delay", sd.DrainDelay.String())
		select {
		case err := <-errc:
			return err
		case <-time.After(d):
		}
	}
	logger.Info("shutting down: refusing new requests, letting in-flight ones finish", "grace", sd.Grace.String())
	sctx, cancel := context.WithTimeout(context.Background(), sd.Grace.D())
	defer cancel()
	if err := gw.Shutdown(sctx); err != nil {
		logger.Warn("grace period over; remaining streams were cut", "error", err.Error())
	}
	<-errc
	logger.Info("stopped")
	return nil
}

// plural is "1 node", "2 nodes".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
