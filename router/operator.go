package router

import (
	"context"
	"errors"

	"github.com/valyala/fasthttp"

	"frontdoor/balancer"
	"frontdoor/internal/warm"
	"frontdoor/router/admin"
)

// operator is the gateway as its operator surface (package admin) sees it.
type operator struct{ g *Gateway }

var _ admin.Gateway = operator{}

// handleAdminListener serves the admin listener: every route of the main
// listener, each request trusted as if it carried the admin token, once
// admin.BrowserOrigin has passed it. Framing and trailers are refused
// first, so that BrowserOrigin reads no trailer field.
func (g *Gateway) handleAdminListener(ctx *fasthttp.RequestCtx) {
	if g.refuseFraming(ctx) {
		return
	}
	if e := admin.BrowserOrigin(ctx); e != nil {
		g.refuse(ctx, requestID(ctx), refusedOrigin, e)
		return
	}
	admin.MarkListener(ctx)
	g.handle(ctx)
}

func (o operator) Reload() admin.ReloadResult {
	err := o.g.ReloadFile("admin")
	r := admin.ReloadResult{Err: err, NoConfig: errors.Is(err, ErrNoConfigFile)}
	var ce *ConfigError
	var re *RestartError
	switch {
	case errors.As(err, &ce):
		r.Problems = ce.Problems
	case errors.As(err, &re):
		r.Restart = re.Keys
	}
	return r
}

func (o operator) Import(ctx context.Context, in warm.ImportRequest) (warm.ImportResponse, error) {
	return o.g.ImportAnswer(ctx, in)
}

func (o operator) Pool() *balancer.Pool { return o.g.pool }

func (o operator) Cache() admin.CacheOps {
	if !o.g.cache.On() {
		return nil
	}
	return o.g.cache
}

func (o operator) Hot(top int, tenant string) []admin.HotEntry {
	return o.g.cache.Hot(top, tenant)
}

func (o operator) StartWarm(source, tag string, items []warm.Item) (*warm.Job, error) {
	addr := o.g.addr.Load()
	if addr == nil {
		return nil, admin.ErrNotServing
	}
	return o.g.startWarm(source, tag, *addr, items), nil
}

func (o operator) WarmJob(id string) *warm.Job { return o.g.warms.Get(id) }

// QuestionsShown: admin answers may hold cached questions and answers (an
// entry, the hot list) only when the operator said so.
func (o operator) QuestionsShown() bool {
	c := o.g.conf()
	return c.Logging.LogPrompts || c.Admin.ShowCachedQuestions
}
