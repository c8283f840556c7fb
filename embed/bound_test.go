package embed

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// randomWords is n bytes of words unlikely to repeat: each goes through
// the tokenizer.
func randomWords(n int, seed uint64) string {
	r := rand.New(rand.NewPCG(seed, 1))
	var b strings.Builder
	for b.Len() < n {
		for range 3 + r.IntN(8) {
			b.WriteByte(byte('a' + r.IntN(26)))
		}
		b.WriteByte(' ')
	}
	return b.String()
}

// A text over max_input_bytes embeds as its head and tail: what stands in
// the middle does not change the vector, and a text of megabytes costs
// what one at the bound does.
func TestLocalEmbedsBoundedInput(t *testing.T) {
	l := NewLocalBounded(256, 4096)
	head, tail := randomWords(3000, 1), randomWords(3000, 2)
	a, _ := l.Embed(context.Background(), head+randomWords(2_000_000, 3)+tail)
	b, _ := l.Embed(context.Background(), head+randomWords(10_000, 4)+tail)
	if !slices.Equal(a, b) {
		t.Fatal("texts that differ only past the bound's head and tail embed differently")
	}
	short := randomWords(3000, 5)
	c, _ := l.Embed(context.Background(), short)
	d, _ := NewLocal(256).Embed(context.Background(), short)
	if !slices.Equal(c, d) {
		t.Fatal("a text within the bound embeds differently")
	}
	if err := (&Config{MaxInputBytes: 100}).Validate(); err == nil || !strings.Contains(err.Error(), "max_input_bytes") {
		t.Fatalf("max_input_bytes 100: %v, want an error naming it", err)
	}
}

// One word of a megabyte (no spaces) is tokenized in pieces: byte-pair
// merging of the whole word would take seconds (its cost is quadratic).
func TestLocalEmbedsLongWordQuickly(t *testing.T) {
	l := NewLocalBounded(256, MaxInputBytes)
	o200k() // the vocabulary loads outside the timing
	start := time.Now()
	if _, err := l.Embed(context.Background(), strings.Repeat("a", MaxInputBytes)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("a 1 MiB word took %v to embed", took)
	}
}
