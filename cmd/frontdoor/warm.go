package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"frontdoor/internal/units"
	"frontdoor/internal/warm"
	"frontdoor/router"
)

const warmUsage = `Usage: frontdoor warm FILE... (--target URL | --config FILE) [flags]

Sends each prompt of FILE through a running gateway (--target), so that its
answer is cached; what is cached already is skipped. Answered pairs are
imported with no GPU call. With --config instead, answered pairs are
imported straight into the configured cache backend.

FILE is plain text (one prompt a line), JSON Lines of chat requests, or JSON
Lines of answered pairs ({"prompt" or "messages", "answer", ...}); the
format is read from the content.

Warm with what your app sends: the cache keys the system prompt and every
parameter, so a plain-text prompt warmed without them misses the app's
request for the same question. --like FILE takes them from one request as
the app sends it (frontdoor cache export --top 1 gives one). Without it, a
plain-text warm against a gateway says which parameter sets its clients use.

Flags:
`

// warmFlags are frontdoor warm's flags.
type warmFlags struct {
	target, config, apiKey, adminToken, tenant, tag, report string
	model, system, like                                     string
	temperature                                             float64
	maxTokens, concurrency                                  int
	rps                                                     float64
	dryRun                                                  bool
	every                                                   time.Duration
}

func cmdWarm(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return runWarm(ctx, args, stdout, stderr)
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

func runWarm(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f warmFlags
	fs := flag.NewFlagSet("warm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), warmUsage); fs.PrintDefaults() }
	fs.StringVar(&f.target, "target", "", "gateway base URL, e.g. http://gateway:8080")
	fs.StringVar(&f.config, "config", "", "config file: import answered pairs straight into its cache backend")
	fs.StringVar(&f.apiKey, "api-key", os.Getenv("FRONTDOOR_API_KEY"), "tenant API key for the requests (default $FRONTDOOR_API_KEY)")
	fs.StringVar(&f.adminToken, "admin-token", os.Getenv("FRONTDOOR_ADMIN_TOKEN"), "admin token, for answered pairs and lines that name a tenant (default $FRONTDOOR_ADMIN_TOKEN)")
	fs.StringVar(&f.tenant, "tenant", "", "tenant of answered pairs that name none (default: the default tenant)")
	fs.StringVar(&f.tag, "tag", "", "tag of the warmed entries (default: the file name), for DELETE /admin/cache?tag=")
	fs.StringVar(&f.report, "report", "", "write the failures to this JSONL file (file, line, error)")
	fs.StringVar(&f.model, "model", "", "model of plain-text prompts and of requests without one")
	fs.StringVar(&f.system, "system", "", "system prompt of plain-text prompts")
	fs.StringVar(&f.like, "like", "", "a `FILE` holding one chat request as the app sends it: each plain-text prompt is sent as it, in place of its last user message")
	var temperature optionalFloat
	fs.Var(&temperature, "temperature", "the `number` sent as temperature of plain-text prompts (default: none sent)")
	fs.IntVar(&f.maxTokens, "max-tokens", 0, "max_tokens of plain-text prompts (0: none sent)")
	fs.IntVar(&f.concurrency, "concurrency", 5, "requests in flight at most")
	fs.Float64Var(&f.rps, "rps", 0, "items started per second at most (0: no limit)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "look up only: count what is cached and what would be warmed")
	fs.DurationVar(&f.every, "progress-every", 2*time.Second, "period of the progress lines when not on a terminal")
	var files []string
	if code, done := parseFlags(fs, stdout, func() (err error) { files, err = parseInterleaved(fs, args); return err }); done {
		return code
	}
	f.temperature = math.NaN()
	if temperature.set {
		f.temperature = temperature.v
	}
	switch {
	case len(files) == 0:
		fmt.Fprintln(stderr, "frontdoor warm: at least one FILE is required")
		return 2
	case (f.target == "") == (f.config == ""):
		fmt.Fprintln(stderr, "frontdoor warm: give --target URL or --config FILE")
		return 2
	case f.concurrency < 1 || f.rps < 0:
		fmt.Fprintln(stderr, "frontdoor warm: --concurrency must be >= 1 and --rps >= 0")
		return 2
	}
	d := warm.Defaults{Model: f.model, System: f.system, MaxTokens: f.maxTokens}
	if !math.IsNaN(f.temperature) {
		d.Temperature = &f.temperature
	}
	if f.like != "" {
		if f.system != "" || temperature.set || f.maxTokens != 0 {
			fmt.Fprintln(stderr, "frontdoor warm: --like takes the system prompt and the parameters from its request: drop --system, --temperature and --max-tokens")
			return 2
		}
		data, err := os.ReadFile(f.like)
		if err == nil {
			d.Like, err = warm.ParseLike(data)
		}
		if err != nil {
			fmt.Fprintf(stderr, "frontdoor warm: --like %s: %v\n", f.like, err)
			return 2
		}
		if d.Model == "" {
			d.Model = d.Like.Model()
		}
	}
	var items []warm.Item
	var plain *warm.Item // a plain-text prompt's item, for the advice below
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(stderr, "frontdoor warm:", err)
			return 1
		}
		its, format, err := warm.Parse(path, data, d)
		if err != nil {
			fmt.Fprintln(stderr, "frontdoor warm:", err)
			return 1
		}
		if i := slices.IndexFunc(its, func(it warm.Item) bool { return it.Err == nil }); format == warm.FormatText && i >= 0 && plain == nil {
			plain = &its[i]
		}
		items = append(items, its...)
	}
	if plain != nil && f.target != "" && f.like == "" {
		adviseParams(ctx, f.target, f.adminToken, plain.Request, stderr)
	}

	var target warm.Target
	if f.target != "" {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = f.concurrency // keep one connection per worker
		target = &warm.HTTPTarget{BaseURL: f.target, APIKey: f.apiKey, AdminToken: f.adminToken, Tenant: f.tenant, Tag: f.tag,
			Client: &http.Client{Transport: tr}}
	} else {
		gw, err := openImportGateway(ctx, f.config, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "frontdoor warm:", err)
			return 1
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = gw.Shutdown(sctx)
		}()
		target = gw.ImportTarget(f.tag)
	}

	rep := warm.NewReporter(stderr, int64(len(items)), f.every)
	sum := warm.Run(ctx, items, target, warm.Options{Concurrency: f.concurrency, RPS: f.rps, DryRun: f.dryRun, OnProgress: rep.Update})
	rep.Finish(sum)
	for i, fl := range sum.Failures {
		if i == 20 {
			fmt.Fprintf(stderr, "... and %d more failures\n", len(sum.Failures)-i)
			break
		}
		fmt.Fprintf(stderr, "%s:%d: %s\n", fl.File, fl.Line, fl.Error)
	}
	if f.report != "" {
		if err := writeReport(f.report, sum.Failures); err != nil {
			fmt.Fprintln(stderr, "frontdoor warm:", err)
			return 1
		}
	}
	fmt.Fprintln(stdout, sum.Line())
	if sum.Failed > 0 || sum.Interrupted {
		return 1
	}
	return 0
}

