package main

import "os/exec"

// raceBuild is set by race_test.go when the tests run under -race.
var raceBuild bool

// goBuild is `go build args...` with the test binary's own -race setting,
// so that the build reuses the packages `go test` has just compiled (a
// build without -race under `go test -race` compiles every package again:
// minutes on two busy cores).
func goBuild(args ...string) *exec.Cmd {
	a := []string{"build"}
	if raceBuild {
		a = append(a, "-race")
	}
	return exec.Command("go", append(a, args...)...)
}
