package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"

	"frontdoor/embed"
)

// stubEmbedder returns fixed unit vectors, so that every similarity in a
// test is known.
type stubEmbedder map[string][]float32

func (s stubEmbedder) Embed(_ context.Context, text string) ([]float32, error) {
	v, ok := s[text]
	if !ok {
		return nil, errors.New("no vector for " + text)
	}
	return v, nil
}
func (s stubEmbedder) Dims() int    { return 2 }
func (s stubEmbedder) Name() string { return "stub" }

func TestEvaluateAndScore(t *testing.T) {
	// Similarities to the entries follow from the 2-d unit vectors.
	e := stubEmbedder{
		"sort a list":          {1, 0},
		"how to sort a list":   {0.96, 0.28}, // 0.96 to "sort a list"
		"what is 12*7":         {0, 1},
		"what is 12*8":         {0.28, 0.96}, // 0.96 to "what is 12*7": numbers veto
		"weather today":        {-1, 0},
		"tell me a joke":       {-0.6, -0.8}, // 0.6 to "weather today"
		"sort the list please": {0.8, 0.6},   // 0.8 to "sort a list", 0.6 to "what is 12*7"
		"Weather today?":       {-1, 0},      // same text as an entry up to case and punctuation
	}
	ds := dataset{name: "stub", pairs: []pair{
		{"sort a list", "how to sort a list", true},    // true hit at <= 0.96
		{"what is 12*7", "what is 12*8", false},        // false hit unless guards veto
		{"weather today", "tell me a joke", false},     // false hit at <= 0.6
		{"what is 12*7", "sort the list please", true}, // nearest is another entry: false hit
		{"sort a list", "Weather today?", false},       // left out: equals an entry
	}}
	results, err := evaluate(context.Background(), e, ds, 2)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		threshold                  float32
		guards                     bool
		trueHits, falseDiff, other int
		vetoed                     int
	}{
		{0.5, true, 1, 1, 1, 1},
		{0.5, false, 1, 2, 1, 0},
		{0.7, true, 1, 0, 1, 1},
		{0.9, true, 1, 0, 0, 1},
		{0.97, true, 0, 0, 0, 0},
	}
	for _, tc := range tests {
		s := scoreAt(results, tc.threshold, tc.guards, false)
		if s.queries != 4 || s.paraphrases != 2 || s.exact != 1 {
			t.Fatalf("queries/paraphrases/exact = %d/%d/%d, want 4/2/1", s.queries, s.paraphrases, s.exact)
		}
		if s.trueHits != tc.trueHits || s.falseDifferent != tc.falseDiff || s.falseOther != tc.other || s.guardRejected != tc.vetoed {
			t.Errorf("t=%.2f guards=%v: true %d, false on different %d, false on other %d, vetoed %d; want %d %d %d %d",
				tc.threshold, tc.guards, s.trueHits, s.falseDifferent, s.falseOther, s.guardRejected,
				tc.trueHits, tc.falseDiff, tc.other, tc.vetoed)
		}
	}
	// With --keep-exact the equal-text query counts, as a false hit.
	if s := scoreAt(results, 0.99, true, true); s.queries != 5 || s.falseDifferent != 1 {
		t.Errorf("keep-exact: queries %d, false on different %d; want 5, 1", s.queries, s.falseDifferent)
	}
	// At most 25% false hits (1 of 4) needs a threshold above 0.6.
	safe, ok := lowestSafeThreshold(results, 0.25, true, false)
	if !ok || safe.threshold <= 0.6 || safe.threshold > 0.8 || safe.falseHits() > 1 {
		t.Errorf("lowest safe threshold = %.3f (ok %v) with %d false hits, want in (0.6, 0.8] with <= 1",
			safe.threshold, ok, safe.falseHits())
	}
	// Scored with --keep-exact, the equal-text query is a false hit at
	// similarity 1, so no threshold gets false hits to zero.
	if s, ok := lowestSafeThreshold(results, 0, true, true); ok {
		t.Errorf("found threshold %.3f with no false hits, want none", s.threshold)
	}
}

