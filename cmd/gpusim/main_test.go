package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"frontdoor/internal/gpusim"
)

func TestParseFlags(t *testing.T) {
	t.Setenv("GPUSIM_API_KEY", "from-env")
	var stderr bytes.Buffer
	cfg, err := parseFlags([]string{
		"--listen", "127.0.0.1:0", "--model", "a", "--model", "b", "--kind", "tgi",
		"--max-num-seqs", "4", "--max-waiting", "8", "--ttft", "1s", "--itl", "5ms",
		"--output-tokens", "9", "--jitter", "0.1", "--fail-rate", "0.2", "--hang-rate", "0.3",
		"--rpm", "60", "--kv-capacity", "1000", "--seed", "7",
	}, &stderr)
	if err != nil {
		t.Fatalf("parseFlags: %v (%s)", err, stderr.String())
	}
	want := gpusim.Config{
		Listen: "127.0.0.1:0", Models: []string{"a", "b"}, Kind: gpusim.KindTGI,
		MaxNumSeqs: 4, MaxWaiting: 8, TTFT: time.Second, ITL: 5 * time.Millisecond,
		OutputTokens: 9, Jitter: 0.1, FailRate: 0.2, HangRate: 0.3, APIKey: "from-env",
		RPM: 60, KVCapacityTokens: 1000, Seed: 7,
	}
	if got := cfg; got.Listen != want.Listen || strings.Join(got.Models, ",") != "a,b" || got.Kind != want.Kind ||
		got.MaxNumSeqs != 4 || got.MaxWaiting != 8 || got.TTFT != want.TTFT || got.ITL != want.ITL ||
		got.OutputTokens != 9 || got.Jitter != 0.1 || got.FailRate != 0.2 || got.HangRate != 0.3 ||
		got.APIKey != "from-env" || got.RPM != 60 || got.KVCapacityTokens != 1000 || got.Seed != 7 {
		t.Errorf("got %+v\nwant %+v", got, want)
	}

	cfg, err = parseFlags([]string{"--prefix-cache", "--block-size", "32", "--kv-blocks", "100", "--prefill-per-token", "200us"}, &stderr)
	if err != nil || !cfg.PrefixCache || cfg.BlockSize != 32 || cfg.KVBlocks != 100 || cfg.PrefillPerToken != 200*time.Microsecond {
		t.Errorf("prefix cache flags: %+v %v", cfg, err)
	}

	cfg, err = parseFlags([]string{"--api-key", "flag"}, &stderr)
	if err != nil || cfg.APIKey != "flag" || cfg.Kind != gpusim.KindVLLM || cfg.Models[0] != gpusim.DefaultModel ||
		cfg.JudgeLabels != nil {
		t.Errorf("flag api key / defaults: %+v %v", cfg, err)
	}

	path := filepath.Join(t.TempDir(), "labels.tsv")
	if err := os.WriteFile(path, []byte("s1\ts2\tlabel\na\tb\t1\nc\td\t0\nmalformed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = parseFlags([]string{"--judge-labels", path}, &stderr)
	if err != nil || cfg.JudgeLabels == nil || cfg.JudgeLabels.Verdict("b", "a") != gpusim.JudgeYes {
		t.Fatalf("--judge-labels: %+v %v", cfg, err)
	}
	wantSummary := "2 labelled pairs (1 yes, 1 no, 0 labelled both ways: unsure, 0 of one text twice: yes) from 4 lines, " +
		"header skipped, 1 malformed lines skipped (the first is line 4)"
	if got := judgeSummary(cfg.JudgeLabels.Stats()); got != wantSummary {
		t.Errorf("judgeSummary:\n got %q\nwant %q", got, wantSummary)
	}
}

func TestInvalidFlagsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"--kind", "triton"},
		{"--max-num-seqs", "0"},
		{"--fail-rate", "1.5"},
		{"--ttft", "soon"},
		{"--nope"},
		{"extra"},
		{"--block-size", "0"},
		{"--kv-blocks", "-1"},
		{"--prefill-per-token", "-1ms"},
		{"--judge-labels", filepath.Join(t.TempDir(), "missing.tsv")},
		{"--judge-labels", os.DevNull},
	} {
		var stderr bytes.Buffer
		if code := run(args, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}
