package main

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"

	"frontdoor/balancer"
	"frontdoor/router"
)

// Each subcommand's --help (and -h) prints its usage to stdout and exits 0;
// version --help prints usage, not the version.
func TestSubcommandHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"serve", "--help"}, []string{"Usage: frontdoor serve --config FILE", "-config"}},
		{[]string{"check-config", "--help"}, []string{"Usage: frontdoor check-config --config FILE [--strict]", "-strict"}},
		{[]string{"check-config", "-h"}, []string{"Usage: frontdoor check-config"}},
		{[]string{"demo", "--help"}, []string{"Usage: frontdoor demo", "-listen", "-embedder", "127.0.0.1:8080"}},
		{[]string{"warm", "--help"}, []string{"Usage: frontdoor warm FILE...", "-target", "-temperature number\n"}},
		{[]string{"warm", "hot.txt", "--help"}, []string{"Usage: frontdoor warm FILE..."}},
		{[]string{"cache", "--help"}, []string{"Usage: frontdoor cache export"}},
		{[]string{"cache", "export", "--help"}, []string{"Usage: frontdoor cache export", "-top"}},
		{[]string{"calibrate", "--help"}, []string{"Usage: frontdoor calibrate --pairs FILE", "-max-false"}},
		{[]string{"healthcheck", "--help"}, []string{"Usage: frontdoor healthcheck", "-url"}},
		{[]string{"version", "--help"}, []string{"Usage: frontdoor version"}},
		{[]string{"--help"}, []string{"Usage:", "frontdoor demo"}},
	} {
		var out, errOut bytes.Buffer
		code := run(tc.args, &out, &errOut)
		if code != 0 || errOut.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q", tc.args, code, errOut.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v: %q missing from:\n%s", tc.args, w, out.String())
			}
		}
		if tc.args[0] == "version" && strings.HasPrefix(out.String(), "frontdoor ") {
			t.Errorf("version --help printed the version: %q", out.String())
		}
	}
	// A bad flag is still an error: usage on stderr, exit 2.
	var out, errOut bytes.Buffer
	if code := run([]string{"serve", "--nope"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "Usage: frontdoor serve") || out.Len() != 0 {
		t.Errorf("serve --nope: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}

// The top-level usage lists every flag of demo, and the demo listens on
// loopback unless told otherwise.
func TestUsageShowsDemoFlags(t *testing.T) {
	fs, f := newDemoFlags(io.Discard)
	if f.listen != "127.0.0.1:8080" {
		t.Fatalf("demo --listen defaults to %q, want loopback", f.listen)
	}
	fs.VisitAll(func(fl *flag.Flag) {
		if !strings.Contains(usage, "--"+fl.Name+" ") {
			t.Errorf("the usage does not show demo's --%s", fl.Name)
		}
	})
	if !strings.Contains(usage, "frontdoor COMMAND --help") {
		t.Error("the usage does not say where each command's flags are")
	}
}

// The banner's URLs name the address the demo listens on.
func TestDemoBannerNamesItsAddress(t *testing.T) {
	for addr, want := range map[string]string{"127.0.0.1:8080": "http://127.0.0.1:8080/v1", "[::]:8080": "http://127.0.0.1:8080/v1", "10.1.2.3:9000": "http://10.1.2.3:9000/v1"} {
		cfg := router.Config{Nodes: []balancer.NodeConfig{{URL: "http://a"}, {URL: "http://b"}}}
		if b := banner(addr, "127.0.0.1:8081", cfg, "http://q", "local"); !strings.Contains(b, want) {
			t.Errorf("listening on %s: %q missing from the banner", addr, want)
		}
	}
}

// A mistyped subcommand is refused with exit 2, naming the closest one when
// there is one; warm's usage shows no NaN default for an unset temperature.
func TestUnknownCommandSuggests(t *testing.T) {
	for args, want := range map[string]string{
		"serv":        `unknown command "serv"; did you mean "serve"?`,
		"chek-config": `did you mean "check-config"?`,
		"wram":        `did you mean "warm"?`,
		"xyzzy":       "unknown command \"xyzzy\"\n",
	} {
		var out, errOut bytes.Buffer
		if code := run([]string{args}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), want) {
			t.Errorf("%s: exit %d, stderr %.120q, want %q", args, code, errOut.String(), want)
		}
	}
	var out, errOut bytes.Buffer
	run([]string{"warm", "--help"}, &out, &errOut)
	if strings.Contains(out.String(), "NaN") {
		t.Errorf("warm --help shows a NaN default:\n%s", out.String())
	}
}