func TestLoaders(t *testing.T) {
	pairs, err := loadLCQMC(strings.NewReader("甲\t乙\t1\r\n\n丙\t丁\t0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pairs) != 2 || pairs[0] != (pair{"甲", "乙", true}) || pairs[1] != (pair{"丙", "丁", false}) {
		t.Fatalf("loadLCQMC = %+v", pairs)
	}
	if _, err := loadLCQMC(strings.NewReader("only\ttwo\n")); err == nil {
		t.Error("loadLCQMC accepted a line with two fields")
	}
	if _, err := loadLCQMC(strings.NewReader("a\tb\t2\n")); err == nil {
		t.Error("loadLCQMC accepted label 2")
	}

	pairs, err = loadGPTCache(strings.NewReader(`[{"origin":"a","similar":"b"}]`))
	if err != nil || len(pairs) != 1 || pairs[0] != (pair{"a", "b", true}) {
		t.Fatalf("loadGPTCache = %+v, %v", pairs, err)
	}
	if _, err := loadGPTCache(strings.NewReader(`[{"origin":"a"}]`)); err == nil {
		t.Error("loadGPTCache accepted a row without similar")
	}
}

func TestCanonical(t *testing.T) {
	if canonical("Weather, TODAY？") != canonical("weather today") {
		t.Error("canonical should ignore case, punctuation and spacing")
	}
	if canonical("ＡＢＣ") != "abc" {
		t.Errorf("canonical(ＡＢＣ) = %q", canonical("ＡＢＣ"))
	}
	if canonical("12*7") == canonical("12*8") {
		t.Error("canonical must keep digits")
	}
}

func TestRunOnTinyData(t *testing.T) {
	dir := t.TempDir()
	gpt := `[{"origin":"How do I sort a list in Python?","similar":"how can I sort a list in python"},
	{"origin":"What is the capital of France?","similar":"Which city is the capital of France?"}]`
	lcqmc := "微信聊天记录怎么恢复\t怎么恢复微信聊天记录\t1\n什么牌子的空调最好\t什么牌子的空调扇最好\t0\n"
	if err := os.WriteFile(filepath.Join(dir, "gptcache_mock_data.json"), []byte(gpt), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lcqmc_dev.tsv"), []byte(lcqmc), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--data", dir, "--step", "0.1"}, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"--data " + dir, "## gptcache_mock_data.json (English), embedder local-512",
		"## lcqmc_dev.tsv (Chinese), embedder local-512", "### guards on", "### guards off",
		"| 0.80 |", "| 0.90 |", "Lowest threshold with false-hit rate",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if err := run(context.Background(), []string{"--data", filepath.Join(dir, "missing")}, &out); err == nil {
		t.Error("run with a missing data directory succeeded")
	}
}

func TestCommandLineQuotes(t *testing.T) {
	got := commandLine([]string{"--data", "/tmp/my data", "--embedder-url", "http://x/v1"})
	if !strings.HasSuffix(got, ` --data '/tmp/my data' --embedder-url http://x/v1`) {
		t.Errorf("commandLine = %q", got)
	}
}

// TestRunWithEmbedderURL evaluates an OpenAI-compatible endpoint served in
// process: the local embedder's vectors behind /v1/embeddings.
func TestRunWithEmbedderURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	local := embed.NewLocal(16)
	var calls atomic.Int32
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		calls.Add(1)
		var req struct {
			Input []string `json:"input"`
		}
		if err := json.Unmarshal(ctx.PostBody(), &req); err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadRequest)
			return
		}
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var resp struct {
			Data []item `json:"data"`
		}
		for i, text := range req.Input {
			v, _ := local.Embed(ctx, text)
			resp.Data = append(resp.Data, item{i, v})
		}
		body, _ := json.Marshal(resp)
		ctx.SetBody(body)
	}}
	go srv.Serve(ln)     //nolint:errcheck // ends with Shutdown
	defer srv.Shutdown() //nolint:errcheck // best effort in a test

	dir := t.TempDir()
	pairs := make([]string, 0, 40)
	for i := range 20 {
		pairs = append(pairs, fmt.Sprintf(`{"origin":"question number %d about topic %d","similar":"topic %d question number %d"}`, i, i*7, i*7, i))
	}
	if err := os.WriteFile(filepath.Join(dir, "gptcache_mock_data.json"), []byte("["+strings.Join(pairs, ",")+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lcqmc_dev.tsv"), []byte("你好吗\t你好吗？\t1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	args := []string{"--data", dir, "--embedder-url", "http://" + ln.Addr().String() + "/v1",
		"--embedder-model", "fake", "--embedder-dims", "16"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "embedder openai:fake") {
		t.Fatalf("output has no section for the endpoint:\n%s", out.String())
	}
	// 40 English and 2 Chinese texts, sent concurrently: batching needs far fewer calls.
	if n := calls.Load(); n == 0 || n > 20 {
		t.Errorf("the endpoint got %d calls for 42 texts, want batching", n)
	}
}