// adviseParams tells, before a plain-text warm without --like, which
// parameter sets the gateway's clients send most and whether the warm's
// own is among them: a warmed entry answers only requests of its set. A
// gateway that cannot say (no admin token, no traffic yet) gets one line
// of caution instead.
func adviseParams(ctx context.Context, target, adminToken string, sample json.RawMessage, stderr io.Writer) {
	ours, err := warm.ParamSetOf(sample)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rep, err := warm.FetchParamSets(ctx, nil, target, adminToken, 3)
	if err != nil || rep.Sampled == 0 || len(rep.Sets) == 0 {
		why := "it has seen no chat request yet"
		if err != nil {
			why = err.Error()
			if adminToken == "" {
				why += "; --admin-token lets it answer"
			}
		}
		fmt.Fprintf(stderr, "frontdoor warm: plain-text prompts go out as %s: an app request with another system prompt or other parameters misses them; --like FILE warms as the app asks (the gateway could not say what its clients send: %s)\n", ours, why)
		return
	}
	share := func(ps warm.ParamSet) string {
		return strconv.FormatFloat(100*float64(ps.Requests)/float64(rep.Sampled), 'f', 0, 64) + "%"
	}
	fmt.Fprintf(stderr, "frontdoor warm: the gateway's clients send these parameter sets most (of %d chat requests sampled):\n", rep.Sampled)
	var match *warm.ParamSet
	for i, ps := range rep.Sets {
		fmt.Fprintf(stderr, "  %4s  %s\n", share(ps), ps)
		if ps.Key() == ours.Key() {
			match = &rep.Sets[i]
		}
	}
	if match != nil && match == &rep.Sets[0] {
		fmt.Fprintf(stderr, "frontdoor warm: the plain-text prompts are sent with the most common set: %s\n", ours)
		return
	}
	fmt.Fprintf(stderr, "frontdoor warm: the plain-text prompts are sent with %s", ours)
	if match != nil {
		fmt.Fprintf(stderr, ", %s of the requests;", share(*match))
	} else {
		fmt.Fprint(stderr, ", which none of those requests use;")
	}
	fmt.Fprintln(stderr, " their entries answer only requests sent the same way. To warm for the others, pass --like FILE, one request as the app sends it (frontdoor cache export --top 1 gives one).")
}

