package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRequestLifeMatchesDoc builds the command with coverage of the router
// tree and runs it: router/doc.go's list of the files one streamed miss
// runs must be the files it runs.
func TestRequestLifeMatchesDoc(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a covered binary (about 20 s)")
	}
	bin := filepath.Join(t.TempDir(), "requestlife")
	build := exec.Command("go", "build", "-cover", "-covermode=atomic",
		"-coverpkg=frontdoor/router/...,frontdoor/bench/requestlife", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-doc", "../../router/doc.go")
	cmd.Env = append(os.Environ(), "GOCOVERDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "lists the same") {
		t.Fatalf("no verdict:\n%s", out)
	}
	t.Logf("%s", out)
}
