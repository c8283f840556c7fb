package main

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"frontdoor/bench/internal/load"
)

// sloOpts shapes the slo scenario: closed-loop users sending long prompts
// that share nothing, past what 4 local nodes answer within a second, with
// a fast hosted stand-in to spill to; run without and with
// spillover.max_predicted_ttft.
type sloOpts struct {
	long           longOpts // sim, simPath, kvBlocks, seed, spillTTFT, concurrencyCap
	duration, warm time.Duration
	users          int
	think          time.Duration
	minWords       int
	maxWords       int
	maxPredicted   time.Duration
}

func runSLO(o sloOpts) error {
	dir, err := load.BuildTemp("fd-balancer-slo", "frontdoor", "gpusim")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if o.long.sim == "llmd" {
		if _, err := os.Stat(o.long.simPath); err != nil {
			return fmt.Errorf("llm-d-inference-sim: %w (set -llmd)", err)
		}
	}
	fmt.Printf("command: go run ./bench/balancer -scenario slo -sim %s -slo-duration %s -slo-warmup %s -slo-users %d -slo-think %s -slo-words %d-%d -max-concurrency %d -spill-ttft %s -max-predicted-ttft %s -seed %d\n",
		o.long.sim, o.duration, o.warm, o.users, o.think, o.minWords, o.maxWords, o.long.concurrencyCap, o.long.spillTTFT, o.maxPredicted, o.long.seed)
	fmt.Printf("shape: 4 %s nodes (8 seqs, TTFT 20 ms + about 1 ms an uncached prompt word, ITL 10 ms), frontdoor max_concurrency %d a node;\n",
		o.long.sim, o.long.concurrencyCap)
	fmt.Printf("  a hosted stand-in (gpusim, TTFT %s, 1000 seqs) as spill-over (on: saturated, failed);\n", o.long.spillTTFT)
	fmt.Printf("  %d closed-loop users, each sending a prompt of %d-%d random words (no shared prefix), max_tokens 16-64, think exp(mean %s);\n",
		o.users, o.minWords, o.maxWords, o.think)
	fmt.Printf("  measured for %s after a %s warm-up; TTFT = first content at the client, local or spilled\n\n", o.duration, o.warm)
	fmt.Println("| max_predicted_ttft | answered | TTFT p50 | TTFT p95 | TTFT p99 | local p95 | spilled | predicted_slo (whole run) | saturated (whole run) | errors | predictor median abs error |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, limit := range []time.Duration{0, o.maxPredicted} {
		if err := runSLOOnce(dir, o, limit); err != nil {
			return fmt.Errorf("max_predicted_ttft %s: %w", limit, err)
		}
	}
	fmt.Println()
	return nil
}

func runSLOOnce(dir string, o sloOpts, limit time.Duration) error {
	cluster, stopNodes, err := longCluster(dir, o.long)
	if err != nil {
		return err
	}
	defer stopNodes()
	hosted := &load.Procs{}
	hport := load.FreePort()
	c := exec.Command(filepath.Join(dir, "gpusim"), "--listen", load.Addr(hport), "--model", "qwen3-8b",
		"--output-tokens", "64", "--seed", "99", "--ttft", o.long.spillTTFT.String(), "--itl", "10ms", "--max-num-seqs", "1000")
	if err := hosted.Start(c, fmt.Sprintf("http://%s/v1/models", load.Addr(hport))); err != nil {
		hosted.Stop()
		return fmt.Errorf("hosted stand-in: %w", err)
	}
	defer hosted.Stop()

	var nodes strings.Builder
	for _, n := range cluster {
		fmt.Fprintf(&nodes, "  - {name: %s, url: http://127.0.0.1:%d, kind: vllm, models: [qwen3-8b], max_concurrency: %d}\n", n.name, n.port, n.maxConc)
	}
	cfg := fmt.Sprintf(`logging: {level: warn, access_log: false}
cache: {backend: off}
nodes:
%sspillover:
  enabled: true
  kind: openai
  base_url: http://127.0.0.1:%d/v1
  api_key_env: HOSTED_API_KEY
  on: [saturated, failed]
  max_predicted_ttft: %s
`, nodes.String(), hport, strconv.Quote(limit.String()))
	procs := &load.Procs{}
	name := "fd-slo-off"
	if limit > 0 {
		name = "fd-slo-on"
	}
	base, p, err := procs.StartFrontdoor(load.Frontdoor{Dir: dir, Name: name, Config: cfg, Ready: "/readyz", Env: []string{"HOSTED_API_KEY=sk-bench"}})
	if err != nil {
		procs.Stop()
		return err
	}
	defer procs.Terminate(p, 10*time.Second)

	turns := driveSLOUsers(base+"/v1/chat/completions", o)
	var all, local []time.Duration
	spilled, errs := 0, 0
	for _, t := range turns {
		if t.err != nil {
			errs++
			continue
		}
		all = append(all, t.ttft)
		if t.spilled {
			spilled++
		} else {
			local = append(local, t.ttft)
		}
	}
	m, err := load.ScrapeMetrics(base)
	if err != nil {
		return err
	}
	reasons, _ := m.By("frontdoor_spillover_total", "reason", nil)
	predErr := "-"
	if bs, ok := m.Buckets("frontdoor_ttft_prediction_error_seconds", nil); ok {
		if med, _, ok := load.BucketQuantile(bs, 0.5); ok {
			predErr = fmt.Sprintf("%.0f ms", med*1000)
		}
	}
	shown := "off"
	if limit > 0 {
		shown = limit.String()
	}
	share := 0.0
	if len(all) > 0 {
		share = float64(spilled) / float64(len(all))
	}
	fmt.Printf("| %s | %d | %s | %s | %s | %s | %.0f%% | %.0f | %.0f | %d | %s |\n", shown, len(all), ms(quantile(all, 0.5)), ms(quantile(all, 0.95)),
		ms(quantile(all, 0.99)), ms(quantile(local, 0.95)), 100*share, reasons["predicted_slo"], reasons["saturated"], errs, predErr)
	return nil
}

// driveSLOUsers runs o.users closed-loop users for o.warm + o.duration and
// returns the turns started after the warm-up.
func driveSLOUsers(url string, o sloOpts) []longTurn {
	client := &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}
	var mu sync.Mutex
	var turns []longTurn
	start := time.Now()
	measured, end := start.Add(o.warm), start.Add(o.warm+o.duration)
	var wg sync.WaitGroup
	for u := range o.users {
		urng := rand.New(rand.NewPCG(o.long.seed, uint64(u)+1))
		wg.Go(func() {
			time.Sleep(time.Duration(urng.ExpFloat64() * float64(o.think)))
			for time.Now().Before(end) {
				// A fresh prompt: it shares no prefix with any other.
				prompt := fmt.Sprintf("user %d at %d: ", u, time.Now().UnixNano()) + wordText(urng, o.minWords+urng.IntN(o.maxWords-o.minWords+1))
				r, _ := streamTurn(client, url, []chatMsg{{"user", prompt}}, 16+urng.IntN(49))
				r.spilled = strings.HasPrefix(r.node, "spillover:")
				if r.start.After(measured) {
					mu.Lock()
					turns = append(turns, r)
					mu.Unlock()
				}
				time.Sleep(time.Duration(urng.ExpFloat64() * float64(o.think)))
			}
		})
	}
	wg.Wait()
	sort.Slice(turns, func(i, j int) bool { return turns[i].start.Before(turns[j].start) })
	return turns
}
