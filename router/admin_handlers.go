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
	"frontdoor/internal/warm"
)

// serveAdmin routes /admin/*. Every route needs the admin token or an
// allowed client address.
func (g *Gateway) serveAdmin(ctx *fasthttp.RequestCtx) {
	if !g.rt.Load().admin.allow(ctx, g.writeError) {
		return
	}
	path := string(ctx.Path())
	switch {
	case path == "/admin/cache/warm":
		if g.onlyMethod(ctx, fasthttp.MethodPost) {
			g.adminWarm(ctx)
		}
	case strings.HasPrefix(path, "/admin/cache/warm/"):
		if g.onlyMethod(ctx, fasthttp.MethodGet) {
			g.adminWarmStatus(ctx, strings.TrimPrefix(path, "/admin/cache/warm/"))
		}
	case path == "/admin/cache/hot":
		if g.onlyMethod(ctx, fasthttp.MethodGet) {
			g.adminHot(ctx)
		}
	case path == "/admin/cache/entries":
		if g.onlyMethod(ctx, fasthttp.MethodPost) {
			g.adminImport(ctx)
		}
	case path == "/admin/cache/stats":
		if g.onlyMethod(ctx, fasthttp.MethodGet) {
			g.adminCacheStats(ctx)
		}
	case strings.HasPrefix(path, "/admin/cache/entries/") && ctx.IsGet():
		g.adminGetEntry(ctx, strings.TrimPrefix(path, "/admin/cache/entries/"))
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
	case ctx.IsGet() && isEntryPath(path):
		g.adminGetEntry(ctx, strings.TrimPrefix(path, "/admin/cache/"))
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
	g.flights.invalidate()
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
	ns, tag := string(ctx.QueryArgs().Peek("namespace")), string(ctx.QueryArgs().Peek("tag"))
	if (ns == "") == (tag == "") {
		g.writeError(ctx, adapters.BadRequest("namespace", "one of namespace or tag is required: DELETE /admin/cache?namespace=NAME or ?tag=TAG"))
		return
	}
	g.flights.invalidate()
	if tag != "" {
		n, err := g.store.PurgeTag(context.Background(), tag)
		if err != nil {
			g.writeError(ctx, &adapters.APIError{Status: 503, Type: adapters.TypeUnavailable, Code: "store_unavailable", Message: "cache store: " + err.Error()})
			return
		}
		g.log.Info("cache tag purged", "tag", tag, "entries", n)
		writeJSON(ctx, 200, map[string]any{"tag": tag, "deleted": n})
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

// adminImport serves POST /admin/cache/entries: one answered pair
// (warm.ImportRequest) stored with no upstream call.
func (g *Gateway) adminImport(ctx *fasthttp.RequestCtx) {
	if g.noCache(ctx) {
		return
	}
	var in warm.ImportRequest
	if err := json.Unmarshal(ctx.PostBody(), &in); err != nil {
		g.writeError(ctx, adapters.BadRequest("", "invalid import body: "+err.Error()))
		return
	}
	res, err := g.ImportAnswer(context.Background(), in)
	if err != nil {
		status, code := importStatus(err)
		g.writeError(ctx, &adapters.APIError{Status: status, Type: adapters.TypeInvalidRequest, Code: code, Message: err.Error()})
		return
	}
	writeJSON(ctx, 200, res)
}

// adminWarm serves POST /admin/cache/warm: the body is a warm file in any
// format; ?name= names it in reports (and is the default tag), ?tag=,
// ?model= and ?system= are as frontdoor warm's flags. It starts a
// background job and answers 202 with its id.
func (g *Gateway) adminWarm(ctx *fasthttp.RequestCtx) {
	if g.noCache(ctx) {
		return
	}
	addr := g.addr.Load()
	if addr == nil {
		g.writeError(ctx, &adapters.APIError{Status: 409, Type: adapters.TypeInvalidRequest, Code: "not_serving", Message: "the gateway is not serving yet"})
		return
	}
	q := ctx.QueryArgs()
	name := string(q.Peek("name"))
	if name == "" {
		name = "upload"
	}
	tag := warm.TagFor(name)
	if v := q.Peek("tag"); len(v) > 0 {
		if tag = validTag(v); tag == "" {
			g.writeError(ctx, adapters.BadRequest("tag", "a tag is 1 to 128 letters, digits or ._:/@+-"))
			return
		}
	}
	items, format, err := warm.Parse(name, ctx.PostBody(), warm.Defaults{Model: string(q.Peek("model")), System: string(q.Peek("system"))})
	if err != nil {
		g.writeError(ctx, adapters.BadRequest("", err.Error()))
		return
	}
	if len(items) == 0 {
		g.writeError(ctx, adapters.BadRequest("", "the file has no prompts"))
		return
	}
	j := g.startWarm(name, tag, *addr, items)
	g.log.Info("cache warm-up started", "job", j.st.ID, "source", name, "items", len(items), "format", string(format), "tag", tag)
	writeJSON(ctx, 202, map[string]any{"id": j.st.ID, "total": len(items), "format": format, "tag": tag})
}

func (g *Gateway) adminWarmStatus(ctx *fasthttp.RequestCtx, id string) {
	j := g.warms.get(id)
	if j == nil {
		g.writeError(ctx, &adapters.APIError{Status: 404, Type: adapters.TypeNotFound, Code: "warm_not_found", Message: "no warm-up job " + strconv.Quote(id)})
		return
	}
	writeJSON(ctx, 200, j.status())
}

// adminHot serves GET /admin/cache/hot?top=N (default 100)[&tenant=NAME]:
// the most-hit entries as chat-request JSON Lines, {"tenant", "hits",
// "entry", "request"}, ready for frontdoor warm. With tenant, only that
// tenant's, without the tenant field. The requests are the clients'
// prompts: refused unless the privacy switches show cached questions.
func (g *Gateway) adminHot(ctx *fasthttp.RequestCtx) {
	if g.noCache(ctx) {
		return
	}
	if !g.questionsShown() {
		g.writeError(ctx, &adapters.APIError{Status: 403, Type: adapters.TypePermission, Code: "questions_hidden",
			Message: "the hot list holds clients' prompts, shown only with logging.log_prompts or admin.show_cached_questions: set admin.show_cached_questions: true to export them"})
		return
	}
	top := 100
	if v := ctx.QueryArgs().Peek("top"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > 1_000_000 {
			g.writeError(ctx, adapters.BadRequest("top", "top must be between 1 and 1000000"))
			return
		}
		top = n
	}
	var out []byte
	if g.hot != nil {
		for _, e := range g.hot.top(top, string(ctx.QueryArgs().Peek("tenant"))) {
			b, _ := json.Marshal(e)
			out = append(append(out, b...), '\n')
		}
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/x-ndjson")
	ctx.SetBody(out)
}
