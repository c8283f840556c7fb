package router

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"frontdoor/balancer"
	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
)

// wantMismatch is what a node serving qwen3-8b configured as Qwen/Qwen3-8B
// is told, in the logs, /status, /admin/nodes, the 503 and check-config.
const wantMismatch = `model "Qwen/Qwen3-8B" is configured on gpu-a, but the node serves ["qwen3-8b"] (closest: "qwen3-8b"); fix nodes[0].models`

// checkMismatchShown asserts the mismatch of gpu-a shows everywhere an
// operator looks, and that a request for the model gets a 503 naming it.
func checkMismatchShown(t *testing.T, gw *testGateway) {
	t.Helper()
	logs := gw.Logs.String()
	if !strings.Contains(logs, `"level":"WARN","msg":"node does not serve a configured model`) ||
		!strings.Contains(logs, `"closest":"qwen3-8b"`) || !strings.Contains(logs, `"served":["qwen3-8b"]`) ||
		!strings.Contains(logs, `"configured":["Qwen/Qwen3-8B"]`) {
		t.Errorf("no WARN naming both lists and the closest match:\n%s", logs)
	}
	for _, path := range []string{"/status", "/admin/nodes"} {
		code, body := adminDo(t, http.MethodGet, gw.URL+path, "")
		var nodes []balancer.NodeStatus
		if path == "/status" {
			var st struct{ Nodes []balancer.NodeStatus }
			if err := json.Unmarshal(body, &st); err != nil {
				t.Fatal(err)
			}
			nodes = st.Nodes
		} else if err := json.Unmarshal(body, &nodes); err != nil {
			t.Fatal(err)
		}
		if code != 200 || len(nodes) != 1 || len(nodes[0].ModelMismatch) != 1 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		m := nodes[0].ModelMismatch[0]
		if m.Model != "Qwen/Qwen3-8B" || m.Closest != "qwen3-8b" || m.Message != wantMismatch || m.Routed ||
			strings.Join(nodes[0].ServedModels, ",") != "qwen3-8b" {
			t.Errorf("%s: %+v served %v", path, m, nodes[0].ServedModels)
		}
	}
	_, metrics := adminDo(t, http.MethodGet, gw.URL+"/metrics", "")
	if !strings.Contains(string(metrics), `frontdoor_node_model_mismatch{node="gpu-a",model="Qwen/Qwen3-8B"} 1`) {
		t.Errorf("metric not 1:\n%s", grepLines(string(metrics), "model_mismatch"))
	}
	resp, body := post(t, gw.URL+"/v1/chat/completions", modelBody("Qwen/Qwen3-8B"))
	var e struct {
		Error struct{ Type, Code, Message string }
	}
	_ = json.Unmarshal(body, &e)
	if resp.StatusCode != 503 || e.Error.Type != "service_unavailable" || e.Error.Code != "model_not_served" || e.Error.Message != wantMismatch {
		t.Errorf("request: %d %s", resp.StatusCode, body)
	}
}

func modelBody(model string) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"hello"}]}`
}

// A node whose engine serves qwen3-8b, configured as Qwen/Qwen3-8B: the
// gateway says so at start and answers a clear 503 without sending the
// node anything; restarted with that name, the node serves it again.
func TestModelMismatchGPUSim(t *testing.T) {
	node := testenv.GPUSim(t, nil)
	cfg := testConfig(node)
	cfg.Nodes[0].Models = []string{"Qwen/Qwen3-8B"}
	gw := startGateway(t, cfg)
	probedHealthy(t, gw)
	checkMismatchShown(t, gw)
	if st := node.Stats(); st.Received != 0 {
		t.Errorf("the node saw %d generation requests", st.Received)
	}

	// The node restarts serving the configured name: the next probe
	// brings it back for that model.
	addr := node.Addr()
	if err := node.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	fixed := testenv.GPUSim(t, func(c *sim.Config) { c.Listen, c.Models = addr, []string{"Qwen/Qwen3-8B"} })
	probedHealthy(t, gw)
	resp, body := post(t, gw.URL+"/v1/chat/completions", modelBody("Qwen/Qwen3-8B"))
	if resp.StatusCode != 200 || fixed.Stats().Received != 1 {
		t.Fatalf("after the fix: %d %s", resp.StatusCode, body)
	}
	if st := gw.Pool().Status(); len(st[0].ModelMismatch) != 0 || strings.Join(st[0].ServedModels, ",") != "Qwen/Qwen3-8B" {
		t.Errorf("after the fix: %+v", st[0])
	}
	_, metrics := adminDo(t, http.MethodGet, gw.URL+"/metrics", "")
	if !strings.Contains(string(metrics), `frontdoor_node_model_mismatch{node="gpu-a",model="Qwen/Qwen3-8B"} 0`) {
		t.Errorf("metric not 0:\n%s", grepLines(string(metrics), "model_mismatch"))
	}
	if !strings.Contains(gw.Logs.String(), "node serves its configured model again") {
		t.Errorf("no line for the recovery:\n%s", gw.Logs.String())
	}
}

// Only the mismatched model is taken out: the node keeps serving the
// models it does list, and a model another node serves goes there.
func TestModelMismatchOnlyThatModel(t *testing.T) {
	a := testenv.GPUSim(t, nil)
	b := testenv.GPUSim(t, func(c *sim.Config) { c.Models = []string{"qwen3-8b", "Qwen/Qwen3-8B"} })
	cfg := testConfig(a, b)
	cfg.Nodes[0].Models = []string{"qwen3-8b", "Qwen/Qwen3-8B"}
	cfg.Nodes[1].Models = []string{"Qwen/Qwen3-8B"}
	gw := startGateway(t, cfg)
	probedHealthy(t, gw)
	for range 4 {
		resp, body := post(t, gw.URL+"/v1/chat/completions", modelBody("Qwen/Qwen3-8B"))
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	if a.Stats().Received != 0 || b.Stats().Received != 4 {
		t.Errorf("a got %d, b %d: want 0 and 4", a.Stats().Received, b.Stats().Received)
	}
	resp, body := post(t, gw.URL+"/v1/chat/completions", modelBody("qwen3-8b"))
	if resp.StatusCode != 200 || a.Stats().Received != 1 {
		t.Errorf("the model gpu-a serves: %d %s", resp.StatusCode, body)
	}
}

// The same against llm-d's vLLM simulator, which lists its models as vLLM
// does.
func TestModelMismatchLLMDSim(t *testing.T) {
	url := testenv.LLMDSim(t, "qwen3-8b")
	for _, tc := range []struct {
		model string
		want  int
	}{{"Qwen/Qwen3-8B", 503}, {"qwen3-8b", 200}} {
		cfg := testConfig()
		cfg.Nodes = []balancer.NodeConfig{{Name: "gpu-a", URL: url + "/v1", Kind: "vllm", Models: []string{tc.model}, MaxConcurrency: 5, Weight: 1}}
		gw := startGateway(t, cfg)
		probedHealthy(t, gw)
		if tc.want == 503 {
			checkMismatchShown(t, gw)
			continue
		}
		resp, body := post(t, gw.URL+"/v1/chat/completions", modelBody("qwen3-8b"))
		if resp.StatusCode != 200 || len(gw.Pool().Status()[0].ModelMismatch) != 0 {
			t.Errorf("%s: %d %s", tc.model, resp.StatusCode, body)
		}
	}
}
