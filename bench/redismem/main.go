// Command redismem measures the Redis memory the cache takes per entry:
// it starts a redis-server (with the RediSearch module for the redisearch
// mode), writes N entries through the cache's RedisStore as frontdoor does
// (an exact key, and a vector for semantic search), and reads INFO memory
// before and after. The questions are the sentences of an evaluation set
// (English and Chinese), the answers a fixed length of text.
//
// It also counts the stalls: calls of the store that took over 20 ms while
// it wrote the entries and, with -drain, while it deleted them all again
// one by one (RediSearch 2.6 resizes an HNSW index by copying all of it,
// on the way up and on the way down).
//
//	go run ./bench/redismem [-entries 100000] [-dims 512] [-answer-bytes 1200]
//	    [-modes redisearch,local] [-initial-caps 0] [-drain] [-eval ../shared/eval/lcqmc_dev.tsv]
//
// Run it from the repository root; the module is $FRONTDOOR_REDISEARCH_MODULE
// or ../shared/redis-modules/redisearch-2.6.37.so.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"frontdoor/bench/internal/load"
	"frontdoor/cache"
)

func main() {
	entries := flag.Int("entries", 100000, "entries to write")
	dims := flag.Int("dims", 512, "vector dimensions (the local embedder's default)")
	answer := flag.Int("answer-bytes", 1200, "answer length in bytes (about 300 tokens)")
	modes := flag.String("modes", "redisearch,local", "vector_search modes: redisearch (Redis Stack) and/or local (plain Redis)")
	caps := flag.String("initial-caps", strconv.Itoa(cache.DefaultConfig().RedisIndex.InitialCap), "cache.redis_index.initial_cap values to compare (redisearch mode)")
	drain := flag.Bool("drain", false, "delete every entry again, one by one, and count the stalls")
	evalPath := flag.String("eval", "../shared/eval/lcqmc_dev.tsv", "sentence pairs (TSV) whose sentences are the questions")
	flag.Parse()
	questions, err := readQuestions(*evalPath)
	if err != nil {
		fail(err)
	}
	fmt.Printf("%d entries, %d dims, answers of %d bytes, questions from %s (%d sentences, reused with a counter)\n",
		*entries, *dims, *answer, filepath.Base(*evalPath), len(questions))
	fmt.Printf("| mode | initial_cap | used_memory before | after | per entry | per 100k entries | index (FT.INFO) | writes: took, stalls over 20 ms (sum, worst) | deletes: took, stalls |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, mode := range strings.Split(*modes, ",") {
		for _, c := range strings.Split(*caps, ",") {
			initialCap, err := strconv.Atoi(c)
			if err != nil {
				fail(fmt.Errorf("-initial-caps: %w", err))
			}
			if err := run(mode, *entries, *dims, *answer, initialCap, *drain, questions); err != nil {
				fail(fmt.Errorf("%s: %w", mode, err))
			}
			if mode == "local" {
				break // no index to size
			}
		}
	}
}

// stalls counts the calls that took over stallOver.
type stalls struct {
	mu         sync.Mutex
	n          int
	sum, worst time.Duration
}

const stallOver = 20 * time.Millisecond

func (s *stalls) add(d time.Duration) {
	if d <= stallOver {
		return
	}
	s.mu.Lock()
	s.n++
	s.sum += d
	s.worst = max(s.worst, d)
	s.mu.Unlock()
}

func (s *stalls) String() string {
	return fmt.Sprintf("%d (%v, worst %v)", s.n, s.sum.Round(time.Millisecond), s.worst.Round(time.Millisecond))
}

