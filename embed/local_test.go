package embed

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
)

func localEmbed(t testing.TB, l *Local, text string) []float32 {
	t.Helper()
	v, err := l.Embed(context.Background(), text)
	if err != nil {
		t.Fatalf("Embed(%q): %v", text, err)
	}
	return v
}

func TestLocalDeterministic(t *testing.T) {
	a, b := NewLocal(512), NewLocal(512)
	for _, text := range []string{"How do I reverse a list in Python?", "如何在Python中反转列表？", ""} {
		v1, v2, v3 := localEmbed(t, a, text), localEmbed(t, a, text), localEmbed(t, b, text)
		if !slices.Equal(v1, v2) || !slices.Equal(v1, v3) {
			t.Errorf("Embed(%q) differs between calls or instances", text)
		}
	}
}

func TestLocalNormalisedAndDims(t *testing.T) {
	texts := []string{
		"a", "Hello, world!", "What is the capital of France?", "今天天气怎么样", "東京の天気は？",
		"서울 날씨 어때요", "Ünïcödé façade", strings.Repeat("long prompt ", 500), "", "?!…", "   ",
	}
	for _, dims := range []int{8, 64, 512, 1024} {
		l := NewLocal(dims)
		if l.Dims() != dims {
			t.Fatalf("Dims() = %d, want %d", l.Dims(), dims)
		}
		for _, text := range texts {
			v := localEmbed(t, l, text)
			if len(v) != dims {
				t.Fatalf("dims %d: len(Embed(%q)) = %d", dims, text, len(v))
			}
			var sq float64
			for _, x := range v {
				if math.IsNaN(float64(x)) {
					t.Fatalf("dims %d: Embed(%q) has NaN", dims, text)
				}
				sq += float64(x) * float64(x)
			}
			if math.Abs(sq-1) > 1e-4 {
				t.Errorf("dims %d: |Embed(%q)|^2 = %v, want 1", dims, text, sq)
			}
		}
	}
	if got := NewLocal(2).Dims(); got != MinDims {
		t.Errorf("NewLocal(2).Dims() = %d, want %d", got, MinDims)
	}
	if got := NewLocal(256).Name(); got != "local-256" {
		t.Errorf("Name() = %q, want local-256", got)
	}
}

func TestLocalEmptyText(t *testing.T) {
	l := NewLocal(512)
	empty := localEmbed(t, l, "")
	if !slices.Equal(empty, localEmbed(t, l, "  ?! ")) {
		t.Error("punctuation-only text should embed like empty text")
	}
	if s := Cosine(empty, localEmbed(t, l, "hello world")); s > 0.3 {
		t.Errorf("empty text vs real text cosine = %v, want low", s)
	}
}

// TestLocalVariantsBeatUnrelated checks the lexical properties the local
// embedder promises: each variant of a base text is closer to it than any
// unrelated text is.
func TestLocalVariantsBeatUnrelated(t *testing.T) {
	l := NewLocal(512)
	groups := []struct {
		base      string
		variants  []string
		unrelated []string
	}{
		{
			base: "How do I reverse a list in Python?",
			variants: []string{
				"how do i reverse a list in python",     // case, punctuation
				"In Python, how do I reverse a list?",   // reordering
				"How can I reverse a list in Python?",   // rewording
				"How do I reverse a lsit in Pyhton?",    // typos
				"HOW DO I REVERSE A LIST IN PYTHON ???", // shouting
				"How do I reverse a list in Python 3?",  // small addition
				"ｈｏｗ ｄｏ ｉ ｒｅｖｅｒｓｅ ａ ｌｉｓｔ ｉｎ ｐｙｔｈｏｎ",     // full-width
			},
			unrelated: []string{
				"What is the capital of France?",
				"Write a poem about the sea.",
				"How do I bake sourdough bread at home?",
				"Explain the theory of relativity.",
			},
		},
		{
			base: "如何在Python中反转一个列表？",
			variants: []string{
				"如何在python中反转一个列表",
				"在Python中如何反转一个列表？",
				"怎么在Python中反转一个列表？",
				"Python中如何反转列表",
			},
			unrelated: []string{
				"法国的首都是哪里？",
				"今天天气怎么样？",
				"怎样在家里做面包",
				"写一首关于大海的诗",
			},
		},
		{
			base: "微信聊天记录怎么恢复",
			variants: []string{
				"微信聊天记录如何恢复？",
				"怎么恢复微信聊天记录",
				"微信的聊天记录怎么恢复呢",
			},
			unrelated: []string{
				"支付宝怎么转账到银行卡",
				"什么牌子的空调最好",
				"这首歌叫什么名字",
			},
		},
	}
	for _, g := range groups {
		base := localEmbed(t, l, g.base)
		var maxUnrelated float32 = -1
		for _, u := range g.unrelated {
			maxUnrelated = max(maxUnrelated, Cosine(base, localEmbed(t, l, u)))
		}
		for _, v := range g.variants {
			s := Cosine(base, localEmbed(t, l, v))
			if s <= maxUnrelated {
				t.Errorf("cos(%q, %q) = %.3f, not above the best unrelated %.3f", g.base, v, s, maxUnrelated)
			}
		}
		if maxUnrelated > 0.5 {
			t.Errorf("%q: an unrelated text scores %.3f, want < 0.5", g.base, maxUnrelated)
		}
	}
}

