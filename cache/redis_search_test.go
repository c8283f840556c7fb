package cache

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// --- pure parts: always run ---

func TestRedisSearchEscapeTag(t *testing.T) {
	for in, want := range map[string]string{
		"9f86d081884c7d65": "9f86d081884c7d65",
		"Ab_9":             "Ab_9",
		"a-b.c:d":          `a\-b\.c\:d`,
		"x y":              `x\ y`,
		"}{|)(@*":          `\}\{\|\)\(\@\*`,
		`back\slash`:       `back\\slash`,
		"":                 `\ `,
		"é字":               "é字",
	} {
		if got := escapeTag(in); got != want {
			t.Errorf("escapeTag(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedisSearchKNNQuery(t *testing.T) {
	if got, want := knnQuery("9f86d0", 3), "(@scope:{9f86d0})=>[KNN 3 @vec $B AS dist]"; got != want {
		t.Fatalf("knnQuery = %q, want %q", got, want)
	}
	if got, want := knnQuery("a}b", 1), `(@scope:{a\}b})=>[KNN 1 @vec $B AS dist]`; got != want {
		t.Fatalf("knnQuery = %q, want %q", got, want)
	}
	vec := []float32{1, -2, 0.5}
	args, err := redis.FTSearchQuery(knnQuery("s", 4), knnOptions(vec, 4))
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(args...)
	want := fmt.Sprint(knnQuery("s", 4), "RETURN", 2, "entry", "dist", "SORTBY", "dist", "ASC", "LIMIT", 0, 4,
		"PARAMS", 2, "B", vecBytes(vec), "DIALECT", 2)
	if got != want {
		t.Fatalf("FT.SEARCH args\n got %s\nwant %s", got, want)
	}
}

func TestRedisSearchParseKNNDocs(t *testing.T) {
	docs := []redis.Document{
		{ID: "fd:v:aa", Fields: map[string]string{"entry": "P1", "dist": "0.02"}},
		{ID: "fd:v:bb", Fields: map[string]string{"entry": "P2", "dist": "0.5"}},
		{ID: "fd:v:gone", Fields: map[string]string{}, Error: redis.Nil}, // expired mid-query
		{ID: "fd:v:nodist", Fields: map[string]string{"entry": "P3"}},
		{ID: "fd:v:baddist", Fields: map[string]string{"entry": "P4", "dist": "x"}},
	}
	got := parseKNNDocs(docs, "fd:v:")
	if len(got) != 2 {
		t.Fatalf("parsed %d hits, want 2: %+v", len(got), got)
	}
	if got[0].id != "aa" || got[0].payload != "P1" || got[0].similarity < 0.979 || got[0].similarity > 0.981 {
		t.Fatalf("hit 0 = %+v", got[0])
	}
	if got[1].id != "bb" || got[1].similarity != 0.5 {
		t.Fatalf("hit 1 = %+v", got[1])
	}
}

// --- the wire: a fake server records what the store sends ---

type fakeRedis struct {
	ln    net.Listener
	reply func(args []string) string // raw RESP; "" for the default
	mu    sync.Mutex
	cmds  [][]string
	wg    sync.WaitGroup
}

func startFakeRedis(t *testing.T, reply func(args []string) string) *fakeRedis {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRedis{ln: ln, reply: reply}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() { defer f.wg.Done(); f.serve(c) }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); f.wg.Wait() })
	return f
}

func (f *fakeRedis) serve(c net.Conn) {
	defer c.Close()
	rd := bufio.NewReader(c)
	for {
		args, err := readRESPCommand(rd)
		if err != nil {
			return
		}
		f.mu.Lock()
		f.cmds = append(f.cmds, args)
		f.mu.Unlock()
		out := f.reply(args)
		if out == "" {
			switch strings.ToUpper(args[0]) {
			case "HELLO":
				out = "-ERR unknown command 'HELLO'\r\n" // speak RESP2
			case "XREAD":
				time.Sleep(30 * time.Millisecond)
				out = "*-1\r\n"
			case "XREVRANGE":
				out = "*0\r\n"
			case "SCAN":
				out = "*2\r\n$1\r\n0\r\n*0\r\n"
			default:
				out = "+OK\r\n"
			}
		}
		if _, err := io.WriteString(c, out); err != nil {
			return
		}
	}
}

func (f *fakeRedis) find(name string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.cmds {
		if strings.EqualFold(c[0], name) {
			return c
		}
	}
	return nil
}

func readRESPCommand(rd *bufio.Reader) ([]string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, errors.New("not an array")
	}
	n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	args := make([]string, n)
	for i := range args {
		if line, err = rd.ReadString('\n'); err != nil {
			return nil, err
		}
		l, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		b := make([]byte, l+2)
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:l])
	}
	return args, nil
}

