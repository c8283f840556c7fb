package testenv

import (
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// LLMDSim starts llm-d's vLLM simulator (an upstream frontdoor's authors
// did not write) serving model on a free loopback port, with args added
// to its command line, and returns its base URL. The binary is the path in
// FRONTDOOR_LLMD_SIM, else shared/peers/llm-d-inference-sim beside the
// repository; without it the test is skipped, saying so. The simulator is
// killed by t.Cleanup.
func LLMDSim(t testing.TB, model string, args ...string) string {
	t.Helper()
	bin := os.Getenv("FRONTDOOR_LLMD_SIM")
	if bin == "" {
		p, ok := findUp("shared/peers/llm-d-inference-sim/llm-d-inference-sim")
		if !ok {
			t.Skip("llm-d-inference-sim not found (set FRONTDOOR_LLMD_SIM or put shared/peers/llm-d-inference-sim beside the repository): the check against an outside vLLM simulator is skipped")
		}
		bin = p
	}
	port := FreePort(t)
	// It listens on every interface and has no bind flag: it is only ever
	// spoken to on 127.0.0.1.
	cmd := exec.Command(bin, append([]string{"--model", model, "--port", strconv.Itoa(port), "--force-dummy-tokenizer"}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("llm-d-inference-sim: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	client := &http.Client{Timeout: time.Second}
	Eventually(t, 15*time.Second, func() bool {
		resp, err := client.Get(url + "/v1/models")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == 200
	}, "llm-d-inference-sim on port %d never answered /v1/models", port)
	return url
}
