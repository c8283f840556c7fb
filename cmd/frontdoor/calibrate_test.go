package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
)

// pairsTSV is a tiny labelled set: paraphrases that differ in case,
// punctuation or politeness, and different questions that share most words.
const pairsTSV = "How do I sort a list in Python?\thow do i sort a list in python\t1\n" +
	"What is the capital of France?\tPlease, what is the capital of France\t1\n" +
	"Is a dog bigger than a cat?\tIs a cat bigger than a dog?\t0\n" +
	"How long does it take to run 10 km?\tHow long does it take to run 10 miles?\t0\n" +
	"微信聊天记录怎么恢复？\t请问微信聊天记录怎么恢复\t1\n" +
	"张三比李四高吗\t李四比张三高吗\t0\n"

func TestCalibratePrintsTheThresholdTable(t *testing.T) {
	dir := t.TempDir()
	pairs := filepath.Join(dir, "pairs.tsv")
	if err := os.WriteFile(pairs, []byte(pairsTSV), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"calibrate", "--pairs", pairs, "--from", "0.9", "--to", "0.95"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	text := out.String()
	for _, want := range []string{
		"pairs.tsv: 6 pairs (3 paraphrases, 3 different meaning), embedder local-512, guards numbers,negation,entity,order",
		"equal a stored question",                                   // "how do i sort a list in python" differs only in case and punctuation
		"| 0.90 | 100.0% (2/2) | 0.0% (0/5) | 0.0% (0/3) | 0 | 2 |", // the role swaps are vetoed
		"| 0.95 |",
		"Lowest threshold with false-hit rate ≤ 1.0%",
		"threshold: ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	// Bad invocations.
	for _, args := range [][]string{{"calibrate"}, {"calibrate", "--pairs", filepath.Join(dir, "missing.tsv")},
		{"calibrate", "--pairs", pairs, "--max-false", "2"}, {"calibrate", "--pairs", pairs, "--half", "third"}} {
		if code := run(args, &out, &errOut); code == 0 {
			t.Errorf("%v: exit 0", args)
		}
	}
}

// TestCalibrateWithARemoteEmbedder calibrates the embedder a config file
// names: gpusim's /v1/embeddings.
func TestCalibrateWithARemoteEmbedder(t *testing.T) {
	s := testenv.GPUSim(t, func(c *gpusim.Config) { c.EmbeddingDims = 128 })
	dir := t.TempDir()
	pairs := filepath.Join(dir, "pairs.tsv")
	config := filepath.Join(dir, "frontdoor.yaml")
	yaml := "nodes:\n  - name: a\n    url: " + s.URL() + "\n    kind: vllm\n    models: [qwen3-8b]\n" +
		"cache:\n  embedder:\n    kind: openai\n    url: " + s.URL() + "/v1\n    model: bge-m3\n    dims: 128\n"
	for f, body := range map[string]string{pairs: pairsTSV, config: yaml} {
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"calibrate", "--pairs", pairs, "--config", config, "--half", "even"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "pairs.tsv (even half): 3 pairs (2 paraphrases, 1 different meaning), embedder openai:bge-m3") {
		t.Errorf("output:\n%s", out.String())
	}
	n := 0
	for _, r := range s.Requests() {
		if r.Path == "/v1/embeddings" {
			n++
		}
	}
	if n == 0 {
		t.Error("the remote embedder was never called")
	}
}
