// Command requestlife lists the files of the router tree whose code runs
// for one request, and checks router/doc.go's list of them. Built with
// coverage of the router tree, it starts a gpusim node and a gateway with
// the memory cache in process, sends one streamed request first (so that
// first uses are done), clears the coverage counters, sends one streamed
// miss, waits until its answer is stored, and reads which files ran. It
// measures three times and keeps the files that ran every time (a
// background ticker may run in one window, not in three).
//
//	go build -cover -covermode=atomic -coverpkg=frontdoor/router/... -o /tmp/requestlife ./bench/requestlife
//	/tmp/requestlife -doc router/doc.go
//
// make request-life does both; TestRequestLifeMatchesDoc runs it in make
// test. It exits 1 when the files that ran differ from the list in the
// paragraph of router/doc.go that starts "One streamed miss".
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/coverage"
	"slices"
	"strconv"
	"strings"
	"time"

	"frontdoor/balancer"
	"frontdoor/cache"
	"frontdoor/internal/gpusim"
	"frontdoor/router"
)

func main() {
	doc := flag.String("doc", "router/doc.go", "the router's doc.go, whose list is checked")
	flag.StringVar(&show, "show", "", "also print the lines of this file (under router/) that ran, in the last measure")
	flag.Parse()
	if err := run(*doc); err != nil {
		fmt.Fprintln(os.Stderr, "requestlife:", err)
		os.Exit(1)
	}
}

// show names a file whose lines that ran are printed (-show).
var show string

func run(docPath string) error {
	if err := coverage.ClearCounters(); err != nil {
		return fmt.Errorf("build it with -cover -covermode=atomic -coverpkg=frontdoor/router/...: %w", err)
	}
	listed, err := docList(docPath)
	if err != nil {
		return err
	}
	url, store, stop, err := start()
	if err != nil {
		return err
	}
	defer stop()
	if err := ask(url, "A question asked first, so that first uses are done"); err != nil {
		return err
	}
	if err := waitEntries(store, 1); err != nil {
		return err
	}
	var ran []string
	for i := range 3 {
		time.Sleep(50 * time.Millisecond)
		if err := coverage.ClearCounters(); err != nil {
			return err
		}
		if err := ask(url, "The question measured, number "+strconv.Itoa(i)); err != nil {
			return err
		}
		if err := waitEntries(store, int64(i)+2); err != nil {
			return err
		}
		files, err := filesRun()
		if err != nil {
			return err
		}
		if i == 0 {
			ran = files
			continue
		}
		ran = slices.DeleteFunc(ran, func(f string) bool { return !slices.Contains(files, f) })
	}
	fmt.Printf("%d files of the router tree ran for one streamed miss written back:\n  %s\n", len(ran), strings.Join(ran, " "))
	a, b := slices.Sorted(slices.Values(ran)), slices.Sorted(slices.Values(listed))
	if !slices.Equal(a, b) {
		return fmt.Errorf("%s lists %d files:\n  %s\nthe request ran %d:\n  %s", docPath, len(listed), strings.Join(b, " "), len(ran), strings.Join(a, " "))
	}
	fmt.Printf("%s lists the same %d files\n", docPath, len(listed))
	return nil
}

// docList is the files listed in doc's paragraph that starts "One
// streamed miss": one per line, as the first word of its indented list.
func docList(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	text := string(data)
	i := strings.Index(text, "// One streamed miss")
	if i < 0 {
		return nil, fmt.Errorf("%s has no paragraph starting \"One streamed miss\"", path)
	}
	var out []string
	for _, line := range strings.Split(text[i:], "\n") {
		item, ok := strings.CutPrefix(line, "//\t")
		if !ok {
			if len(out) > 0 {
				break // the list has ended
			}
			continue
		}
		if f := strings.Fields(item); len(f) > 0 && strings.HasSuffix(f[0], ".go") { // else a line that goes on
			out = append(out, f[0])
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: the paragraph \"One streamed miss\" lists no file", path)
	}
	return out, nil
}

// start runs a gpusim node and a gateway in front of it, with the memory
// cache, and returns the gateway's URL, its store and how to stop both.
func start() (url string, store cache.Store, stop func(), err error) {
	sc := gpusim.DefaultConfig()
	sc.Listen, sc.Models, sc.TTFT, sc.ITL, sc.Seed = "127.0.0.1:0", []string{"qwen3-8b"}, 0, 0, 1
	sim, err := gpusim.New(sc)
	if err != nil {
		return "", nil, nil, err
	}
	if _, err := sim.Start(); err != nil {
		return "", nil, nil, err
	}
	cfg := router.DefaultConfig()
	cfg.Cache.Backend = "memory"
	cfg.Balancer.HealthInterval = 3600e9
	cfg.Nodes = []balancer.NodeConfig{{Name: "gpu-a", URL: sim.URL(), Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 10, Weight: 1}}
	store = cache.NewMemoryStore(64<<20, cfg.Cache.Embedder.Dims)
	gw, err := router.New(cfg, router.Deps{Store: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return "", nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	go func() { _ = gw.Serve(ln) }()
	gw.Pool().ProbeAll()
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
		_ = sim.Shutdown(ctx)
	}
	return "http://" + ln.Addr().String(), store, stop, nil
}

// ask sends one streamed chat request and reads its whole answer.
func ask(url, question string) error {
	body := `{"model":"qwen3-8b","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"` + question + `"}]}`
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || resp.Header.Get("X-Cache") != "miss" || !bytes.Contains(data, []byte("[DONE]")) {
		return fmt.Errorf("not a streamed miss: %d X-Cache %q: %.200s", resp.StatusCode, resp.Header.Get("X-Cache"), data)
	}
	return nil
}

// waitEntries waits until the store holds n entries.
func waitEntries(store cache.Store, n int64) error {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		st, err := store.Stats(context.Background())
		if err != nil {
			return err
		}
		if st.Entries >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the answer was never stored")
		}
	}
}

// filesRun is the files of the router tree with a statement that ran
// since the counters were cleared, as paths under router/.
func filesRun() ([]string, error) {
	dir, err := os.MkdirTemp("", "requestlife")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := coverage.WriteMetaDir(dir); err != nil {
		return nil, err
	}
	if err := coverage.WriteCountersDir(dir); err != nil {
		return nil, err
	}
	profile := filepath.Join(dir, "profile.txt")
	if out, err := exec.Command("go", "tool", "covdata", "textfmt", "-i="+dir, "-o="+profile).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go tool covdata: %w\n%s", err, out)
	}
	f, err := os.Open(profile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		file, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(file, "frontdoor/router/") || strings.HasSuffix(rest, " 0") || strings.HasSuffix(file, "_test.go") {
			continue
		}
		name := strings.TrimPrefix(file, "frontdoor/router/")
		if name == show {
			fmt.Println("ran:", sc.Text())
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, sc.Err()
}
