package main

import (
	"bytes"
	"context"
	"encoding/json"
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
	paws := "张三打了李四\t李四打了张三\t0\n我明天去北京\t明天我去北京\t1\n他喜欢猫\t他喜欢猫。\t1\n"
	mrpc := "Is a dog bigger than a cat?\tIs a cat bigger than a dog?\t0\nHow do I sort a list?\thow can I sort a list\t1\n"
	for name, text := range map[string]string{"pawsx_zh_valid.tsv": paws, "mrpc_val.tsv": mrpc} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--data", dir, "--step", "0.1", "--half", "even", "--show-vetoes", "3"}, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"--data " + dir, "## gptcache_mock_data.json (English), embedder local-512",
		"## lcqmc_dev.tsv (Chinese), embedder local-512", "### guards on", "### guards off",
		"| 0.80 |", "| 0.90 |", "Lowest threshold with false-hit rate",
		"## pawsx_zh_valid.tsv (even half) (Chinese)", "## mrpc_val.tsv (even half) (English)",
		"## Summary at threshold 0.92", "Vetoes at 0.92 by guard",
		"order 1 (0);", // the role swap, the only pair of mrpc's even half
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"--data", dir, "--sets", "mrpc,lcqmc", "--long", "0,3"}, &out); err != nil {
		t.Fatal(err)
	}
	text = out.String()
	for _, want := range []string{
		"## Long prompts from mrpc_val.tsv, embedder local-512", "## Long prompts from lcqmc_dev.tsv, embedder local-512",
		// With no shared sentence the pairs are the set's own first
		// sentences, different ones: none reaches the threshold.
		"| 0 |", "| 0.0% (0/2000) | 0.0% (0/2000) |", "| 3 |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if err := run(context.Background(), []string{"--data", dir, "--long", "x"}, &out); err == nil {
		t.Error("--long x succeeded")
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
		"--embedder-model", "fake", "--embedder-dims", "16", "--sets", "gptcache,lcqmc"}
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
