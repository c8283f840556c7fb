package router

import (
	"strings"
	"testing"
	"time"

	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
	"frontdoor/internal/units"
)

// verifyGateway is a semantic cache whose hits are all audited by the
// judge model "judge", served by judgeNode (the same node as the chat
// model when nil).
func verifyGateway(t *testing.T, labels string, judgeNode func(*sim.Config), mutate func(*Config)) *testGateway {
	t.Helper()
	l, err := sim.ReadJudgeLabels(strings.NewReader(labels))
	if err != nil {
		t.Fatal(err)
	}
	s := testenv.GPUSim(t, func(c *sim.Config) { c.Models, c.JudgeLabels = []string{"qwen3-8b", "judge"}, l })
	cfg := testConfig(s)
	if judgeNode != nil {
		cfg = testConfig(s, testenv.GPUSim(t, func(c *sim.Config) { c.Models = []string{"judge"}; judgeNode(c) }))
		cfg.Nodes[1].Models = []string{"judge"}
	} else {
		cfg.Nodes[0].Models = []string{"qwen3-8b", "judge"}
	}
	cfg.Cache.Backend = "memory"
	v := &cfg.Cache.Semantic.Verify
	v.JudgeModel, v.AuditRate, v.MaxJudgeRPS, v.Queue = "judge", 1, 100, 16
	if mutate != nil {
		mutate(&cfg)
	}
	return startGateway(t, cfg)
}

// The judge re-checks semantic hits off the request path: /status and the
// metrics estimate the false-hit rate from its verdicts.
func TestVerifyAuditsSemanticHits(t *testing.T) {
	const (
		right, rightAsked = "What is the capital of France?", "what is the capital of france"
		wrong, wrongAsked = "How many moons does Mars have?", "how many moons does mars have"
	)
	// The labels say the first paraphrase is the same question and (for
	// the test's sake) the second is not.
	gw := verifyGateway(t, right+"\t"+rightAsked+"\t1\n"+wrong+"\t"+wrongAsked+"\t0\n", nil, nil)
	askStored(t, gw, cbody(right, ""))
	askStored(t, gw, cbody(wrong, ""))
	for _, q := range []string{rightAsked, wrongAsked} {
		eventuallyHit(t, gw, cbody(q, ""), "hit-semantic")
	}
	var v *struct{ samples, yes, no float64 }
	testenv.Eventually(t, 10*time.Second, func() bool {
		st := gatewayStatus(t, gw)
		if st.Cache == nil || st.Cache.Verify == nil || st.Cache.Verify.FalseHitRate.Samples < 2 {
			return false
		}
		mb := metricsText(t, gw)
		v = &struct{ samples, yes, no float64 }{float64(st.Cache.Verify.FalseHitRate.Samples),
			metricValue(t, mb, `frontdoor_cache_verify_total{kind="audit",verdict="yes"}`),
			metricValue(t, mb, `frontdoor_cache_verify_total{kind="audit",verdict="no"}`)}
		return true
	}, "the judge never judged the two hits")
	st := gatewayStatus(t, gw).Cache.Verify
	r := st.FalseHitRate
	if v.yes != 1 || v.no != 1 || r.Estimate != 0.5 || r.Lower >= 0.5 || r.Upper <= 0.5 || st.State != "ok" {
		t.Fatalf("verdicts yes %v no %v; /status %+v", v.yes, v.no, st)
	}
	if len(st.Scopes) != 1 || st.Scopes[0].Tenant != "default" || st.Scopes[0].Model != "qwen3-8b" || st.Scopes[0].Samples != 2 {
		t.Fatalf("scopes %+v", st.Scopes)
	}
	if metricValue(t, metricsText(t, gw), `frontdoor_cache_false_hit_ratio`) != 0.5 {
		t.Fatal("frontdoor_cache_false_hit_ratio is not 0.5")
	}
}

// A judge that fails, or is too slow, changes nothing for clients: hits
// are served at once, and the failure is loud in /status, the metrics and
// the log.
func TestVerifyJudgeDown(t *testing.T) {
	for name, judge := range map[string]struct {
		node   func(*sim.Config)
		config func(*Config)
	}{
		"failing": {node: func(c *sim.Config) { c.FailRate = 1 }},
		"slow": {node: func(c *sim.Config) { c.TTFT = 3 * time.Second },
			config: func(c *Config) { c.Cache.Semantic.Verify.JudgeTimeout = units.Duration(200 * time.Millisecond) }},
	} {
		t.Run(name, func(t *testing.T) {
			const stored, asked = "What is the capital of France?", "what is the capital of france"
			gw := verifyGateway(t, stored+"\t"+asked+"\t1\n", judge.node, judge.config)
			askStored(t, gw, cbody(stored, ""))
			start := time.Now()
			eventuallyHit(t, gw, cbody(asked, ""), "hit-semantic")
			for range 5 {
				if xc, _, _ := ask(t, gw, cbody(asked, "")); xc != "hit-semantic" {
					t.Fatalf("X-Cache %q with the judge %s", xc, name)
				}
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("hits took %v with the judge %s", d, name)
			}
			testenv.Eventually(t, 10*time.Second, func() bool {
				st := gatewayStatus(t, gw).Cache.Verify
				return st != nil && st.State == "failing" && st.Failures > 0 && st.FalseHitRate.Samples == 0
			}, "the judge does not show as failing in /status: %+v", gatewayStatus(t, gw).Cache.Verify)
			if metricValue(t, metricsText(t, gw), `frontdoor_cache_verify_total{kind="audit",verdict="error"}`) < 1 {
				t.Fatal("judge errors are not counted")
			}
			if !strings.Contains(gw.Logs.String(), `"msg":"cache verify: the judge failed; the audit is lost"`) {
				t.Fatalf("no WARN for the judge:\n%s", gw.Logs.String())
			}
		})
	}
}

