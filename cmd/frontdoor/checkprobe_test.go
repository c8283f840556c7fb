package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"frontdoor/internal/testenv"
)

// check-config --probe asks each node which models its engine serves: a
// node serving qwen3-8b configured as Qwen/Qwen3-8B fails it with the text
// serve's 503 carries; configured right, it passes.
func TestCheckConfigProbeModels(t *testing.T) {
	node := testenv.GPUSim(t, nil)
	dir := t.TempDir()
	for _, tc := range []struct {
		model, want string
		code        int
	}{
		{"Qwen/Qwen3-8B", `model "Qwen/Qwen3-8B" is configured on gpu-a, but the node serves ["qwen3-8b"] (closest: "qwen3-8b"); fix nodes[0].models`, 1},
		{"qwen3-8b", ": ok (1 node, 0 tenants, cache off, admission local, nodes probed)", 0},
	} {
		path := filepath.Join(dir, "c.yaml")
		body := "listen: 127.0.0.1:0\ncache: {backend: \"off\"}\nnodes:\n  - {name: gpu-a, url: " + node.URL() + "/v1, models: [\"" + tc.model + "\"]}\n"
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		code := run([]string{"check-config", "--probe", "--config", path}, &out, &errOut)
		if code != tc.code || !strings.Contains(out.String()+errOut.String(), tc.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.model, code, out.String(), errOut.String(), tc.code, tc.want)
		}
		// Without --probe nothing is reached: the config itself is fine.
		out.Reset()
		errOut.Reset()
		if code := run([]string{"check-config", "--config", path}, &out, &errOut); code != 0 {
			t.Errorf("%s without --probe: exit %d, %s", tc.model, code, errOut.String())
		}
	}
	if st := node.Stats(); st.Received != 0 {
		t.Errorf("the node got %d generation requests", st.Received)
	}
}

// A node that does not answer fails --probe, naming it.
func TestCheckConfigProbeUnreachable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	body := "listen: 127.0.0.1:0\ncache: {backend: \"off\"}\nnodes:\n  - {name: gpu-a, url: \"http://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) + "/v1\", models: [m]}\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"check-config", "--probe", "--config", path}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "gpu-a: health probe failed: GET http://127.0.0.1:") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}
