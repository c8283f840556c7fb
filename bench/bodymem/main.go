// Command bodymem measures what one request body can make a frontdoor
// process hold: for each shape of body a security review found costly
// (issue 45), alone and N at once, it starts a fresh frontdoor against a
// gpusim node, sends the bodies, and reads the process's peak resident
// memory (VmHWM in /proc/PID/status) and CPU time. Every body is within
// the default limits.max_body_bytes (8 MiB).
//
// Shapes:
//
//	embed-ids      POST /v1/embeddings, "input": one array of 1M token ids (2 MB)
//	chat-string    POST /v1/chat/completions, one user message of 7.9 MB of text
//	chat-messages  POST /v1/chat/completions, 200k messages
//
// Configs: serve (frontdoor serve's defaults, which include the semantic
// cache with the local embedder), demo (what frontdoor demo sets on top:
// the semantic judge and an alias) and nocache (cache.backend off, the
// floor without the embedder).
//
//	go run ./bench/bodymem [-bin path/to/frontdoor] [-configs serve,demo,nocache]
//	    [-shapes embed-ids,chat-string,chat-messages] [-conc 1,8]
//
// Run it from the repository root; without -bin it builds ./cmd/frontdoor.
// The program is Linux only (/proc).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
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

const model = "qwen3-8b" // gpusim's default model

func main() {
	bin := flag.String("bin", "", "frontdoor binary to measure (default: build ./cmd/frontdoor)")
	configs := flag.String("configs", "serve,demo,nocache", "configs to run: serve, demo, nocache")
	shapes := flag.String("shapes", "embed-ids,chat-string,chat-messages", "body shapes to send")
	concs := flag.String("conc", "1,8", "how many bodies to send at once, one fresh process per value")
	flag.Parse()
	if err := run(*bin, split(*configs), split(*shapes), split(*concs)); err != nil {
		fmt.Fprintln(os.Stderr, "bodymem:", err)
		os.Exit(1)
	}
}

func split(s string) []string { return strings.Split(s, ",") }

func run(bin string, configs, shapes, concs []string) error {
	dir, err := load.BuildTemp("bodymem", "gpusim")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if bin == "" {
		if err := load.Build(dir, "frontdoor"); err != nil {
			return err
		}
		bin = filepath.Join(dir, "frontdoor")
	}
	var procs load.Procs
	defer procs.Stop()
	simAddr := load.Addr(load.FreePort())
	if err := procs.Start(exec.Command(filepath.Join(dir, "gpusim"), "-listen", simAddr, "-ttft", "5ms", "-itl", "1ms",
		"-output-tokens", "8", "-max-num-seqs", "64"), "http://"+simAddr+"/health"); err != nil {
		return err
	}
	fmt.Printf("frontdoor %s, one gpusim node; peak RSS is VmHWM of a fresh process (at rest: the first column)\n\n", bin)
	fmt.Println("| config | shape | at once | RSS at rest | peak RSS | CPU | statuses | first refusal |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, c := range configs {
		cfg, ok := configYAML(c, "http://"+simAddr)
		if !ok {
			return fmt.Errorf("unknown config %q", c)
		}
		for _, s := range shapes {
			path, body, ok := shape(s)
			if !ok {
				return fmt.Errorf("unknown shape %q", s)
			}
			for _, cs := range concs {
				n, err := strconv.Atoi(cs)
				if err != nil || n < 1 {
					return fmt.Errorf("-conc %q: not a positive number", cs)
				}
				if err := measure(&procs, dir, bin, c, cfg, s, path, body, n); err != nil {
					return fmt.Errorf("%s %s x%d: %w", c, s, n, err)
				}
			}
		}
	}
	return nil
}

// configYAML is a config's YAML without its listen line.
func configYAML(name, node string) (string, bool) {
	base := "logging: {access_log: false, level: error}\nnodes:\n  - {name: gpu, url: " + node + ", kind: vllm, models: [" + model + "]}\n"
	switch name {
	case "serve":
		return base, true
	case "demo":
		return base + "models:\n  - {name: chat, targets: [{model: " + model + ", weight: 1}]}\n" +
			"admin: {show_cached_questions: true}\n" +
			"cache: {semantic: {verify: {judge_model: " + model + ", audit_rate: 1, max_judge_rps: 20}}}\n", true
	case "nocache":
		return base + "cache: {backend: \"off\"}\n", true
	}
	return "", false
}

