package router

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"frontdoor/balancer"
)

// embeddingsNode is a scripted node serving the embedding model m: it
// answers each request of n inputs with answer(n), or with good vectors of
// 3 dimensions while good is set, and counts the inputs it was sent.
type embeddingsNode struct {
	*httptest.Server
	good   atomic.Bool
	inputs atomic.Int64
}

// goodVector is the scripted node's vector, as its answers write it.
const goodVector = `[0.5,0.25,0.125]`

func startEmbeddingsNode(t *testing.T, answer func(n int) string) *embeddingsNode {
	t.Helper()
	node := &embeddingsNode{}
	node.good.Store(true)
	node.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/embeddings" { // health probes, model lists
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
			return
		}
		var req struct {
			Input json.RawMessage `json:"input"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &req)
		n := 1
		var list []json.RawMessage
		if json.Unmarshal(req.Input, &list) == nil {
			n = len(list)
		}
		node.inputs.Add(int64(n))
		w.Header().Set("Content-Type", "application/json")
		if node.good.Load() {
			_, _ = io.WriteString(w, embeddingsItems(n, func(int) string { return goodVector }))
			return
		}
		_, _ = io.WriteString(w, answer(n))
	}))
	t.Cleanup(node.Close)
	return node
}

// embeddingsItems is an embeddings answer of n items, indexes 0 to n-1,
// item i's embedding vec(i). Its model name marks the node's bytes.
func embeddingsItems(n int, vec func(i int) string) string {
	items := make([]string, n)
	for i := range items {
		items[i] = `{"object":"embedding","index":` + strconv.Itoa(i) + `,"embedding":` + vec(i) + `}`
	}
	return `{"object":"list","data":[` + strings.Join(items, ",") + `],"model":"node-bytes-marker","usage":{"prompt_tokens":1,"total_tokens":1}}`
}

// badEmbeddingsAnswers are node answers to a batch of n inputs that are no
// embeddings answer for it.
var badEmbeddingsAnswers = []struct {
	name   string
	answer func(n int) string
}{
	{"NaN", func(n int) string { return embeddingsItems(n, func(int) string { return `[NaN,0.25,0.125]` }) }},
	{"Infinity", func(n int) string { return embeddingsItems(n, func(int) string { return `[0.5,Infinity,0.125]` }) }},
	{"-inf", func(n int) string { return embeddingsItems(n, func(int) string { return `[0.5,0.25,-inf]` }) }},
	{"1e39 past float32", func(n int) string { return embeddingsItems(n, func(int) string { return `[0.5,1e39,0.125]` }) }},
	{"NaN in base64", func(n int) string {
		nan := make([]byte, 12)
		binary.LittleEndian.PutUint32(nan, math.Float32bits(float32(math.NaN())))
		return embeddingsItems(n, func(int) string { return `"` + base64.StdEncoding.EncodeToString(nan) + `"` })
	}},
	{"a short vector among full ones", func(n int) string {
		return embeddingsItems(n, func(i int) string {
			if i == n-1 {
				return `[0.5,0.25]`
			}
			return goodVector
		})
	}},
	{"fewer items", func(n int) string { return embeddingsItems(n-1, func(int) string { return goodVector }) }},
	{"extra items", func(n int) string { return embeddingsItems(n+1, func(int) string { return goodVector }) }},
	{"a duplicate index", func(n int) string {
		return strings.Replace(embeddingsItems(n+1, func(int) string { return goodVector }), `"index":`+strconv.Itoa(n), `"index":0`, 1)
	}},
	{"data twice, the last short", func(n int) string {
		return strings.Replace(embeddingsItems(n, func(int) string { return goodVector }), `"model":`, `"data":[],"model":`, 1)
	}},
}

// embeddingsNodeGateway is a gateway in front of node alone (model m), the
// cache in memory, no retries, a breaker that stays closed.
func embeddingsNodeGateway(t *testing.T, nodes ...*embeddingsNode) *testGateway {
	t.Helper()
	cfg := testConfig()
	for i, n := range nodes {
		cfg.Nodes = append(cfg.Nodes, balancer.NodeConfig{Name: "emb-" + string(rune('a'+i)), URL: n.URL, Kind: "openai",
			Models: []string{"m"}, MaxConcurrency: 4, Weight: float64(len(nodes) - i)})
	}
	cfg.Cache.Backend = "memory"
	cfg.Balancer.Retries = len(nodes) - 1
	cfg.Balancer.Breaker.Failures = 1000
	return startGateway(t, cfg)
}

// Issue 45, findings 3 and 5: a node's embeddings answer holding NaN, an
// infinity or a number past float32 (in numbers or base64), vectors of
// mixed lengths, or missing, extra or repeated items is a 502
// upstream_error that never quotes the node, on a whole-batch miss and on
// a partly cached batch alike; nothing of it is cached (the same request
// goes to the node again), and each is counted as a bad answer.
func TestEmbeddingsInvalidAnswersAre502(t *testing.T) {
	for _, tc := range badEmbeddingsAnswers {
		t.Run(tc.name, func(t *testing.T) {
			node := startEmbeddingsNode(t, tc.answer)
			gw := embeddingsNodeGateway(t, node)
			if xc, _ := embedVia(t, gw.URL, `{"model":"m","input":["kept"]}`); xc != "miss" {
				t.Fatalf("the cached input: X-Cache %q", xc)
			}
			waitEntries(t, gw, 1)
			node.good.Store(false)

			for _, batch := range []struct{ name, body, xcache string }{
				{"whole batch", `{"model":"m","input":["p","q"]}`, "miss"},
				{"partial batch", `{"model":"m","input":["kept","fresh"]}`, "partial"},
			} {
				for try := range 2 { // the second: nothing was cached
					probedHealthy(t, gw) // a failure on an idle node marks it down
					before := node.inputs.Load()
					resp, b := post(t, gw.URL+"/v1/embeddings", batch.body)
					var env struct {
						Error struct{ Type, Message string }
					}
					if resp.StatusCode != 502 || json.Unmarshal(b, &env) != nil || env.Error.Type != "upstream_error" ||
						strings.Contains(string(b), "node-bytes-marker") {
						t.Fatalf("%s, try %d: %d %s, want a 502 upstream_error not quoting the node", batch.name, try, resp.StatusCode, b)
					}
					if xc := resp.Header.Get("X-Cache"); xc != batch.xcache || node.inputs.Load() == before {
						t.Fatalf("%s, try %d: X-Cache %q, node sent %d inputs: want %s, sent to the node", batch.name, try, xc, node.inputs.Load()-before, batch.xcache)
					}
				}
			}
			m := metricsText(t, gw)
			if bad := metricValue(t, m, `frontdoor_upstream_bad_answers_total{reason="invalid_embeddings"}`) +
				metricValue(t, m, `frontdoor_upstream_bad_answers_total{reason="malformed"}`); bad != 4 {
				t.Errorf("bad answers counted: %v, want 4", bad)
			}
			time.Sleep(100 * time.Millisecond) // a write-back would have landed by now
			if st, _ := gw.cache.Store().Stats(context.Background()); st.Entries != 1 {
				t.Errorf("%d entries stored, want the good one only", st.Entries)
			}
		})
	}
}

// A node's invalid embeddings answer fails its attempt as any malformed
// answer does: the next node answers (counted as a retry), and the bad
// answer as a bad one. An answer whose vectors are not as long as the
// cached ones it would join is a 502 at once: every node would answer so.
func TestEmbeddingsInvalidAnswerRetried(t *testing.T) {
	bad := startEmbeddingsNode(t, badEmbeddingsAnswers[0].answer)
	bad.good.Store(false)
	good := startEmbeddingsNode(t, nil)
	gw := embeddingsNodeGateway(t, bad, good)
	resp, b := post(t, gw.URL+"/v1/embeddings", `{"model":"m","input":["a","b"]}`)
	if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "emb-b" || bad.inputs.Load() == 0 {
		t.Fatalf("%d from %q (the bad node sent %d inputs): %s", resp.StatusCode, resp.Header.Get("X-Upstream"), bad.inputs.Load(), b)
	}
	m := metricsText(t, gw)
	if metricValue(t, m, `frontdoor_retries_total{reason="malformed"}`) != 1 ||
		metricValue(t, m, `frontdoor_upstream_bad_answers_total{reason="invalid_embeddings"}`) != 1 {
		t.Errorf("retries %v, bad answers %v, want 1 and 1", metricValue(t, m, `frontdoor_retries_total{reason="malformed"}`),
			metricValue(t, m, `frontdoor_upstream_bad_answers_total{reason="invalid_embeddings"}`))
	}

	// Two nodes that answer 2 dimensions where the cache holds 3 for "a":
	// one attempt, a 502, nothing stored.
	short := func(n int) string { return embeddingsItems(n, func(int) string { return `[0.5,0.25]` }) }
	n1, n2 := startEmbeddingsNode(t, short), startEmbeddingsNode(t, short)
	gw = embeddingsNodeGateway(t, n1, n2)
	embedVia(t, gw.URL, `{"model":"m","input":["a"]}`)
	waitEntries(t, gw, 1)
	n1.good.Store(false)
	n2.good.Store(false)
	probedHealthy(t, gw)
	resp, b = post(t, gw.URL+"/v1/embeddings", `{"model":"m","input":["a","c"]}`)
	if resp.StatusCode != 502 || !strings.Contains(string(b), "2 dimensions, the cache holds 3") || n1.inputs.Load()+n2.inputs.Load() != 2 {
		t.Fatalf("vectors of another length than the cached: %d %s, inputs sent %d and %d, want a 502 after one attempt",
			resp.StatusCode, b, n1.inputs.Load(), n2.inputs.Load())
	}
	m = metricsText(t, gw)
	if metricValue(t, m, `frontdoor_retries_total{reason="malformed"}`) != 0 ||
		metricValue(t, m, `frontdoor_upstream_bad_answers_total{reason="invalid_embeddings"}`) != 1 {
		t.Errorf("retried, or not counted")
	}
	time.Sleep(100 * time.Millisecond)
	if st, _ := gw.cache.Store().Stats(context.Background()); st.Entries != 1 {
		t.Errorf("%d entries stored, want 1", st.Entries)
	}
}
