package main

// The slow streams: N open streams against each target, in rounds.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"frontdoor/bench/internal/load"
)

// round is one target's measurement at one N.
type round struct {
	streams, chunks, errs int
	cpu                   time.Duration // the target process's
	simCPU                time.Duration
	ttft                  []time.Duration // sorted
	maxRSS                int64           // KiB, sampled
	fileRSS               int64           // KiB, RssFile (the binary's and libraries' pages) at maxRSS
	lastErr               error
}

func slowStreams(o opts, bin string) error {
	maxN := 0
	for _, n := range o.ns {
		maxN = max(maxN, n)
	}
	e, ts, err := setup(o, bin, maxN+64, "--ttft", "0", "--itl", o.itl.String(), "--output-tokens", strconv.Itoa(o.tokens))
	defer e.close()
	if err != nil {
		return err
	}
	ts = o.selected(ts)
	simPID := ts[0].pid
	fmt.Printf("Slow streams: gpusim --ttft 0 --itl %s --output-tokens %d; %d alternating rounds of %s each after a ramp-up; medians over rounds\n\n",
		o.itl, o.tokens, o.rounds, o.dur)
	fmt.Println("| N | target | streams/s | CPU/stream | CPU/chunk | ratio to nginx + Lua | RSS, max sampled (of it file-backed) | VmHWM | TTFT p99 | added TTFT p99 | gpusim CPU/stream | errors |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, n := range o.ns {
		res := map[string][]round{}
		for r := 0; r < o.rounds; r++ {
			for _, t := range ts {
				var prof func()
				if o.profile != "" && r == 0 && t.admin != "" {
					prof = profiler(o.profile, t, n, o.dur)
				}
				rd, err := streamRound(t, simPID, n, o.dur, prof)
				if err != nil {
					return fmt.Errorf("%d streams, %s: %w", n, t.name, err)
				}
				res[t.name] = append(res[t.name], rd)
			}
		}
		med := func(name string, f func(round) float64) float64 { return load.Median(res[name], f) }
		perStream := func(rd round) float64 { return load.Micros(rd.cpu) / float64(max(rd.streams, 1)) }
		p99 := func(rd round) float64 { return load.Micros(quantile(rd.ttft, 0.99)) }
		ngx := med("nginx + Lua", perStream)
		dp99 := med("direct", p99)
		for _, t := range ts {
			errs := 0
			var lastErr error
			var rss, file int64
			for _, rd := range res[t.name] {
				errs += rd.errs
				if rd.maxRSS > rss {
					rss, file = rd.maxRSS, rd.fileRSS
				}
				if rd.lastErr != nil {
					lastErr = rd.lastErr
				}
			}
			hwm, _ := load.ProcStatus(t.pid, "VmHWM")
			ratio, added := "–", "–"
			if t.name != "direct" && ngx > 0 {
				ratio = fmt.Sprintf("**%.2f×**", med(t.name, perStream)/ngx)
			}
			if t.name != "direct" {
				added = fmt.Sprintf("%+.2f ms", (med(t.name, p99)-dp99)/1e3)
			}
			fmt.Printf("| %d | %s | %.0f | %.2f ms | %.1f µs | %s | %.1f MB (%.1f) | %.1f MB | %.2f ms | %s | %.2f ms | %d |\n",
				n, t.name, med(t.name, func(rd round) float64 { return float64(rd.streams) / o.dur.Seconds() }),
				med(t.name, perStream)/1e3, med(t.name, func(rd round) float64 { return load.Micros(rd.cpu) / float64(max(rd.chunks, 1)) }),
				ratio, float64(rss)/1024, float64(file)/1024, float64(hwm)/1024, med(t.name, p99)/1e3, added,
				med(t.name, func(rd round) float64 { return load.Micros(rd.simCPU) / float64(max(rd.streams, 1)) })/1e3, errs)
			if lastErr != nil {
				fmt.Fprintf(os.Stderr, "  %s N=%d: last error: %v\n", t.name, n, lastErr)
			}
		}
	}
	fmt.Println("\n(CPU/stream = user+system CPU of the process over the window ÷ streams finished in it; for direct, gpusim's own; ratio = CPU/stream ÷ nginx + Lua's; nginx's is its one worker process)")
	fmt.Println()
	return nil
}

