package router

import (
	"strings"
	"testing"
	"time"

	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
)

// The judge's calls go the way a client's do: a node that fails is
// retried on another one serving the judge model, and when none answers,
// spill-over takes the call if cache.semantic.verify.spillover allows it.
// Neither is a client's outcome: /status counts no judge call as local or
// spilled.
func TestJudgeRetriesAndSpills(t *testing.T) {
	const stored, asked = "What is the capital of France?", "what is the capital of france"
	labels, err := sim.ReadJudgeLabels(strings.NewReader(stored + "\t" + asked + "\t1\n"))
	if err != nil {
		t.Fatal(err)
	}
	judge := func(fail float64) *sim.Server {
		return testenv.GPUSim(t, func(c *sim.Config) { c.Models, c.JudgeLabels, c.FailRate = []string{"judge"}, labels, fail })
	}
	for name, tc := range map[string]struct {
		failing bool // the second judge node fails too: only spill-over answers
		spill   bool
	}{
		"retried on another node": {},
		"spilled over":            {failing: true, spill: true},
	} {
		t.Run(name, func(t *testing.T) {
			second := 0.0
			if tc.failing {
				second = 1
			}
			failing := judge(1)
			cfg := testConfig(testenv.GPUSim(t, nil), failing, judge(second))
			cfg.Nodes[1].Models, cfg.Nodes[2].Models = []string{"judge"}, []string{"judge"}
			cfg.Balancer.Retries = 1
			cfg.Balancer.Policy = "round_robin" // the judge's first call goes to the failing node
			cfg.Cache.Backend = "memory"
			v := &cfg.Cache.Semantic.Verify
			v.JudgeModel, v.AuditRate, v.MaxJudgeRPS, v.Queue = "judge", 1, 100, 16
			if tc.spill {
				spillConfig(t, &cfg, dashSim(t, func(c *sim.Config) { c.Models, c.JudgeLabels = []string{"qwen-plus", "judge"}, labels }))
				v.Spillover = true
			}
			gw := startGateway(t, cfg)
			askStored(t, gw, cbody(stored, ""))
			eventuallyHit(t, gw, cbody(asked, ""), "hit-semantic")
			testenv.Eventually(t, 10*time.Second, func() bool {
				st := gatewayStatus(t, gw).Cache.Verify
				return st != nil && st.FalseHitRate.Samples > 0
			}, "the judge never judged the hit: %+v", gatewayStatus(t, gw).Cache.Verify)
			st := gatewayStatus(t, gw)
			if v := st.Cache.Verify; v.Failures != 0 || v.State != "ok" {
				t.Fatalf("the judge failed: %+v", v)
			}
			if metricValue(t, metricsText(t, gw), `frontdoor_cache_verify_total{kind="audit",verdict="yes"}`) < 1 {
				t.Fatal("the verdict is not counted")
			}
			if failing.Stats().Received == 0 || metricValue(t, metricsText(t, gw), `frontdoor_retries_total{reason="status_5xx"}`) < 1 {
				t.Fatalf("the failing judge node got %d calls: the retry was not exercised", failing.Stats().Received)
			}
			if st.Outcomes["local"] != 1 || st.Outcomes["spilled"] != 0 {
				t.Fatalf("outcomes %v: the judge's calls are counted as clients'", st.Outcomes)
			}
		})
	}
}
