// Command semantic-scale measures the in-process semantic index
// (cache.VectorIndex) as one scope grows: lookup p50 and p99, recall@1
// against exact search, memory per entry and insert cost, at each size.
//
// The stored texts are real sentences: those of ../shared/eval (about 25k
// distinct ones, English and Chinese), and past that, pairs of them joined,
// so that a million entries have the vocabulary and the clustering of real
// prompts. They are embedded by the local embedder, as the default config
// does. Two query sets:
//
//   - near: a stored text with a small edit (a polite prefix, a dropped
//     last word, other case): what a semantic cache serves hits for;
//   - paraphrase: the eval sets' second sentences, most of which are not
//     stored: the best match is somewhere in the scope, or nowhere close.
//
// Recall@1 counts a search whose top result is as similar to the query (by
// exact float32 cosine) as the exact best of the whole scope, found by a
// brute-force pass over every stored vector. Each size is searched with
// each -probes value on the same index, timed by the wall clock and by the
// searching thread's CPU time, and with SearchMin at -min-sim.
//
//	go run ./bench/semantic-scale [-sizes 10000,100000,1000000] [-queries 500] [-probes 16,32,64]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/viterin/vek/vek32"

	"frontdoor/bench/internal/load"
	"frontdoor/cache"
	"frontdoor/embed"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "semantic-scale:", err)
		os.Exit(1)
	}
}

type options struct {
	data    string
	sizes   []int
	queries int
	dims    int
	cfg     cache.IndexConfig
	probes  []int
	minSim  float64
	exact   bool
}

func run() error {
	o := options{cfg: cache.DefaultIndexConfig()}
	sizes := flag.String("sizes", "10000,100000,1000000", "scope sizes to measure, comma-separated")
	flag.StringVar(&o.data, "data", "../shared/eval", "directory holding the evaluation sets")
	flag.IntVar(&o.queries, "queries", 500, "queries of each kind")
	flag.IntVar(&o.dims, "dims", 512, "dimensions of the local embedder")
	flag.IntVar(&o.cfg.ListSize, "list-size", o.cfg.ListSize, "size past which a list splits")
	flag.IntVar(&o.cfg.Rerank, "rerank", o.cfg.Rerank, "candidates re-ranked by cosine")
	probeList := flag.String("probes", strconv.Itoa(o.cfg.Probes), "lists scanned by a search, comma-separated: each is measured on the same index")
	flag.Float64Var(&o.minSim, "min-sim", 0.92, "also time SearchMin with this threshold (0: don't); its recall counts queries whose exact best reaches it")
	flag.BoolVar(&o.exact, "exact", false, "also time the exact scan (float32 vectors, no graph) at each size")
	profile := flag.String("cpuprofile", "", "write a CPU profile here")
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	for _, s := range strings.Split(*probeList, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || p <= 0 {
			return fmt.Errorf("-probes: bad value %q", s)
		}
		o.probes = append(o.probes, p)
	}
	o.cfg.Probes = o.probes[0]
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("-sizes: bad size %q", s)
		}
		o.sizes = append(o.sizes, n)
	}
	if err := o.cfg.Validate(); err != nil {
		return err
	}
	sentences, paraphrases, err := loadSentences(o.data)
	if err != nil {
		return err
	}
	emb := embed.NewLocal(o.dims)
	fmt.Printf("command: go run ./bench/semantic-scale %s\n", strings.Join(os.Args[1:], " "))
	fmt.Printf("data: %d distinct sentences from %s; local embedder, %d dims; index list_size=%d rerank=%d exact_max=%d; GOMAXPROCS=%d\n\n",
		len(sentences), o.data, o.dims, o.cfg.ListSize, o.cfg.Rerank, o.cfg.ExactMax, runtime.GOMAXPROCS(0))
	fmt.Printf("| entries | insert CPU µs/entry | index bytes/entry | probes | queries | p50 µs | p99 µs | CPU p50 µs | CPU p99 µs | recall@1, close match (queries) | recall@1, no close match | recall@1, all | SearchMin(%.2f) CPU p50 µs | CPU p99 µs | recall, best ≥ %.2f (queries) | exact scan p50 µs |\n", o.minSim, o.minSim)
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, n := range o.sizes {
		if err := measure(o, emb, sentences, paraphrases, n); err != nil {
			return err
		}
	}
	fmt.Printf("\n(p50, p99: wall clock; CPU: the searching thread's CPU time, less inflated by the shared VM's other load; recall@1: the top result is as similar to the query, by exact float32 cosine, as the exact best of the scope; a close match: that best is at least %.2f, where a semantic cache can hit; bytes/entry: Go heap in use after GC, over entries, and in brackets the growth of the process's RSS (VmRSS) over entries, both after a GC that returns free memory to the OS)\n", closeMatch)
	return nil
}