func run(mode string, n, dims, answerBytes, initialCap int, drain bool, questions []string) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "redismem")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var args []string
	if mode == "redisearch" {
		module, err := load.RediSearchModule()
		if err != nil {
			return err
		}
		args = append(args, "--loadmodule", module)
	}
	var procs load.Procs
	defer procs.Stop()
	srv, err := procs.StartRedis(ctx, dir, args...)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 16, ReadTimeout: time.Minute})
	defer rdb.Close()
	ix := cache.DefaultConfig().RedisIndex
	ix.InitialCap = initialCap
	st, err := cache.NewRedisStore(ctx, rdb, cache.RedisOptions{Prefix: "fd:c:", Dims: dims, Embedder: "local", VectorSearch: mode, Index: ix,
		WriteTimeout: time.Minute}) // a stall is measured, not cut short
	if err != nil {
		return err
	}
	defer st.Close()
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return err
	}
	content := strings.Repeat("frontdoor caches answers. ", answerBytes/26+1)[:answerBytes]
	var next atomic.Int64
	var writeStalls, deleteStalls stalls
	ids := make([]string, n)
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	start := time.Now()
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			vec := make([]float32, dims)
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				q := questions[i%len(questions)] + " #" + strconv.Itoa(i)
				var norm float64
				for j := range vec {
					vec[j] = float32(rng.NormFloat64())
					norm += float64(vec[j]) * float64(vec[j])
				}
				for j := range vec {
					vec[j] /= float32(math.Sqrt(norm))
				}
				id := cache.NewEntryID()
				e := &cache.Entry{ID: id, Namespace: "acme", Model: "qwen3-8b", Endpoint: "chat", Content: content, Finish: "stop",
					Usage: cache.Usage{PromptTokens: 40, CompletionTokens: 300, TotalTokens: 340}, Created: time.Now().UTC(),
					Query: q, Scope: "scope-" + strconv.Itoa(i%16), ExactKey: "k-" + id}
				t0 := time.Now()
				if err := st.Put(ctx, e, vec, 24*time.Hour); err != nil {
					errc <- err
					return
				}
				writeStalls.add(time.Since(t0))
				ids[i] = id
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
	}
	elapsed := time.Since(start)
	if mode == "local" {
		time.Sleep(2 * time.Second) // let the events stream settle
	}
	after, err := usedMemory(ctx, rdb)
	if err != nil {
		return err
	}
	index := "-"
	if mode == "redisearch" {
		if v, err := rdb.Do(ctx, "FT.INFO", st.IndexName()).Result(); err == nil {
			index = ftInfo(v)
		}
	}
	per := float64(after-before) / float64(n)
	capCol := strconv.Itoa(initialCap)
	if mode == "local" {
		capCol = "-"
	}
	deletes := "-"
	if drain {
		start := time.Now()
		for i := n - 1; i >= 0; i-- {
			t0 := time.Now()
			if err := st.Delete(ctx, ids[i]); err != nil {
				return fmt.Errorf("delete: %w", err)
			}
			deleteStalls.add(time.Since(t0))
		}
		deletes = fmt.Sprintf("%v, %v", time.Since(start).Round(time.Millisecond), &deleteStalls)
	}
	fmt.Printf("| %s | %s | %s | %s | %.0f B | %s | %s | %v, %v | %s |\n", mode, capCol, mib(before), mib(after), per, mib(int64(per*100000)), index,
		elapsed.Round(time.Millisecond), &writeStalls, deletes)
	return nil
}

func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	s, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO")
}

// ftInfo picks the index's own sizes out of FT.INFO.
func ftInfo(v any) string {
	var parts []string
	flat, ok := v.([]any)
	if !ok {
		if m, ok := v.(map[any]any); ok {
			for k, x := range m {
				flat = append(flat, k, x)
			}
		}
	}
	for i := 0; i+1 < len(flat); i += 2 {
		k := fmt.Sprint(flat[i])
		switch k {
		case "num_docs", "vector_index_sz_mb", "doc_table_size_mb", "inverted_sz_mb":
			parts = append(parts, k+" "+fmt.Sprint(flat[i+1]))
		}
	}
	return strings.Join(parts, ", ")
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func readQuestions(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("evaluation data: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for _, s := range strings.SplitN(sc.Text(), "\t", 3)[:min(2, len(strings.SplitN(sc.Text(), "\t", 3)))] {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no sentences", path)
	}
	return out, sc.Err()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "redismem:", err)
	os.Exit(1)
}