// streamRound keeps n streams open against t: n workers each open a stream,
// read it to its end and open the next. Workers start spread over a second;
// the window of d begins once every worker has finished a first stream.
func streamRound(t target, simPID, n int, d time.Duration, prof func()) (round, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n, DisableCompression: true,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	var (
		measuring atomic.Bool
		stop      atomic.Bool
		warm      sync.WaitGroup
		mu        sync.Mutex
		rd        round
		wg        sync.WaitGroup
		seq       atomic.Uint64
	)
	warm.Add(n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			time.Sleep(time.Duration(i) * time.Second / time.Duration(n))
			first := true
			for !stop.Load() {
				in := measuring.Load()
				ttft, chunks, err := oneStream(ctx, client, t.url, seq.Add(1))
				if first {
					first = false
					warm.Done()
				}
				if stop.Load() && !in {
					return
				}
				mu.Lock()
				switch {
				case err != nil:
					if in || measuring.Load() {
						rd.errs++
						rd.lastErr = err
					}
				case in:
					// Started in the window: its first token counts, even
					// when it ends after the window (long streams at large N).
					rd.ttft = append(rd.ttft, ttft)
					fallthrough
				default:
					if measuring.Load() && !stop.Load() {
						rd.streams++
						rd.chunks += chunks
					}
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}(i)
	}
	warm.Wait()
	cpu0, _ := load.CPUTime(t.pid)
	sim0, _ := load.CPUTime(simPID)
	measuring.Store(true)
	stopRSS := load.Every(100*time.Millisecond, func() { // RSS, sampled
		v, err := load.ProcStatus(t.pid, "VmRSS")
		f, ferr := load.ProcStatus(t.pid, "RssFile")
		if err == nil && ferr == nil {
			mu.Lock()
			if v > rd.maxRSS {
				rd.maxRSS, rd.fileRSS = v, f
			}
			mu.Unlock()
		}
	})
	if prof != nil {
		go prof()
	}
	time.Sleep(d)
	mu.Lock()
	stop.Store(true)
	cpu1, _ := load.CPUTime(t.pid)
	sim1, _ := load.CPUTime(simPID)
	mu.Unlock()
	stopRSS()
	wg.Wait()
	rd.cpu, rd.simCPU = cpu1-cpu0, sim1-sim0
	sort.Slice(rd.ttft, func(i, j int) bool { return rd.ttft[i] < rd.ttft[j] })
	if rd.streams == 0 {
		return rd, errors.Join(errors.New("no stream finished in the window"), rd.lastErr)
	}
	return rd, nil
}

var doneLine = []byte("data: [DONE]")

// oneStream sends one streaming request and reads it to its end; it
// returns the time to the first data line and the number of data lines.
func oneStream(ctx context.Context, c *http.Client, url string, id uint64) (time.Duration, int, error) {
	body := fmt.Sprintf(`{"model":"qwen3-8b","messages":[{"role":"user","content":"Stream %d: tell me a long story about a lighthouse."}],"stream":true}`, id)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	br := bufio.NewReaderSize(resp.Body, 4096)
	var ttft time.Duration
	chunks := 0
	for {
		line, err := br.ReadSlice('\n')
		if bytes.HasPrefix(line, []byte("data:")) {
			if chunks == 0 {
				ttft = time.Since(t0)
			}
			chunks++
			if bytes.HasPrefix(line, doneLine) {
				_, _ = io.Copy(io.Discard, br)
				return ttft, chunks, nil
			}
		}
		if err != nil {
			return ttft, chunks, fmt.Errorf("stream ended without [DONE] after %d chunks: %w", chunks, err)
		}
	}
}

// profiler fetches a CPU profile (most of the window) and a heap profile of
// frontdoor while the streams run.
func profiler(dir string, t target, n int, d time.Duration) func() {
	name := strings.NewReplacer(",", "", " ", "-", ":", "").Replace(t.name)
	return func() {
		_ = os.MkdirAll(dir, 0o700)
		secs := max(1, int(d.Seconds())-2)
		get := func(path, file string) {
			req, err := http.NewRequest(http.MethodGet, t.admin+path, nil)
			if err != nil {
				return
			}
			req.Header.Set("Authorization", "Bearer "+adminToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(filepath.Join(dir, file))
			if err != nil {
				return
			}
			defer f.Close()
			_, _ = io.Copy(f, resp.Body)
		}
		get("/debug/pprof/heap?gc=1", fmt.Sprintf("%s-%d.heap", name, n))
		get("/debug/pprof/heap?debug=1", fmt.Sprintf("%s-%d.heap.txt", name, n))
		get("/debug/pprof/goroutine", fmt.Sprintf("%s-%d.goroutine", name, n))
		get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), fmt.Sprintf("%s-%d.cpu", name, n))
	}
}

func quantile(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(int(q*float64(len(s))), len(s)-1)]
}