// text is stored text i: a sentence, or past them a pair of sentences.
func text(sentences []string, i int) string {
	if i < len(sentences) {
		return sentences[i]
	}
	r := rand.New(rand.NewPCG(uint64(i), 7))
	a, b := sentences[r.IntN(len(sentences))], sentences[r.IntN(len(sentences))]
	return a + " " + b
}

// nearEdit makes a small edit to t: what a user retyping it might send.
func nearEdit(r *rand.Rand, t string) string {
	switch r.IntN(3) {
	case 0:
		return "Please, " + t
	case 1:
		if i := strings.LastIndexByte(strings.TrimSpace(t), ' '); i > 0 {
			return t[:i]
		}
		return t + "?"
	default:
		return strings.ToUpper(t[:1]) + strings.ToLower(t[1:]) + "!"
	}
}

type query struct {
	kind string
	vec  []float32
	best float32 // exact best cosine over the scope
}

func measure(o options, emb *embed.Local, sentences, paraphrases []string, n int) error {
	ctx := context.Background()
	vecOf := func(t string) []float32 {
		v, _ := emb.Embed(ctx, t)
		return v
	}
	// Queries first, so the brute-force pass scores them all at once.
	r := rand.New(rand.NewPCG(uint64(n), 11))
	var qs []query
	for range o.queries {
		qs = append(qs, query{kind: "near", vec: vecOf(nearEdit(r, text(sentences, r.IntN(n))))})
	}
	for range o.queries {
		qs = append(qs, query{kind: "paraphrase", vec: vecOf(paraphrases[r.IntN(len(paraphrases))])})
	}
	for i := range qs {
		qs[i].best = -2
	}

	runtime.GC()
	debug.FreeOSMemory()
	rssBefore := rss()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	x := cache.NewVectorIndexWith(o.dims, o.cfg)
	var exact *cache.VectorIndex
	if o.exact {
		cfg := o.cfg
		cfg.ExactMax = n + 1
		exact = cache.NewVectorIndexWith(o.dims, cfg)
	}
	// Embed in parallel, insert in order; the brute-force pass rides along.
	workers := runtime.GOMAXPROCS(0)
	const batch = 1024
	var insert time.Duration
	var mu sync.Mutex
	for start := 0; start < n; start += batch {
		end := min(n, start+batch)
		vecs := make([][]float32, end-start)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				local := make([]float32, len(qs))
				for i := range local {
					local[i] = -2
				}
				for i := start + w; i < end; i += workers {
					v := vecOf(text(sentences, i))
					vecs[i-start] = v
					for j := range qs {
						local[j] = max(local[j], vek32.Dot(qs[j].vec, v))
					}
				}
				mu.Lock()
				for j := range qs {
					qs[j].best = max(qs[j].best, local[j])
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		c0 := cpuTime()
		for i, v := range vecs {
			x.Add("s", strconv.Itoa(start+i), v, time.Time{})
		}
		insert += cpuTime() - c0
		if exact != nil {
			for i, v := range vecs {
				exact.Add("s", strconv.Itoa(start+i), v, time.Time{})
			}
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perEntry := float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / float64(n)
	debug.FreeOSMemory() // the chunks of vectors built above are garbage now
	rssPerEntry := float64(rss()-rssBefore) / float64(n)
	if exact != nil {
		// the exact index holds float32 vectors too: leave it out
		perEntry, rssPerEntry = -1, -1
	}

	for _, probes := range o.probes {
		x.SetSearch(probes, o.cfg.Rerank)
		lat := make([]time.Duration, 0, len(qs))
		cpu := make([]time.Duration, 0, len(qs))
		found := map[string]int{}
		total := map[string]int{}
		now := time.Now()
		runtime.LockOSThread() // for the thread's CPU clock
		for _, q := range qs {
			c0, t0 := threadCPU(), time.Now()
			hits := x.Search("s", q.vec, 1, now)
			lat = append(lat, time.Since(t0))
			cpu = append(cpu, threadCPU()-c0)
			kind := "far"
			if q.best >= closeMatch {
				kind = "close"
			}
			total[kind]++
			if len(hits) == 1 {
				id, _ := strconv.Atoi(hits[0].ID)
				got := vek32.Dot(q.vec, vecOf(text(sentences, id)))
				if got >= q.best-1e-6 {
					found[kind]++
					found["all"]++
				} else if os.Getenv("SCALE_DEBUG") != "" && kind == "close" {
					fmt.Fprintf(os.Stderr, "miss: best %.4f got %.4f (index said %.4f)\n", q.best, got, hits[0].Similarity)
				}
			}
		}
		recall := func(kind string) string {
			n := total[kind]
			if kind == "all" {
				n = len(qs)
			}
			if n == 0 {
				return "–"
			}
			return fmt.Sprintf("%.4f (%d)", float64(found[kind])/float64(n), n)
		}
		exactP50 := "–"
		if exact != nil {
			el := make([]time.Duration, 0, len(qs))
			for _, q := range qs {
				t0 := time.Now()
				exact.Search("s", q.vec, 1, now)
				el = append(el, time.Since(t0))
			}
			slices.Sort(el)
			exactP50 = fmt.Sprintf("%.0f", us(el[len(el)/2]))
		}
		slices.Sort(lat)
		slices.Sort(cpu)
		minP50, minP99, minRecall := "–", "–", "–"
		if o.minSim > 0 {
			ml := make([]time.Duration, 0, len(qs))
			found, total := 0, 0
			for _, q := range qs {
				c0 := threadCPU()
				hits := x.SearchMin("s", q.vec, 1, float32(o.minSim), now)
				ml = append(ml, threadCPU()-c0)
				if q.best < float32(o.minSim) {
					continue
				}
				total++
				if len(hits) == 1 {
					id, _ := strconv.Atoi(hits[0].ID)
					if vek32.Dot(q.vec, vecOf(text(sentences, id))) >= q.best-1e-6 {
						found++
					}
				}
			}
			slices.Sort(ml)
			minP50, minP99 = fmt.Sprintf("%.0f", us(ml[len(ml)/2])), fmt.Sprintf("%.0f", us(ml[len(ml)*99/100]))
			if total > 0 {
				minRecall = fmt.Sprintf("%.4f (%d)", float64(found)/float64(total), total)
			}
		}
		runtime.UnlockOSThread()
		bytes := "–"
		if perEntry >= 0 {
			bytes = fmt.Sprintf("%.0f (RSS %.0f)", perEntry, rssPerEntry)
		}
		fmt.Printf("| %d | %.1f | %s | %d | %d | %.0f | %.0f | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %s |\n", n, us(insert)/float64(n), bytes, probes, len(qs),
			us(lat[len(lat)/2]), us(lat[len(lat)*99/100]), us(cpu[len(cpu)/2]), us(cpu[len(cpu)*99/100]), recall("close"), recall("far"), recall("all"), minP50, minP99, minRecall, exactP50)
	}
	runtime.KeepAlive(x)
	debug.FreeOSMemory()
	return nil
}

// closeMatch is the exact best cosine from which a query counts as having
// a close match: below the default threshold (0.92), with margin.
const closeMatch = 0.8

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rss is the process's resident set size (VmRSS), in bytes.
func rss() int64 {
	kb, err := load.ProcStatus(os.Getpid(), "VmRSS")
	if err != nil {
		return 0
	}
	return kb << 10
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// loadSentences reads the distinct sentences of the eval sets: the first
// of each pair (stored) and the second (paraphrase queries).
func loadSentences(dir string) (firsts, seconds []string, err error) {
	seen := map[string]bool{}
	addFirst := func(s string) {
		if s = strings.TrimSpace(s); s != "" && !seen[s] {
			seen[s] = true
			firsts = append(firsts, s)
		}
	}
	for _, name := range []string{"lcqmc_dev.tsv", "pawsx_zh_valid.tsv", "mrpc_val.tsv"} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return nil, nil, fmt.Errorf("%w (the eval sets live in ../shared/eval; see its README)", err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), "\t")
			if len(fields) < 2 {
				continue
			}
			addFirst(fields[0])
			seconds = append(seconds, fields[1])
		}
		f.Close()
	}
	b, err := os.ReadFile(filepath.Join(dir, "gptcache_mock_data.json"))
	if err != nil {
		return nil, nil, err
	}
	var rows []struct{ Origin, Similar string }
	if err := json.Unmarshal(b, &rows); err != nil {
		return nil, nil, fmt.Errorf("gptcache_mock_data.json: %w", err)
	}
	for _, row := range rows {
		addFirst(row.Origin)
		seconds = append(seconds, row.Similar)
	}
	return firsts, seconds, nil
}