// openImportGateway builds the gateway of a config, without serving, for
// its cache, and waits for the store to connect.
func openImportGateway(ctx context.Context, path string, stderr io.Writer) (*router.Gateway, error) {
	cfg, err := router.Load(path)
	if err != nil {
		return nil, err
	}
	if cfg.Cache.Backend != "redis" {
		return nil, fmt.Errorf("%s: cache.backend is %q: --config imports into a shared (redis) store; warm a running gateway with --target", path, cfg.Cache.Backend)
	}
	cfg.Logging.FlushInterval = 0
	cfg.Logging.Level = "warn"
	// reads.timeout bounds what a client waits for a lookup (100ms by
	// default: a slower store is a miss). An import answers no client: it
	// waits for a slow Redis instead of failing its pairs.
	cfg.Cache.Reads.Timeout = max(cfg.Cache.Reads.Timeout, units.Duration(5*time.Second))
	gw, err := router.New(cfg, router.Deps{Logger: router.NewLogger(cfg.Logging, stderr)})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := gw.WaitCache(wctx); err != nil {
		_ = gw.Shutdown(context.Background())
		return nil, err
	}
	return gw, nil
}

func writeReport(path string, failures []warm.Failure) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, fl := range failures {
		if err := enc.Encode(fl); err != nil {
			_ = f.Close()
			return err
		}
	}
	return f.Close()
}

func cmdCache(args []string, stdout, stderr io.Writer) int {
	const synopsis = "cache export --target URL [--top 1000] [--out hot.jsonl] [--tenant NAME] [--admin-token T]"
	if isHelp(args) {
		fmt.Fprintln(stdout, "Usage: frontdoor "+synopsis+"\n\nfrontdoor cache export --help: its flags")
		return 0
	}
	if len(args) == 0 || args[0] != "export" {
		fmt.Fprintln(stderr, "Usage: frontdoor "+synopsis)
		return 2
	}
	fs := newFlags("cache export", synopsis, stderr)
	target := fs.String("target", "", "gateway base URL")
	top := fs.Int("top", 1000, "how many of the most-hit entries")
	out := fs.String("out", "-", "output file (- for stdout)")
	token := fs.String("admin-token", os.Getenv("FRONTDOOR_ADMIN_TOKEN"), "admin token (default $FRONTDOOR_ADMIN_TOKEN)")
	tenant := fs.String("tenant", "", "only this tenant's entries, without the tenant field (warm them with its API key)")
	if code, done := parseFlags(fs, stdout, func() error { return fs.Parse(args[1:]) }); done {
		return code
	}
	if *target == "" || *top < 1 {
		fmt.Fprintln(stderr, "frontdoor cache export: --target URL is required and --top must be >= 1")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	b, err := warm.FetchHot(ctx, nil, *target, *token, *top, *tenant)
	if err != nil {
		fmt.Fprintln(stderr, "frontdoor cache export:", err)
		return 1
	}
	n := 0
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	if *out == "-" {
		_, err = stdout.Write(b)
	} else {
		err = writePrivate(*out, b)
	}
	if err != nil {
		fmt.Fprintln(stderr, "frontdoor cache export:", err)
		return 1
	}
	fmt.Fprintf(stderr, "exported %d entries\n", n)
	return 0
}

// writePrivate writes b to path readable by its owner only (0600, also
// when the file existed with a wider mode): an export holds clients'
// prompts.
func writePrivate(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