func bulk(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

// TestRedisSearchWire checks the FT.CREATE and FT.SEARCH commands byte for
// byte and the parsing of a RESP2 FT.SEARCH reply into matches.
func TestRedisSearchWire(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 20))
	e1, e2 := rdsEntry("t", "s1", "first"), rdsEntry("t", "s1", "second")
	p1, _ := encodePayload(e1)
	p2, _ := encodePayload(e2)
	f := startFakeRedis(t, func(args []string) string {
		switch strings.ToUpper(args[0]) {
		case "FT._LIST":
			return "*0\r\n"
		case "FT.SEARCH":
			return "*5\r\n:2\r\n" +
				bulk("fd:v:"+e1.ID) + "*4\r\n" + bulk("entry") + bulk(string(p1)) + bulk("dist") + bulk("0.0400000214577") +
				bulk("fd:v:"+e2.ID) + "*4\r\n" + bulk("dist") + bulk("0.25") + bulk("entry") + bulk(string(p2))
		}
		return ""
	})
	c := newTestRedisClient(t, f.ln.Addr().String(), time.Second)
	s := newTestRedisStore(t, c, RedisOptions{VectorSearch: "auto"})
	if s.Mode() != "redisearch" {
		t.Fatalf("mode %q", s.Mode())
	}
	want := []string{"FT.CREATE", "fd:idx", "ON", "HASH", "PREFIX", "1", "fd:v:", "SCHEMA",
		"scope", "TAG", "CASESENSITIVE", "vec", "VECTOR", "HNSW", "6", "TYPE", "FLOAT32", "DIM", strconv.Itoa(rdsDims), "DISTANCE_METRIC", "COSINE"}
	if got := f.find("FT.CREATE"); !slices.Equal(got, want) {
		t.Fatalf("FT.CREATE\n got %q\nwant %q", got, want)
	}
	q := rdsUnit(rng)
	ms, err := s.Search(context.Background(), "s1", q, 2)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"FT.SEARCH", "fd:idx", "(@scope:{s1})=>[KNN 2 @vec $B AS dist]", "RETURN", "2", "entry", "dist",
		"SORTBY", "dist", "ASC", "LIMIT", "0", "2", "PARAMS", "2", "B", string(vecBytes(q)), "DIALECT", "2"}
	if got := f.find("FT.SEARCH"); !slices.Equal(got, want) {
		t.Fatalf("FT.SEARCH\n got %q\nwant %q", got, want)
	}
	if len(ms) != 2 || ms[0].Entry.ID != e1.ID || ms[1].Entry.ID != e2.ID {
		t.Fatalf("matches %+v", ms)
	}
	rdsSameEntry(t, ms[0].Entry, e1)
	if ms[0].Similarity < 0.959 || ms[0].Similarity > 0.961 || ms[1].Similarity != 0.75 {
		t.Fatalf("similarities %v %v", ms[0].Similarity, ms[1].Similarity)
	}
}

// TestRedisSearchCreateRejected: a search module that rejects the VECTOR
// schema (RediSearch < 2.4) means local for auto and an error for redisearch;
// an index that exists already is fine.
func TestRedisSearchCreateRejected(t *testing.T) {
	for _, tc := range []struct {
		name, create, mode string
		wantMode           string // "" = NewRedisStore fails
	}{
		{"old module, auto", "-Could not parse field spec\r\n", "auto", "local"},
		{"old module, redisearch", "-Could not parse field spec\r\n", "redisearch", ""},
		{"index exists", "-Index already exists\r\n", "redisearch", "redisearch"},
		{"index exists, auto", "-Index already exists\r\n", "auto", "redisearch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFakeRedis(t, func(args []string) string {
				switch strings.ToUpper(args[0]) {
				case "FT._LIST":
					return "*1\r\n" + bulk("fd:idx")
				case "FT.CREATE":
					return tc.create
				case "FT.INFO":
					return "-ERR not in this fake\r\n"
				}
				return ""
			})
			c := newTestRedisClient(t, f.ln.Addr().String(), time.Second)
			s, err := NewRedisStore(context.Background(), c, RedisOptions{Dims: rdsDims, VectorSearch: tc.mode, Timeout: time.Second, SyncInterval: 50 * time.Millisecond})
			if tc.wantMode == "" {
				if !errors.Is(err, errNoVectorSearch) {
					t.Fatalf("err %v, want errNoVectorSearch", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Mode() != tc.wantMode {
				t.Fatalf("mode %q, want %q", s.Mode(), tc.wantMode)
			}
		})
	}
}

