package router

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
	"frontdoor/internal/units"
)

// verifyGateway is a semantic cache whose hits are all audited by the
// judge model "judge", served by judgeNode (the same node as the chat
// model when nil).
func verifyGateway(t *testing.T, labels string, judgeNode func(*sim.Config), mutate func(*Config)) *testGateway {
	t.Helper()
	return verifyGatewayNodes(t, labels, nil, judgeNode, mutate)
}

// verifyGatewayNodes is verifyGateway with the chat node's simulator
// shaped by chatNode.
func verifyGatewayNodes(t *testing.T, labels string, chatNode, judgeNode func(*sim.Config), mutate func(*Config)) *testGateway {
	t.Helper()
	l, err := sim.ReadJudgeLabels(strings.NewReader(labels))
	if err != nil {
		t.Fatal(err)
	}
	s := testenv.GPUSim(t, func(c *sim.Config) {
		c.Models, c.JudgeLabels = []string{"qwen3-8b", "judge"}, l
		if chatNode != nil {
			chatNode(c)
		}
	})
	cfg := testConfig(s)
	if judgeNode != nil {
		cfg = testConfig(s, testenv.GPUSim(t, func(c *sim.Config) { c.Models, c.JudgeLabels = []string{"judge"}, l; judgeNode(c) }))
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
	// The candidate was stored by a client's request, not curated: the
	// question keeps its own answer (TestVerifyPromotes... for curated ones).
	if st := gatewayStatus(t, near).Cache.Verify; st.Promoted != 0 {
		t.Fatalf("a near-miss on a client's entry was promoted: %+v", st)
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

// A near-miss the judge approves against a curated entry (imported) is
// stored with the curated answer: the question is answered from the vetted
// text from then on, whether its own answer was written back before the
// verdict (slow judge) or after it (slow node). The promoted entry is not
// curated; its via names the imported entry. A near-miss on an entry a
// client's request stored is only evidence
// (TestVerifyRemembersWrongEntriesAndJudgesNearMisses); a lookup-only one
// is never promoted (TestVerifyLookupOnlyNearMissNeverPromotes).
func TestVerifyPromotesApprovedNearMissesToCuratedAnswers(t *testing.T) {
	// "what's the capital of france" is about 0.78 from the stored question
	// with the local embedder: a miss at 0.85, within a grey zone of 0.2.
	const stored, reworded = "What is the capital of France?", "what's the capital of france"
	const vetted = "Paris (answer reviewed by the support team)."
	slow := func(c *sim.Config) { c.TTFT = 400 * time.Millisecond }
	near := func(c *Config) { c.Cache.Semantic.Threshold, c.Cache.Semantic.Verify.GreyZone = 0.85, 0.2 }
	imp, _ := json.Marshal(map[string]any{"request": json.RawMessage(cbody(stored, "")), "answer": vetted, "tag": "faq"})
	for name, tc := range map[string]struct {
		chatNode, judgeNode func(*sim.Config)
	}{
		"judge after the write-back":  {judgeNode: slow},
		"judge before the write-back": {chatNode: slow, judgeNode: func(*sim.Config) {}},
	} {
		t.Run(name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, backend string) {
				gw := verifyGatewayNodes(t, stored+"\t"+reworded+"\t1\n", tc.chatNode, tc.judgeNode, func(c *Config) {
					near(c)
					switch backend {
					case "redis":
						c.Cache.Backend, c.Cache.VectorSearch, c.Redis.URL = "redis", "local", testenv.StartRedis(t).URL()
					case "redisearch":
						c.Cache.Backend, c.Cache.VectorSearch, c.Redis.URL = "redis", "redisearch", testenv.StartRediSearch(t).URL()
					}
				})
				curatedID := importCurated(t, gw, string(imp))
				if xc, _, _ := ask(t, gw, cbody(reworded, "")); xc != "miss" {
					t.Fatalf("the near-miss: X-Cache %q", xc)
				}
				testenv.Eventually(t, 10*time.Second, func() bool {
					return gatewayStatus(t, gw).Cache.Verify.Promoted == 1
				}, "the approved near-miss was never promoted: %+v", gatewayStatus(t, gw).Cache.Verify)
				time.Sleep(100 * time.Millisecond) // a late write-back would land here
				for _, h := range [][]string{nil, {"X-Cache-Only", "1"}} {
					xc, resp, b := ask(t, gw, cbody(reworded, ""), h...)
					if xc != "hit-exact" || chatContent(t, b) != vetted {
						t.Fatalf("after the promotion: X-Cache %q, answer %q (entry %s)", xc, chatContent(t, b), resp.Header.Get("X-Cache-Entry"))
					}
				}
				_, resp, _ := ask(t, gw, cbody(reworded, ""))
				if code, b := adminDo(t, "GET", gw.URL+"/admin/cache/entries/"+resp.Header.Get("X-Cache-Entry"), ""); code != 200 ||
					strings.Contains(string(b), `"curated"`) || !strings.Contains(string(b), `"via":"`+curatedID+`"`) {
					t.Fatalf("the promoted entry's view (via %s): %d %s", curatedID, code, b)
				}
				if metricValue(t, metricsText(t, gw), `frontdoor_cache_verify_promoted_total`) != 1 {
					t.Fatal("frontdoor_cache_verify_promoted_total is not 1")
				}
				// The promoted entry carries the curated entry's tag: purging the
				// tag removes both.
				if code, b := adminDo(t, "DELETE", gw.URL+"/admin/cache?tag=faq", ""); code != 200 || !strings.Contains(string(b), `"deleted":2`) {
					t.Fatalf("purge of the curated tag: %d %s", code, b)
				}
			})
		})
	}
}

