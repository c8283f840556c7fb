package router

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// WarmResult counts what a warm-up did.
type WarmResult struct {
	Sent, Stored, Hits, Failed int64
}

// warmToken authenticates the gateway's own warm-up requests, which may name
// their tenant in X-Frontdoor-Tenant. It is random per process and never
// leaves it.
var warmToken = func() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// Warm replays the hot prompts of the warm.files through the gateway at
// addr (host:port), so that their answers are in the cache before real
// traffic asks. Each file is JSON Lines: a chat-completion request per
// line, or {"tenant": "acme", "request": {...}} to warm a tenant's
// namespace. Blank lines and lines starting with # are skipped.
func (g *Gateway) Warm(ctx context.Context, addr string) (WarmResult, error) {
	var res WarmResult
	type item struct {
		tenant string
		body   []byte
	}
	var items []item
	for _, path := range g.conf().Warm.Files {
		data, err := os.ReadFile(path)
		if err != nil {
			return res, fmt.Errorf("warm: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for line := 1; sc.Scan(); line++ {
			b := bytes.TrimSpace(sc.Bytes())
			if len(b) == 0 || b[0] == '#' {
				continue
			}
			v, err := fastjson.ParseBytes(b)
			if err != nil {
				return res, fmt.Errorf("warm: %s:%d: %w", path, line, err)
			}
			it := item{body: append([]byte(nil), b...)}
			if r := v.Get("request"); r != nil {
				it.tenant, it.body = string(v.GetStringBytes("tenant")), r.MarshalTo(nil)
			}
			items = append(items, it)
		}
	}
	client := &fasthttp.HostClient{Addr: addr, MaxConns: g.conf().Warm.Concurrency}
	work := make(chan item)
	var wg sync.WaitGroup
	for w := 0; w < g.conf().Warm.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			for it := range work {
				req.Reset()
				req.SetRequestURI("http://" + addr + "/v1/chat/completions")
				req.Header.SetMethod(fasthttp.MethodPost)
				req.Header.SetContentType("application/json")
				req.Header.Set("X-Frontdoor-Warm", warmToken)
				if it.tenant != "" {
					req.Header.Set("X-Frontdoor-Tenant", it.tenant)
				}
				req.SetBody(it.body)
				atomic.AddInt64(&res.Sent, 1)
				if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
					atomic.AddInt64(&res.Failed, 1)
					continue
				}
				switch string(resp.Header.Peek("X-Cache")) {
				case cacheMiss:
					atomic.AddInt64(&res.Stored, 1)
				case cacheHitExact, cacheHitSemantic:
					atomic.AddInt64(&res.Hits, 1)
				}
			}
		}()
	}
	for _, it := range items {
		select {
		case work <- it:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	return res, ctx.Err()
}
