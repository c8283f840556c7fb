package cache

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/valyala/fastjson"
)

// embeddingEntry is an embeddings entry holding a random vector of dims.
func embeddingEntry(rng *rand.Rand, ns string, dims int) *Entry {
	b := make([]byte, 4*dims)
	for i := range dims {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(rng.NormFloat64())))
	}
	id := NewEntryID()
	return &Entry{ID: id, Namespace: ns, Model: "bge-m3", Endpoint: EndpointEmbeddings, Usage: Usage{PromptTokens: 4, TotalTokens: 4},
		Created: time.Unix(1700000000, 0).UTC(), ExactKey: "k-" + id, Embedding: b, EmbeddingWide: dims%2 == 0}
}

// Embeddings entries come back whole from GetMany, in the order of the
// keys with nil for a miss, from memory and from Redis (where a 1,024-
// dimension vector's payload is past the compression threshold), through
// the Backend; in memory their vector counts against the byte budget.
func TestEmbeddingEntries(t *testing.T) {
	ctx := context.Background()
	stores := map[string]func(t *testing.T) Store{
		"memory": func(t *testing.T) Store { return newMemStore(t, 1<<20, 8) },
		"redis": func(t *testing.T) Store {
			_, c := startTestRedis(t)
			return newTestRedisStore(t, c, RedisOptions{})
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			rng := rand.New(rand.NewPCG(3, 4))
			es := []*Entry{embeddingEntry(rng, "acme", 1024), embeddingEntry(rng, "acme", 16), embeddingEntry(rng, "globex", 3)}
			for _, e := range es {
				if err := st.Put(ctx, e, nil, time.Minute); err != nil {
					t.Fatalf("Put: %v", err)
				}
			}
			b := NewBackend(st, DefaultConfig().Reads, DefaultConfig().Writes, nil)
			t.Cleanup(func() { _ = b.Close(ctx) })
			got, err := b.GetMany(ctx, []string{es[2].ExactKey, "missing", es[0].ExactKey, es[1].ExactKey})
			if err != nil || len(got) != 4 || got[1] != nil {
				t.Fatalf("GetMany: %v, %d entries, the missing one %v", err, len(got), got)
			}
			for i, want := range []*Entry{es[2], nil, es[0], es[1]} {
				if want != nil {
					rdsSameEntry(t, got[i], want)
				}
			}
		})
	}
	m := newMemStore(t, 1<<20, 8)
	e := embeddingEntry(rand.New(rand.NewPCG(1, 1)), "acme", 1024)
	if err := m.Put(ctx, e, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if st, _ := m.Stats(ctx); st.Bytes < 4096 {
		t.Fatalf("a 1,024-dimension vector is charged %d bytes, want at least its 4,096", st.Bytes)
	}
	small := newMemStore(t, 3000, 8)
	if err := small.Put(ctx, e, nil, time.Minute); err == nil {
		t.Fatal("a 4 KiB vector fit a 3,000-byte budget")
	}
}

// An input's key changes with what changes its vector, and only with it.
func TestEmbeddingKeys(t *testing.T) {
	key := func(ns, model, body string, opt KeyOptions) []string {
		v := fastjson.MustParse(body)
		in := v.Get("input")
		inputs := []*fastjson.Value{in}
		if in.Type() == fastjson.TypeArray && in.GetArray()[0].Type() != fastjson.TypeNumber {
			inputs = in.GetArray()
		}
		return EmbeddingKeys(ns, model, v, inputs, opt)
	}
	base := key("acme", "m", `{"model":"alias","input":["a","b"],"dimensions":8}`, KeyOptions{})
	if len(base) != 2 || base[0] == base[1] {
		t.Fatalf("two inputs, keys %q", base)
	}
	same := []string{
		`{"input":["a","b"],"dimensions":8,"model":"other alias"}`,
		`{"input":["a","b"],"dimensions":8,"encoding_format":"base64"}`,
		`{"input":["a","b"],"dimensions":8,"user":"u1"}`,
		`{"input":["a","b"],"dimensions":8.0,"stream":false}`,
	}
	for _, b := range same {
		if k := key("acme", "m", b, KeyOptions{}); k[0] != base[0] || k[1] != base[1] {
			t.Errorf("%s: keys differ", b)
		}
	}
	if k := key("acme", "m", `{"input":"a","dimensions":8}`, KeyOptions{}); k[0] != base[0] {
		t.Error(`"a" alone and in a batch: keys differ`)
	}
	differ := map[string][]string{
		"namespace":            key("globex", "m", `{"input":["a"],"dimensions":8}`, KeyOptions{}),
		"model":                key("acme", "m2", `{"input":["a"],"dimensions":8}`, KeyOptions{}),
		"dimensions":           key("acme", "m", `{"input":["a"],"dimensions":16}`, KeyOptions{}),
		"an engine's field":    key("acme", "m", `{"input":["a"],"dimensions":8,"truncate_prompt_tokens":4}`, KeyOptions{}),
		"user, key_by_user":    key("acme", "m", `{"input":["a"],"dimensions":8,"user":"u1"}`, KeyOptions{ByUser: true}),
		"a token array for it": key("acme", "m", `{"input":[[97]],"dimensions":8}`, KeyOptions{}),
	}
	for what, k := range differ {
		if k[0] == base[0] {
			t.Errorf("%s: same key", what)
		}
	}
	if k := key("acme", "m", `{"input":["12"]}`, KeyOptions{}); k[0] == key("acme", "m", `{"input":[12]}`, KeyOptions{})[0] {
		t.Error(`"12" and [12]: same key`)
	}
	chat := ExactKey("acme", "m", EndpointEmbeddings, fastjson.MustParse(`{"input":"a","dimensions":8}`), KeyOptions{})
	if chat == base[0] {
		t.Error("an embeddings key equals a request key")
	}
}
