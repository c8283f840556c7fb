// Command testshard runs go test over packages, one go test a package, at
// most -p at once (as go test -p), and splits the tests of the packages
// named by -split into shards that all run at once besides them (the
// router's tests mostly wait), so that one long package is not the whole
// run's critical path. It prints each package (and shard) as it starts,
// the output of the tests that fail, and one line per package as go test
// does; it exits 1 if any failed.
//
//	go run ./internal/testshard [-p 2] [-split frontdoor/router=3] -- -race -count=1 ./...
//
// The flags after -- go to every go test; the last arguments that do not
// start with - are the packages. Every test binary is built first, in one
// go test that runs no test. A shard runs its package's tests and fuzz
// seeds whose names fall to it (-run '^(A|B|…)$'), in name order dealt
// round-robin. Shards start first.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	split := flag.String("split", "", "packages to shard, as path=N, comma-separated")
	flag.IntVar(&parallel, "p", runtime.NumCPU(), "go tests of whole packages at once (shards run besides them)")
	flag.Parse()
	flags, patterns := splitArgs(flag.Args())
	shards, err := parseSplit(*split)
	if err != nil {
		fail(err)
	}
	ok, err := run(flags, patterns, shards)
	if err != nil {
		fail(err)
	}
	if !ok {
		os.Exit(1)
	}
}

// parallel is how many go tests of whole packages run at once (-p).
var parallel int

func fail(err error) {
	fmt.Fprintln(os.Stderr, "testshard:", err)
	os.Exit(2)
}

// splitArgs separates go test's flags from the package patterns: the
// patterns are the trailing arguments that do not start with -.
func splitArgs(args []string) (flags, patterns []string) {
	i := len(args)
	for i > 0 && !strings.HasPrefix(args[i-1], "-") {
		i--
	}
	if i > 0 && !strings.Contains(args[i-1], "=") && takesValue(args[i-1]) && i < len(args) {
		i++ // the value of a flag such as -timeout 10m
	}
	return args[:i], args[i:]
}

// takesValue reports whether a go test flag written without = takes the
// next argument as its value.
func takesValue(flag string) bool {
	switch strings.TrimLeft(flag, "-") {
	case "race", "short", "v", "cover", "failfast", "json", "benchmem":
		return false
	}
	return true
}

func parseSplit(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		pkg, n, ok := strings.Cut(part, "=")
		k, err := strconv.Atoi(n)
		if !ok || err != nil || k < 1 {
			return nil, fmt.Errorf("-split %q: want path=N", part)
		}
		out[pkg] = k
	}
	return out, nil
}

// job is one go test process: one package, or one shard of one.
type job struct {
	name string   // what is printed as it starts and ends
	args []string // go test's
}

func run(flags, patterns []string, shards map[string]int) (bool, error) {
	pkgs, err := list(patterns)
	if err != nil {
		return false, err
	}
	// Build every test binary once, in one go test that runs no test, so
	// that the go tests below, one a package, do not build the same
	// dependencies at once.
	build := exec.Command("go", append(append(append([]string{"test"}, flags...), "-run", "^$"), patterns...)...)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Printf("%s\nFAIL\tbuilding the test binaries: %v\n", out, err)
		return false, nil
	}
	var shardJobs, rest []job
	for _, p := range pkgs {
		n := shards[p.path]
		if n < 2 {
			rest = append(rest, job{name: p.path, args: append(append([]string{"test", "-json"}, flags...), p.path)})
			continue
		}
		names, err := testNames(p.dir)
		if err != nil {
			return false, err
		}
		for i := range n {
			var mine []string
			for j, name := range names {
				if j%n == i {
					mine = append(mine, name)
				}
			}
			if len(mine) == 0 {
				continue
			}
			run := "^(" + strings.Join(mine, "|") + ")$"
			shardJobs = append(shardJobs, job{name: fmt.Sprintf("%s [%d/%d]", p.path, i+1, n),
				args: append(append(append([]string{"test", "-json"}, flags...), "-run", run), p.path)})
		}
	}
	var (
		mu   sync.Mutex // serializes printing
		wg   sync.WaitGroup
		good = true
		sem  = make(chan struct{}, max(1, parallel))
	)
	start := func(j job, done func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer done()
			mu.Lock()
			fmt.Printf("start\t%s\t%s\n", j.name, time.Now().Format("15:04:05"))
			mu.Unlock()
			if !runJob(j, &mu) {
				mu.Lock()
				good = false
				mu.Unlock()
			}
		}()
	}
	for _, j := range shardJobs {
		start(j, func() {})
	}
	for _, j := range rest {
		sem <- struct{}{}
		start(j, func() { <-sem })
	}
	wg.Wait()
	return good, nil
}

