package router

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/balancer"
	"frontdoor/cache"
)

// serveAdmin routes /admin/*. Every route needs the admin token or an
// allowed client address.
func (g *Gateway) serveAdmin(ctx *fasthttp.RequestCtx) {
	if !g.rt.Load().admin.allow(ctx, g.writeError) {
		return
	}
	path := string(ctx.Path())
	switch {
	case path == "/admin/cache/stats":
		if g.onlyMethod(ctx, fasthttp.MethodGet) {
			g.adminCacheStats(ctx)
		}
	case strings.HasPrefix(path, "/admin/cache/entries/"):
		if g.onlyMethod(ctx, fasthttp.MethodDelete) {
			g.adminDeleteEntry(ctx, strings.TrimPrefix(path, "/admin/cache/entries/"))
		}
	case path == "/admin/nodes":
		if g.onlyMethod(ctx, fasthttp.MethodGet) {
			writeJSON(ctx, 200, g.pool.Status())
		}
	case strings.HasPrefix(path, "/admin/nodes/"):
		if g.onlyMethod(ctx, fasthttp.MethodPost) {
			g.adminNode(ctx, strings.TrimPrefix(path, "/admin/nodes/"))
		}
	case path == "/admin/cache":
		if g.onlyMethod(ctx, fasthttp.MethodDelete) {
			g.adminPurge(ctx)
		}
	case path == "/admin/reload":
		g.adminReload(ctx)
	default:
		g.writeError(ctx, &adapters.APIError{Status: 404, Type: adapters.TypeNotFound, Code: "unknown_url",
			Message: "unknown admin path " + strconv.Quote(path)})
	}
}

func (g *Gateway) noCache(ctx *fasthttp.RequestCtx) bool {
	if g.store != nil {
		return false
	}
	g.writeError(ctx, &adapters.APIError{Status: 409, Type: adapters.TypeInvalidRequest, Code: "cache_off", Message: "the cache is off (cache.backend: off)"})
	return true
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, _ := json.Marshal(v)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func (g *Gateway) adminCacheStats(ctx *fasthttp.RequestCtx) {
	if g.noCache(ctx) {
		return
	}
	st, err := g.store.Stats(context.Background())
	if err != nil {
		g.writeError(ctx, &adapters.APIError{Status: 503, Type: adapters.TypeUnavailable, Code: "store_unavailable", Message: "cache store: " + err.Error()})
		return
	}
	writeJSON(ctx, 200, map[string]any{
		"backend":   g.conf().Cache.Backend,
		"store":     st,
		"health":    g.backend.Health(),
		"requests":  g.cm.totals(),
		"hit_ratio": g.cm.hitRatio(),
	})
}

func (g *Gateway) adminDeleteEntry(ctx *fasthttp.RequestCtx, id string) {
	if g.noCache(ctx) {
		return
	}
	if id == "" || len(id) > 64 {
		g.writeError(ctx, adapters.BadRequest("id", "an entry id is required"))
		return
	}
	err := g.store.Delete(context.Background(), id)
	switch {
	case errors.Is(err, cache.ErrNotFound):
		g.writeError(ctx, &adapters.APIError{Status: 404, Type: adapters.TypeNotFound, Code: "entry_not_found", Message: "no cache entry " + strconv.Quote(id)})
	case err != nil:
		g.writeError(ctx, &adapters.APIError{Status: 503, Type: adapters.TypeUnavailable, Code: "store_unavailable", Message: "cache store: " + err.Error()})
	default:
		g.log.Info("cache entry deleted", "entry", id)
		writeJSON(ctx, 200, map[string]any{"deleted": id})
	}
}

func (g *Gateway) adminPurge(ctx *fasthttp.RequestCtx) {
	if g.noCache(ctx) {
		return
	}
	ns := string(ctx.QueryArgs().Peek("namespace"))
	if ns == "" {
		g.writeError(ctx, adapters.BadRequest("namespace", "namespace is required: DELETE /admin/cache?namespace=NAME"))
		return
	}
	n, err := g.store.Purge(context.Background(), ns)
	if err != nil {
		g.writeError(ctx, &adapters.APIError{Status: 503, Type: adapters.TypeUnavailable, Code: "store_unavailable", Message: "cache store: " + err.Error()})
		return
	}
	g.log.Info("cache namespace purged", "namespace", ns, "entries", n)
	writeJSON(ctx, 200, map[string]any{"namespace": ns, "deleted": n})
}

// adminNode serves POST /admin/nodes/{name}/drain and .../undrain.
func (g *Gateway) adminNode(ctx *fasthttp.RequestCtx, rest string) {
	name, action, _ := strings.Cut(rest, "/")
	var err error
	switch action {
	case "drain":
		err = g.pool.Drain(name)
	case "undrain":
		err = g.pool.Undrain(name)
	default:
		g.writeError(ctx, &adapters.APIError{Status: 404, Type: adapters.TypeNotFound, Code: "unknown_url", Message: "use /admin/nodes/{name}/drain or /undrain"})
		return
	}
	if errors.Is(err, balancer.ErrUnknownNode) {
		g.writeError(ctx, &adapters.APIError{Status: 404, Type: adapters.TypeNotFound, Code: "node_not_found", Message: "no node " + strconv.Quote(name)})
		return
	}
	if err != nil {
		g.writeError(ctx, adapters.BadRequest("", err.Error()))
		return
	}
	g.log.Info("node "+action+"ed", "node", name)
	writeJSON(ctx, 200, map[string]any{"node": name, "action": action})
}