// A verdict shows in /status with its evidence or not at all: while its
// shared write waits on a stalled Redis, the false-hit rate does not count
// it ahead of the thresholds.
func TestVerifyVerdictShowsWithItsEvidence(t *testing.T) {
	const stored, asked = "What is the capital of France?", "what is the capital of france"
	r := testenv.StartRedis(t)
	gw := verifyGateway(t, stored+"\t"+asked+"\t0\n", func(c *sim.Config) { c.TTFT = 500 * time.Millisecond }, func(c *Config) {
		c.Cache.Backend, c.Cache.VectorSearch, c.Redis.URL = "redis", "local", r.URL()
	})
	askStored(t, gw, cbody(stored, ""))
	eventuallyHit(t, gw, cbody(asked, ""), "hit-semantic") // the judge answers 500 ms later
	rc := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rc.Close()
	if err := rc.Do(context.Background(), "CLIENT", "PAUSE", "2500", "WRITE").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st := gatewayStatus(t, gw).Cache.Verify
		if st.FalseHitRate.Samples == 1 {
			if len(st.Thresholds) != 1 || st.Thresholds[0].Samples != 1 {
				t.Fatalf("the false-hit rate counts the verdict, the thresholds do not: %+v", st.Thresholds)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the verdict never showed: %+v", st)
		}
	}
}

// When Redis fails, a replica learns alone: the verdict still counts here
// (the false-hit rate, the entry judged wrong, the threshold), the failure
// is counted and logged, and clients are answered (the cache bypassed).
func TestVerifySharedRedisDown(t *testing.T) {
	const stored, asked = "What is the capital of France?", "what is the capital of france"
	r := testenv.StartRedis(t)
	gw := verifyGateway(t, stored+"\t"+asked+"\t0\n", func(c *sim.Config) { c.TTFT = 500 * time.Millisecond }, func(c *Config) {
		c.Cache.Backend, c.Cache.VectorSearch, c.Redis.URL = "redis", "local", r.URL()
		c.Cache.Semantic.Verify.TargetFalseHitRate = 0.5
	})
	askStored(t, gw, cbody(stored, ""))
	eventuallyHit(t, gw, cbody(asked, ""), "hit-semantic") // the judge takes 500 ms to say no
	r.Kill()
	testenv.Eventually(t, 10*time.Second, func() bool {
		return gatewayStatus(t, gw).Cache.Verify.FalseHitRate.Samples == 1
	}, "the verdict was lost with Redis: %+v", gatewayStatus(t, gw).Cache.Verify)
	if st := gatewayStatus(t, gw).Cache.Verify; len(st.Thresholds) != 1 || st.Thresholds[0].Samples != 1 {
		t.Fatalf("the local evidence lacks the verdict: %+v", st.Thresholds)
	}
	if metricValue(t, metricsText(t, gw), `frontdoor_cache_errors_total{op="verify_shared"}`) < 1 {
		t.Fatal("the failed shared write is not counted")
	}
	if !strings.Contains(gw.Logs.String(), "cache verify: the shared evidence in Redis is unavailable; this replica learns alone") {
		t.Fatalf("no WARN for the shared evidence:\n%s", gw.Logs.String())
	}
	for _, q := range []string{stored, asked} {
		if resp, b := post(t, gw.URL+"/v1/chat/completions", cbody(q, "")); resp.StatusCode != 200 {
			t.Fatalf("with Redis down: %d %s", resp.StatusCode, b)
		}
	}
}
