package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"frontdoor/internal/testenv"
)

// readmeCommand is a command of the README's tour with what it must print.
type readmeCommand struct {
	text   string         // as in the README, continuation lines joined
	expect *regexp.Regexp // from its "# expect: REGEX" comment; nil: none
}

// tourBlocks returns the shell blocks of the README's "Five-minute tour",
// each as its commands.
func tourBlocks(t *testing.T, readme string) [][]readmeCommand {
	t.Helper()
	start := strings.Index(readme, "\n## Five-minute tour")
	if start < 0 {
		t.Fatal(`README.md has no "## Five-minute tour"`)
	}
	tour := readme[start+1:]
	if end := strings.Index(tour, "\n## "); end >= 0 {
		tour = tour[:end]
	}
	fence := regexp.MustCompile("(?s)```sh\n(.*?)\n\\s*```")
	expectRe := regexp.MustCompile(`\s+# expect: (.+)$`)
	var blocks [][]readmeCommand
	for _, m := range fence.FindAllStringSubmatch(tour, -1) {
		var cmds []readmeCommand
		var cur []string
		for _, line := range strings.Split(m[1], "\n") {
			line = strings.TrimSpace(line)
			cur = append(cur, line)
			if strings.HasSuffix(line, `\`) {
				continue
			}
			c := readmeCommand{text: strings.Join(cur, "\n")}
			if e := expectRe.FindStringSubmatch(line); e != nil {
				c.expect = regexp.MustCompile(e[1])
			}
			cmds, cur = append(cmds, c), nil
		}
		blocks = append(blocks, cmds)
	}
	return blocks
}

// TestReadmeCommands pastes the README's tour into a shell, in order,
// against a demo started as the README starts it, from a folder like a
// fresh clone's, and checks that each command prints what its
// "# expect:" comment says. The blocks are read from README.md, so the
// README cannot drift from the product.
func TestReadmeCommands(t *testing.T) {
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	top := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(string(readme))
	if top == nil || !strings.Contains(top[1], "go run ./cmd/frontdoor demo") || !strings.Contains(top[1], "make test") {
		t.Fatalf("README.md does not open with `go run ./cmd/frontdoor demo` and `make test`")
	}
	blocks := tourBlocks(t, string(readme))
	expects := 0
	for _, b := range blocks {
		for _, c := range b {
			if c.expect != nil {
				expects++
			}
		}
	}
	if len(blocks) < 4 || expects < 10 {
		t.Fatalf("the tour has %d shell blocks and %d expectations; the test reads them wrong", len(blocks), expects)
	}

	bin := buildBinary(t)
	gw, admin := fmt.Sprint(testenv.FreePort(t)), fmt.Sprint(testenv.FreePort(t))
	demo := exec.Command(bin, "demo", "--listen", "127.0.0.1:"+gw, "--admin-listen", "127.0.0.1:"+admin)
	var demoOut lockedBuffer
	demo.Stdout, demo.Stderr = &demoOut, &demoOut
	if err := demo.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = demo.Process.Kill(); _ = demo.Wait() })
	testenv.Eventually(t, 20*time.Second, func() bool {
		resp, err := http.Get("http://127.0.0.1:" + gw + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, "the demo never got ready:\n%s", demoOut.String())

	// A folder like a clone's top: deploy/ and nothing else to overwrite.
	repo, _ := filepath.Abs("../..")
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(repo, "deploy"), filepath.Join(dir, "deploy")); err != nil {
		t.Fatal(err)
	}
	ports := strings.NewReplacer("go run ./cmd/frontdoor", bin, "localhost:8080", "127.0.0.1:"+gw, "127.0.0.1:8081", "127.0.0.1:"+admin)
	const marker = "@@readme-command-done@@"
	var script strings.Builder
	var checks []readmeCommand
	for _, b := range blocks {
		for _, c := range b {
			script.WriteString(ports.Replace(c.text) + "\n")
			if c.expect != nil {
				script.WriteString("echo " + marker + "\n")
				checks = append(checks, c)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "-c", script.String())
	sh.Dir = dir
	var out bytes.Buffer
	sh.Stdout, sh.Stderr = &out, &out
	_ = sh.Run() // a failing command shows in its output's check
	parts := strings.Split(out.String(), marker+"\n")
	if len(parts) < len(checks) {
		t.Fatalf("the tour stopped after %d of %d checked commands:\n%s", len(parts)-1, len(checks), out.String())
	}
	for i, c := range checks {
		if !c.expect.MatchString(parts[i]) {
			t.Errorf("README command\n%s\nprinted\n%s\nwhich does not match %q", c.text, parts[i], c.expect)
		}
	}
}