func TestLocalCaseAndPunctuationInvariant(t *testing.T) {
	l := NewLocal(512)
	pairs := [][2]string{
		{"What is the capital of France?", "what is the capital of france"},
		{"Hello,   world!!!", "hello world"},
		{"人和畜生的区别是什么？", "人和畜生的区别是什么!"},
		{"ＧＰＴ４是什么", "gpt4是什么"},
	}
	for _, p := range pairs {
		if s := Cosine(localEmbed(t, l, p[0]), localEmbed(t, l, p[1])); s < 0.9999 {
			t.Errorf("cos(%q, %q) = %v, want 1", p[0], p[1], s)
		}
	}
}

func TestLocalConcurrent(t *testing.T) {
	l := NewLocal(128)
	texts := []string{"alpha beta", "gamma delta", "你好世界", "epsilon zeta eta", "こんにちは世界"}
	want := make([][]float32, len(texts))
	for i, text := range texts {
		want[i] = localEmbed(t, l, text)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				k := (g + i) % len(texts)
				v, _ := l.Embed(context.Background(), texts[k])
				if !slices.Equal(v, want[k]) {
					t.Errorf("concurrent Embed(%q) differs", texts[k])
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestNormalizeText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Hello, World!", "hello world"},
		{"  don't   STOP  ", "dont stop"},
		{"微信app怎么用？", "微信 app 怎么用"},
		{"ＡＢＣ　１２３", "abc 123"},
		{"", ""},
		{"?!", ""},
	}
	for _, tc := range tests {
		if got := string(normalizeText(nil, tc.in)); got != tc.want {
			t.Errorf("normalizeText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Benchmark prompts of 200 characters each.
const (
	prompt200EN = "How do I configure the retry policy for failed HTTP requests in a Go service, " +
		"and which backoff strategy works best under heavy load when the upstream is flaky? Please, explain it with a code example."
	prompt200ZH = "我想在Go服务里为失败的HTTP请求配置重试策略，在上游不稳定而且负载很高的时候，哪一种退避策略效果最好？请结合代码详细解释一下原因。" +
		"另外，如果请求是幂等的，是否可以更激进地重试？超时应该如何设置才合理？连接池的大小和每个主机的最大连接数又该怎样配置？" +
		"熔断器应该在连续失败多少次之后打开，半开状态下又该放行多少请求来探测上游是否已经恢复正常？请给出具体的数字建议，并说明这些数字背后的理由和适用场景。"
)

// benchmarkLocal embeds text at each vector length the embedder is
// measured at (bench/semantic chose the default among them).
func benchmarkLocal(b *testing.B, text string) {
	for _, dims := range []int{256, 512, 1024} {
		b.Run(fmt.Sprintf("dims=%d", dims), func(b *testing.B) {
			l := NewLocal(dims)
			ctx := context.Background()
			l.Embed(ctx, text) // load the tokenizer and warm the word cache
			b.ReportAllocs()
			for b.Loop() {
				l.Embed(ctx, text)
			}
		})
	}
}

// BenchmarkLocalEmbed200 embeds a 200-character English prompt.
func BenchmarkLocalEmbed200(b *testing.B) {
	benchmarkLocal(b, prompt200EN)
}

// BenchmarkLocalEmbedChinese200 embeds a 200-character Chinese prompt.
func BenchmarkLocalEmbedChinese200(b *testing.B) {
	benchmarkLocal(b, prompt200ZH)
}

func TestBenchmarkPromptLengths(t *testing.T) {
	for _, p := range []string{prompt200EN, prompt200ZH} {
		if n := len([]rune(p)); n != 200 {
			t.Errorf("benchmark prompt has %d characters, want 200: %q", n, p)
		}
	}
}

// BenchmarkLocalEmbedColdWords embeds the English prompt with an empty word
// cache each time: the cost for text whose words were never seen.
func BenchmarkLocalEmbedColdWords(b *testing.B) {
	l := NewLocal(512)
	ctx := context.Background()
	l.Embed(ctx, prompt200EN)
	b.ReportAllocs()
	for b.Loop() {
		wordCache.Lock()
		clear(wordCache.m)
		wordCache.Unlock()
		l.Embed(ctx, prompt200EN)
	}
}

func TestLocalPoliteness(t *testing.T) {
	l := NewLocal(256)
	sim := func(a, b string) float32 {
		va, _ := l.Embed(context.Background(), a)
		vb, _ := l.Embed(context.Background(), b)
		return Cosine(va, vb)
	}
	for _, p := range [][2]string{
		{"Explain how TCP slow start works", "Please explain how TCP slow start works"},
		{"What is the capital of France?", "Hi! What is the capital of France, please?"},
		{"怎样才能提高英语口语水平", "请问怎样才能提高英语口语水平"},
		{"怎样才能提高英语口语水平", "你好，请问怎样才能提高英语口语水平？"},
	} {
		if s := sim(p[0], p[1]); s < 0.9999 {
			t.Errorf("%q / %q: similarity %.4f, want 1", p[0], p[1], s)
		}
	}
	// A greeting inside the question is part of it.
	if s := sim("How do I print hello world in Go?", "How do I print world in Go?"); s > 0.99 {
		t.Errorf("a greeting inside the text was dropped: similarity %.4f", s)
	}
	if s := sim("请假条怎么写", "假条怎么写"); s > 0.99 {
		t.Errorf("请 of 请假 was dropped: similarity %.4f", s)
	}
}
