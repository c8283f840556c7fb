package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"frontdoor/cache"
	"frontdoor/embed"
	"frontdoor/internal/semeval"
	"frontdoor/router"
)

// cmdCalibrate runs the store-then-query protocol on a file of labelled
// pairs with the configured embedder and guards, and prints the threshold
// table; the logic is in internal/semeval.
func cmdCalibrate(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("calibrate", "calibrate --pairs FILE [--config FILE] [--max-false 0.01]", stderr)
	pairs := fs.String("pairs", "", "labelled pairs: sentence1<TAB>sentence2<TAB>0|1 lines, or a GPTCache-style JSON list of {origin, similar}")
	config := fs.String("config", "", "gateway config whose cache.embedder and cache.semantic.guards to use (default: the built-in defaults)")
	maxFalse := fs.Float64("max-false", 0.01, "false-hit rate the suggested threshold must not exceed")
	from := fs.Float64("from", 0.80, "lowest threshold of the table")
	to := fs.Float64("to", 0.99, "highest threshold of the table")
	step := fs.Float64("step", 0.01, "threshold step")
	half := fs.String("half", "", "use only the even or odd pairs (by position), to check a threshold on pairs it was not chosen on")
	workers := fs.Int("concurrency", 16, "concurrent embedding calls")
	if code, done := parseFlags(fs, stdout, func() error { return fs.Parse(args) }); done {
		return code
	}
	if *pairs == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "frontdoor calibrate: --pairs FILE is required")
		return 2
	}
	if *maxFalse < 0 || *maxFalse > 1 {
		fmt.Fprintln(stderr, "frontdoor calibrate: --max-false must be between 0 and 1")
		return 2
	}
	cc := cache.DefaultConfig()
	if *config != "" {
		cfg, err := router.Load(*config)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		cc = cfg.Cache
	}
	e, err := embed.New(cc.Embedder)
	if err != nil {
		fmt.Fprintln(stderr, "frontdoor calibrate:", err)
		return 1
	}
	parse := semeval.LoadTSV
	if strings.EqualFold(filepath.Ext(*pairs), ".json") {
		parse = semeval.LoadGPTCache
	}
	ps, err := semeval.LoadFile(*pairs, parse)
	if err == nil {
		ps, err = semeval.Half(ps, *half)
	}
	if err != nil {
		fmt.Fprintln(stderr, "frontdoor calibrate:", err)
		return 1
	}
	ds := semeval.Dataset{Name: filepath.Base(*pairs), Pairs: ps}
	if *half != "" {
		ds.Name += " (" + *half + " half)"
	}
	opts := semeval.CalibrateOptions{From: *from, To: *to, Step: *step, MaxFalse: *maxFalse, Workers: *workers}
	if _, _, err := semeval.Calibrate(context.Background(), stdout, e, cc.Semantic.Guards, ds, opts); err != nil {
		fmt.Fprintln(stderr, "frontdoor calibrate:", err)
		return 1
	}
	return 0
}