// --- a real RediSearch: only where one is given ---

func searchServer(t *testing.T) redis.UniversalClient {
	addr := os.Getenv("FRONTDOOR_TEST_REDIS_SEARCH_ADDR")
	if addr == "" {
		t.Skip("FRONTDOOR_TEST_REDIS_SEARCH_ADDR not set: no Redis with the search module here (Redis Stack / Redis 8); the RediSearch KNN path is untested in this run")
	}
	return newTestRedisClient(t, addr, 500*time.Millisecond)
}

// newSearchStore opens a redisearch store under a random prefix and drops
// its index and keys when the test ends.
func newSearchStore(t *testing.T, c redis.UniversalClient, prefix string) *RedisStore {
	s := newTestRedisStore(t, c, RedisOptions{Prefix: prefix, VectorSearch: "redisearch", Timeout: 500 * time.Millisecond})
	t.Cleanup(func() {
		ctx := context.Background()
		_ = c.FTDropIndexWithArgs(ctx, prefix+"idx", &redis.FTDropIndexOptions{DeleteDocs: true}).Err()
		iter := c.Scan(ctx, 0, prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return s
}

func randomPrefix() string { return fmt.Sprintf("fdtest%x:", rand.Uint64()) }

func TestRedisSearchIndexIdempotent(t *testing.T) {
	c := searchServer(t)
	prefix := randomPrefix()
	s := newSearchStore(t, c, prefix)
	if s.Mode() != "redisearch" {
		t.Fatalf("mode %q", s.Mode())
	}
	again := newTestRedisStore(t, c, RedisOptions{Prefix: prefix, VectorSearch: "auto", Timeout: 500 * time.Millisecond})
	if again.Mode() != "redisearch" {
		t.Fatalf("second store: mode %q", again.Mode())
	}
	_, err := NewRedisStore(context.Background(), c, RedisOptions{Prefix: prefix, Dims: rdsDims * 2, VectorSearch: "redisearch", Timeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "DIM") {
		t.Fatalf("other dims on the same index: %v, want a DIM error", err)
	}
}

func TestRedisSearchKNN(t *testing.T) {
	c := searchServer(t)
	s := newSearchStore(t, c, randomPrefix())
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(21, 21))
	q := rdsUnit(rng)
	best, other := rdsEntry("t", "scope-A.1", "best"), rdsEntry("t", "scope-A.1", "other")
	foreign := rdsEntry("t", "scope-B", "foreign") // nearest of all, other scope
	for _, p := range []struct {
		e *Entry
		v []float32
	}{{best, rdsNear(rng, q)}, {other, rdsUnit(rng)}, {foreign, q}} {
		if err := s.Put(ctx, p.e, p.v, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	var ms []Match
	rdsEventually(t, 3*time.Second, "both entries of the scope are indexed", func() bool {
		var err error
		ms, err = s.Search(ctx, "scope-A.1", q, 5)
		return err == nil && len(ms) == 2
	})
	if ms[0].Entry.ID != best.ID || ms[1].Entry.ID != other.ID || ms[0].Similarity < 0.95 {
		t.Fatalf("Search = %+v", ms)
	}
	rdsSameEntry(t, ms[0].Entry, best)
	if ms, err := s.Search(ctx, "scope-B", q, 5); err != nil || len(ms) != 1 || ms[0].Entry.ID != foreign.ID {
		t.Fatalf("scope-B: %+v, %v", ms, err)
	}
	if ms, err := s.Search(ctx, "scope-C", q, 5); err != nil || len(ms) != 0 {
		t.Fatalf("scope-C: %+v, %v", ms, err)
	}
	if err := s.Delete(ctx, best.ID); err != nil {
		t.Fatal(err)
	}
	if ms, _ := s.Search(ctx, "scope-A.1", q, 5); len(ms) != 1 || ms[0].Entry.ID != other.ID {
		t.Fatalf("after Delete: %+v", ms)
	}
	if st, err := s.Stats(ctx); err != nil || st.VectorEntries != 2 || st.VectorSearchBy != "redisearch" {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
}

func TestRedisSearchTTL(t *testing.T) {
	c := searchServer(t)
	s := newSearchStore(t, c, randomPrefix())
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(22, 22))
	e, v := rdsEntry("t", "s", "short"), rdsUnit(rng)
	if err := s.Put(ctx, e, v, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	rdsEventually(t, 2*time.Second, "indexed", func() bool { return rdsHasHit(s, "s", v, e.ID) })
	rdsEventually(t, 3*time.Second, "expired from the index", func() bool {
		ms, err := s.Search(ctx, "s", v, 3)
		return err == nil && len(ms) == 0
	})
}
