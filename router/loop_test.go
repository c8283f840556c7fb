package router

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"frontdoor/adapters"
	"frontdoor/cmd/gpusim/sim"
	"frontdoor/internal/testenv"
)

// The loop engine serves whole inference requests itself, batching its
// socket I/O through io_uring or not, and hands every other connection to
// fasthttp; the fasthttp engine serves everything.
func TestEngineServesHotPathInLoop(t *testing.T) {
	s := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL = 0, 0 })
	for _, tc := range []struct{ engine, ioUring string }{{"loop", "auto"}, {"loop", "off"}, {"fasthttp", "auto"}} {
		engine := tc.engine
		t.Run(engine+" io_uring "+tc.ioUring, func(t *testing.T) {
			cfg := testConfig(s)
			cfg.Server.Engine, cfg.Server.IOUring = engine, tc.ioUring
			gw := startGateway(t, cfg)
			if tc.ioUring == "off" && gw.loop.IOBatching() {
				t.Fatal("io_uring: off, yet the loops batch through it")
			}
			for i := range 3 {
				resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody(fmt.Sprint("hot ", i), ""))
				if resp.StatusCode != 200 || !strings.Contains(string(b), `"chat.completion"`) {
					t.Fatalf("non-streaming: %d %s", resp.StatusCode, b)
				}
			}
			resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("a stream", `"stream":true`))
			if resp.StatusCode != 200 || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
				t.Fatalf("stream: %d %s", resp.StatusCode, b)
			}
			st := getStatus(t, gw.URL)
			loopReqs, handoffs := st.Server.LoopRequests, st.Server.Handoffs
			want := [2]uint64{3, 1}
			if engine == "fasthttp" {
				want = [2]uint64{0, 0}
			}
			if st.Server.Engine != engine || loopReqs != want[0] || handoffs < want[1] || (engine == "fasthttp" && handoffs != 0) {
				t.Fatalf("/status server %+v: want engine %s, %d loop requests and at least %d hand-offs", st.Server, engine, want[0], want[1])
			}
			if engine == "loop" && (st.Server.Loops != adapters.DefaultLoops() || st.Server.IOUring != gw.loop.IOBatching()) {
				t.Fatalf("/status server %+v, loops batching: %v", st.Server, gw.loop.IOBatching())
			}
		})
	}
}

// Clients that leave before their answer never leak a node slot or a
// tenant's concurrency, and the next requests are served: on the loops
// (cache off, exact-only memory cache) and on fasthttp, which serves alone
// when a request's checks may block or take long (semantic cache, Redis).
func TestLoopClientAbortsReleaseEverything(t *testing.T) {
	s := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL, c.OutputTokens = 100*time.Millisecond, 0, 8 })
	for _, tc := range []struct {
		cache    string
		semantic bool
		loops    bool
	}{{"off", false, true}, {"memory", false, true}, {"memory", true, false}, {"redis", false, false}} {
		t.Run(fmt.Sprintf("cache %s semantic %v", tc.cache, tc.semantic), func(t *testing.T) {
			cfg := testConfig(s)
			cfg.Server.Engine = "loop"
			cfg.Cache.Backend, cfg.Cache.Semantic.Enabled = tc.cache, tc.semantic
			if tc.cache == "redis" {
				cfg.Redis.URL = testenv.StartRedis(t).URL()
			}
			cfg.Logging.AccessLog = false
			t.Setenv("TEST_AB_KEYS", "sk-ab")
			cfg.Tenants = []Tenant{{Name: "ab", APIKeysEnv: "TEST_AB_KEYS", MaxConcurrency: 8}}
			gw := startGateway(t, cfg)
			if (gw.loop != nil) != tc.loops {
				t.Fatalf("loops running: %v, want %v", gw.loop != nil, tc.loops)
			}
			addr := strings.TrimPrefix(gw.URL, "http://")
			var wg sync.WaitGroup
			for i := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := net.Dial("tcp", addr)
					if err != nil {
						return
					}
					body := chatBody(fmt.Sprint("leave early ", i), "")
					fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-ab\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
					time.Sleep(time.Duration(i%5) * 10 * time.Millisecond)
					c.Close()
				}()
			}
			wg.Wait()
			testenv.Eventually(t, 5*time.Second, func() bool { return gw.adm.Inflight("ab") == 0 },
				"tenant in-flight stuck at %d after every client left", gw.adm.Inflight("ab"))
			testenv.Eventually(t, 5*time.Second, func() bool { return gw.Pool().Nodes()[0].Inflight() == 0 }, "node in-flight leaked")
			for i := range 10 { // more than the tenant's cap: nothing is held
				resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody(fmt.Sprint("after ", i), ""), "Authorization", "Bearer sk-ab")
				if resp.StatusCode != 200 {
					t.Fatalf("after the aborts: %d %s", resp.StatusCode, b)
				}
			}
		})
	}
}
