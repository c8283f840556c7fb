package admission

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tiktoken-go/tokenizer"
)

func waitTokenizer(t testing.TB) tokenizer.Codec {
	t.Helper()
	WarmTokenizer()
	select {
	case <-codecReady:
	case <-time.After(30 * time.Second):
		t.Fatal("o200k_base did not load within 30s")
	}
	c := codec.Load()
	if c == nil {
		t.Fatal("o200k_base unavailable")
	}
	return *c
}

var tokenSamples = map[string]string{
	"prose": strings.Repeat("Admission decides which cache misses may use the scarce GPUs. Cache hits cost no GPU time, "+
		"so the token and global budgets never throttle them; only the tenant's request rate does. ", 20),
	"code": strings.Repeat("func (a *Admitter) Enter(ctx context.Context, tenant string) (*Pass, *Rejection) {\n"+
		"\tts := a.tenant(tenant)\n\tts.inflight.Add(1)\n\tif !ts.enterLimited {\n\t\treturn &Pass{a: a, ts: ts}, nil\n\t}\n}\n", 15),
	"json":    strings.Repeat(`{"role":"user","content":"What is the capital of France? Answer briefly.","id":12345,"tags":["a","b"]},`, 20),
	"chinese": strings.Repeat("缓存命中不消耗GPU时间，因此令牌预算从不限制它们；只有租户的请求速率会限制。GPU资源稀缺，准入控制决定哪些缓存未命中可以使用它们。", 20),
	"russian": strings.Repeat("Попадания в кэш не расходуют время GPU, поэтому бюджеты токенов их никогда не ограничивают. ", 20),
}

func TestCountTokens(t *testing.T) {
	c := waitTokenizer(t)
	if CountTokens("") != 0 {
		t.Fatal("empty text has tokens")
	}
	short := "What is the capital of France? Answer in one word, please."
	want, _ := c.Count(short)
	if got := CountTokens(short); got != want {
		t.Fatalf("CountTokens(short) = %d, want the exact %d", got, want)
	}
	for name, text := range tokenSamples {
		if len(text) <= ExactTokensMaxBytes {
			t.Fatalf("sample %s is too short to be estimated", name)
		}
		exact, _ := c.Count(text)
		got := CountTokens(text)
		t.Logf("%-8s %5d bytes: exact %4d, estimate %4d (%+.0f%%)", name, len(text), exact, got, 100*float64(got-exact)/float64(exact))
		if !within(float64(got), float64(exact), 0.20) {
			t.Errorf("%s: estimate %d, exact %d: off by more than 20%%", name, got, exact)
		}
	}
}

func BenchmarkCountTokens(b *testing.B) {
	waitTokenizer(b)
	for _, n := range []int{128, ExactTokensMaxBytes, 8 << 10} {
		text := strings.Repeat(tokenSamples["prose"], 1+n/len(tokenSamples["prose"]))[:n]
		b.Run(strconv.Itoa(n)+"B", func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				CountTokens(text)
			}
		})
	}
}
