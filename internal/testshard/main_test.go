package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestSplitArgs(t *testing.T) {
	for _, c := range []struct {
		args            []string
		flags, patterns []string
	}{
		{[]string{"-race", "-count=1", "./..."}, []string{"-race", "-count=1"}, []string{"./..."}},
		{[]string{"-timeout", "10m", "./a", "./b"}, []string{"-timeout", "10m"}, []string{"./a", "./b"}},
		{[]string{"-short", "./a"}, []string{"-short"}, []string{"./a"}},
		{[]string{"./a"}, []string{}, []string{"./a"}},
	} {
		flags, patterns := splitArgs(c.args)
		if !slices.Equal(flags, c.flags) || !slices.Equal(patterns, c.patterns) {
			t.Errorf("%q: flags %q patterns %q, want %q %q", c.args, flags, patterns, c.flags, c.patterns)
		}
	}
}

func TestParseSplit(t *testing.T) {
	got, err := parseSplit("frontdoor/router=6,frontdoor/x=2")
	if err != nil || got["frontdoor/router"] != 6 || got["frontdoor/x"] != 2 {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"frontdoor/router", "a=0", "a=x"} {
		if _, err := parseSplit(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestTestNames(t *testing.T) {
	dir := t.TempDir()
	src := "package p\n\nfunc TestB(t *testing.T) {}\nfunc TestA(t *testing.T) {}\nfunc FuzzC(f *testing.F) {}\nfunc BenchmarkD(b *testing.B) {}\nfunc helper(t *testing.T) {}\n"
	if err := os.WriteFile(filepath.Join(dir, "x_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	names, err := testNames(dir)
	if err != nil || !slices.Equal(names, []string{"FuzzC", "TestA", "TestB"}) {
		t.Fatalf("%q %v", names, err)
	}
}