type pkg struct{ path, dir string }

func list(patterns []string) ([]pkg, error) {
	out, err := exec.Command("go", append([]string{"list", "-f", "{{.ImportPath}} {{.Dir}}"}, patterns...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	var pkgs []pkg
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, dir, ok := strings.Cut(line, " "); ok {
			pkgs = append(pkgs, pkg{path, dir})
		}
	}
	return pkgs, nil
}

var testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)\w*)\(\w+ \*testing\.[TF]\)`)

// testNames lists the tests and fuzz targets of the package in dir, sorted.
func testNames(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range testFunc.FindAllSubmatch(data, -1) {
			names = append(names, string(m[1]))
		}
	}
	slices.Sort(names)
	return names, nil
}

// event is one line of go test -json.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

// runJob runs one go test -json and prints as go test would: a line as
// each package starts, a failed test's output, a line as each package
// ends. It reports whether everything passed.
func runJob(j job, mu *sync.Mutex) bool {
	cmd := exec.Command("go", j.args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return false
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		mu.Lock()
		fmt.Printf("FAIL\t%s: %v\n", j.name, err)
		mu.Unlock()
		return false
	}
	ok := follow(stdout, j.name, mu)
	err = cmd.Wait()
	if err != nil || stderr.Len() > 0 {
		mu.Lock()
		os.Stdout.Write(stderr.Bytes())
		mu.Unlock()
	}
	return ok && err == nil
}

// follow reads go test -json events from r and prints them under name.
func follow(r io.Reader, name string, mu *sync.Mutex) bool {
	tests := map[string]*bytes.Buffer{} // output of a running test, by package and name
	pkgOut := map[string]*bytes.Buffer{}
	ok := true
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue // a line that is not an event
		}
		label := name
		key := ev.Package + "\x00" + ev.Test
		switch {
		case ev.Action == "output" && ev.Test != "":
			if tests[key] == nil {
				tests[key] = &bytes.Buffer{}
			}
			tests[key].WriteString(ev.Output)
		case ev.Action == "output":
			if pkgOut[ev.Package] == nil {
				pkgOut[ev.Package] = &bytes.Buffer{}
			}
			pkgOut[ev.Package].WriteString(ev.Output)
		case ev.Test != "" && (ev.Action == "pass" || ev.Action == "skip"):
			delete(tests, key)
		case ev.Test != "" && ev.Action == "fail":
			mu.Lock()
			os.Stdout.Write(tests[key].Bytes())
			mu.Unlock()
			delete(tests, key)
		case ev.Test == "" && (ev.Action == "pass" || ev.Action == "skip" || ev.Action == "fail"):
			mu.Lock()
			out := pkgOut[ev.Package]
			switch {
			case ev.Action == "fail":
				ok = false
				for _, b := range tests { // a test the binary died in
					os.Stdout.Write(b.Bytes())
				}
				if out != nil { // but go test's own line for the package: ours follows
					for _, line := range strings.SplitAfter(out.String(), "\n") {
						if !strings.HasPrefix(line, "FAIL\t"+ev.Package+"\t") {
							fmt.Print(line)
						}
					}
				}
				fmt.Printf("FAIL\t%s\t%.3fs\n", label, ev.Elapsed)
			case ev.Action == "skip":
				fmt.Printf("?   \t%s\t[no test files]\n", label)
			default:
				fmt.Printf("ok  \t%s\t%.3fs\n", label, ev.Elapsed)
			}
			mu.Unlock()
			delete(pkgOut, ev.Package)
		}
	}
	return ok
}