// shape is a shape's path and body.
func shape(name string) (string, []byte, bool) {
	var b bytes.Buffer
	switch name {
	case "embed-ids":
		b.WriteString(`{"model":"` + model + `","input":[`)
		for i := range 1_000_000 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('0' + byte(i%10))
		}
		b.WriteString("]}")
		return "/v1/embeddings", b.Bytes(), true
	case "chat-string":
		// Words of prose (each word a feature of the local embedder).
		const sentence = "The quick brown fox jumps over the lazy dog while 42 zebras watch quietly. "
		text := strings.Repeat(sentence, 7_900_000/len(sentence))
		b.WriteString(`{"model":"` + model + `","max_tokens":8,"messages":[{"role":"user","content":`)
		q, _ := json.Marshal(text)
		b.Write(q)
		b.WriteString("}]}")
		return "/v1/chat/completions", b.Bytes(), true
	case "chat-messages":
		b.WriteString(`{"model":"` + model + `","max_tokens":8,"messages":[`)
		for i := range 200_000 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"role":"user","content":"hi"}`)
		}
		b.WriteString("]}")
		return "/v1/chat/completions", b.Bytes(), true
	}
	return "", nil, false
}

// measure runs one fresh frontdoor, sends n bodies at once and prints a
// row.
func measure(procs *load.Procs, dir, bin, cfgName, cfg, shapeName, path string, body []byte, n int) error {
	base, p, err := procs.StartFrontdoor(load.Frontdoor{Dir: dir, Name: "fd-" + cfgName, Config: cfg, Bin: bin, Ready: "/readyz"})
	if p != nil {
		defer procs.Stop(p)
	}
	if err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond) // the tokenizer vocabulary loads in the background at start
	rest, err := load.ProcStatus(p.Pid(), "VmHWM")
	if err != nil {
		return err
	}
	cpu0, _ := load.CPUTime(p.Pid())
	client := &http.Client{Timeout: 2 * time.Minute}
	var mu sync.Mutex
	statuses := map[int]int{}
	var refusal string
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := client.Post(base+path, "application/json", bytes.NewReader(body))
			code, msg := 0, ""
			if err != nil {
				msg = err.Error()
			} else {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
				if code >= 400 {
					msg = strconv.Itoa(code) + " " + resp.Header.Get("Retry-After") + " " + errorMessage(b)
				}
			}
			mu.Lock()
			statuses[code]++
			if refusal == "" {
				refusal = msg
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if e := p.Exited(); e != "" {
		return fmt.Errorf("frontdoor exited (%s)\n%s", e, p.LogExcerpt())
	}
	peak, err := load.ProcStatus(p.Pid(), "VmHWM")
	if err != nil {
		return err
	}
	cpu1, _ := load.CPUTime(p.Pid())
	fmt.Printf("| %s | %s (%.1f MB) | %d | %d MB | %d MB | %.2f s | %s | %s |\n", cfgName, shapeName, float64(len(body))/1e6, n,
		rest/1024, peak/1024, (cpu1 - cpu0).Seconds(), formatStatuses(statuses), strings.ReplaceAll(refusal, "|", "\\|"))
	return nil
}

func errorMessage(b []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
			Param   string `json:"param"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil {
		return strings.TrimSpace(string(b[:min(len(b), 120)]))
	}
	m := e.Error.Message
	if len(m) > 110 {
		m = m[:110] + "..."
	}
	if e.Error.Param != "" {
		return "(" + e.Error.Param + ") " + m
	}
	return m
}

func formatStatuses(m map[int]int) string {
	codes := make([]int, 0, len(m))
	for c := range m {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d×%d", m[c], c))
	}
	return strings.Join(parts, " ")
}