// An entry judged wrong for a question is not served again to it; a miss
// whose best candidate lies in the grey zone is judged too.
func TestVerifyRemembersWrongEntriesAndJudgesNearMisses(t *testing.T) {
	const stored, asked = "What is the capital of France?", "what is the capital of france"
	gw := verifyGateway(t, stored+"\t"+asked+"\t0\n", nil, nil)
	askStored(t, gw, cbody(stored, ""))
	eventuallyHit(t, gw, cbody(asked, ""), "hit-semantic")
	testenv.Eventually(t, 10*time.Second, func() bool {
		return gatewayStatus(t, gw).Cache.Verify.FalseHitRate.Samples == 1
	}, "the hit was never judged")
	if xc, _, _ := ask(t, gw, cbody(asked, "")); xc != "miss" {
		t.Fatalf("an entry judged wrong was served again: X-Cache %q", xc)
	}

	// "what's the capital of france" is about 0.78 from the stored question
	// with the local embedder: a miss at 0.85, within a grey zone of 0.2.
	const reworded = "what's the capital of france"
	near := verifyGateway(t, stored+"\t"+reworded+"\t1\n", nil, func(c *Config) {
		c.Cache.Semantic.Threshold, c.Cache.Semantic.Verify.GreyZone = 0.85, 0.2
	})
	c := near.Config()
	c.Cache.Semantic.Verify.GreyZone = 0.1
	if err := near.Reload(c); err == nil {
		t.Fatal("a reload that changes cache.semantic.verify must need a restart")
	}
	askStored(t, near, cbody(stored, ""))
	if xc, _, _ := ask(t, near, cbody(reworded, "")); xc != "miss" {
		t.Fatalf("X-Cache %q below the threshold", xc)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		return metricValue(t, metricsText(t, near), `frontdoor_cache_verify_total{kind="near_miss",verdict="yes"}`) == 1
	}, "the near-miss was never judged")
	if st := gatewayStatus(t, near).Cache.Verify; st.FalseHitRate.Samples != 0 || len(st.Thresholds) != 1 || st.Thresholds[0].Samples != 1 {
		t.Fatalf("a near-miss is evidence, not a served hit: %+v", st)
	}
}

// Replicas on one Redis learn together: an entry one replica's judge
// found wrong is refused on the other, which audits nothing itself, and
// the threshold one set is the other's.
func TestVerifySharedThroughRedis(t *testing.T) {
	const stored, asked = "What is the capital of France?", "what is the capital of france"
	r := testenv.StartRedis(t)
	replica := func(auditRate float64) *testGateway {
		return verifyGateway(t, stored+"\t"+asked+"\t0\n", nil, func(c *Config) {
			c.Cache.Backend, c.Cache.VectorSearch, c.Redis.URL = "redis", "local", r.URL()
			c.Cache.Semantic.Verify.AuditRate = auditRate
			c.Cache.Semantic.Verify.TargetFalseHitRate = 0.5
		})
	}
	a, b := replica(1), replica(0)
	askStored(t, a, cbody(stored, ""))
	eventuallyHit(t, b, cbody(stored, ""), "hit-exact") // b sees a's entry
	eventuallyHit(t, a, cbody(asked, ""), "hit-semantic")
	testenv.Eventually(t, 10*time.Second, func() bool {
		return gatewayStatus(t, a).Cache.Verify.FalseHitRate.Samples == 1
	}, "a's judge never judged the hit")
	testenv.Eventually(t, 10*time.Second, func() bool {
		st := gatewayStatus(t, b).Cache.Verify
		return len(st.Thresholds) == 1 && st.Thresholds[0].Threshold == a.Config().Cache.Semantic.Threshold
	}, "b never read the shared threshold: %+v", gatewayStatus(t, b).Cache.Verify.Thresholds)
	if xc, _, _ := ask(t, b, cbody(asked, "")); xc != "miss" {
		t.Fatalf("b served an entry a's judge found wrong: X-Cache %q", xc)
	}
	if st := gatewayStatus(t, b).Cache.Verify; st.Calls != 0 {
		t.Fatalf("b called the judge %d times; the verdict was a's", st.Calls)
	}
}
