package admin

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"

	"frontdoor/adapters"
	"frontdoor/balancer"
	"frontdoor/cache"
	"frontdoor/internal/reply"
	"frontdoor/internal/warm"
)

//go:embed dashboard.html
var dashboardHTML string

// The dashboard page around its embedded history.
var dashboardHead, dashboardTail, _ = strings.Cut(dashboardHTML, "{{history}}")

// The history the dashboard shows: the last hour at 5 s.
const (
	HistoryStep   = 5 * time.Second
	HistoryWindow = time.Hour
)

// Handler serves the operator routes.
type Handler struct {
	gw      Gateway
	log     *slog.Logger
	history *History
	logins  loginLimit
}

// New makes the operator surface of gw.
func New(gw Gateway, log *slog.Logger) *Handler {
	return &Handler{gw: gw, log: log, history: NewHistory(HistoryStep, HistoryWindow)}
}

// Run samples the dashboard's history until ctx ends.
func (h *Handler) Run(ctx context.Context) { h.history.Run(ctx, h.gw) }

// Serve answers the request when its path is an operator route, behind
// guard, and reports whether it was one.
func (h *Handler) Serve(ctx *fasthttp.RequestCtx, guard *Guard) bool {
	path := string(ctx.Path())
	switch {
	case path == "/status":
		if guard.Allow(ctx) && reply.OnlyMethod(ctx, fasthttp.MethodGet) {
			reply.JSON(ctx, 200, h.gw.Status())
		}
	case path == "/dashboard":
		if h.dashboardAllowed(ctx, guard) && reply.OnlyMethod(ctx, fasthttp.MethodGet) {
			b := append([]byte(dashboardHead), h.history.AppendJSON(nil, 0)...)
			ctx.SetContentType("text/html; charset=utf-8")
			ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
			ctx.Response.Header.Set("X-Frame-Options", "DENY")
			ctx.SetBody(append(b, dashboardTail...))
		}
	case path == "/admin/login":
		h.serveLogin(ctx, guard)
	case path == "/admin/logout":
		h.serveLogout(ctx)
	case path == "/admin/dashboard/history":
		if guard.Allow(ctx) && reply.OnlyMethod(ctx, fasthttp.MethodGet) {
			after, _ := strconv.ParseInt(string(ctx.QueryArgs().Peek("after")), 10, 64)
			ctx.SetContentType("application/json")
			ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
			ctx.SetBody(h.history.AppendJSON(nil, after))
		}
	case strings.HasPrefix(path, "/admin/") || path == "/admin":
		if guard.Allow(ctx) {
			h.serveAdmin(ctx, path)
		}
	case strings.HasPrefix(path, "/debug/pprof/"):
		if guard.Allow(ctx) {
			pprofhandler.PprofHandler(ctx)
		}
	default:
		return false
	}
	return true
}

// dashboardAllowed is guard.Allow, except that a browser refused for want
// of credentials is sent to the login page when a token is set.
func (h *Handler) dashboardAllowed(ctx *fasthttp.RequestCtx, guard *Guard) bool {
	e := guard.check(ctx)
	if e == nil {
		return true
	}
	if e.Code == "admin_forbidden" && len(guard.token) > 0 && (ctx.IsGet() || ctx.IsHead()) &&
		strings.Contains(string(ctx.Request.Header.Peek("Accept")), "text/html") {
		seeOther(ctx, "/admin/login?next=/dashboard")
		return false
	}
	reply.Error(ctx, e)
	return false
}

// route is an admin route: path exactly, or every path below it when path
// ends in "/" (serve gets the rest).
type route struct {
	path   string
	method string
	serve  func(h *Handler, ctx *fasthttp.RequestCtx, rest string)
}

var routes = []route{
	{"/admin/cache/warm", fasthttp.MethodPost, func(h *Handler, ctx *fasthttp.RequestCtx, _ string) { h.warm(ctx) }},
	{"/admin/cache/warm/", fasthttp.MethodGet, (*Handler).warmStatus},
	{"/admin/cache/hot", fasthttp.MethodGet, func(h *Handler, ctx *fasthttp.RequestCtx, _ string) { h.hot(ctx) }},
	{"/admin/cache/params", fasthttp.MethodGet, func(h *Handler, ctx *fasthttp.RequestCtx, _ string) { h.params(ctx) }},
	{"/admin/cache/entries", fasthttp.MethodPost, func(h *Handler, ctx *fasthttp.RequestCtx, _ string) { h.importPair(ctx) }},
	{"/admin/cache/stats", fasthttp.MethodGet, func(h *Handler, ctx *fasthttp.RequestCtx, _ string) { h.cacheStats(ctx) }},
	{"/admin/cache/entries/", fasthttp.MethodGet, (*Handler).getEntry},
	{"/admin/cache/entries/", fasthttp.MethodDelete, (*Handler).deleteEntry},
	{"/admin/nodes", fasthttp.MethodGet, func(h *Handler, ctx *fasthttp.RequestCtx, _ string) { reply.JSON(ctx, 200, h.gw.Pool().Status()) }},
	{"/admin/nodes/", fasthttp.MethodPost, (*Handler).node},
	{"/admin/cache", fasthttp.MethodDelete, func(h *Handler, ctx *fasthttp.RequestCtx, _ string) { h.purge(ctx) }},
	{"/admin/reload", fasthttp.MethodPost, func(h *Handler, ctx *fasthttp.RequestCtx, _ string) { h.reload(ctx) }},
}

// serveAdmin routes /admin/*: a route's path with another method is a 405
// naming the method it takes.
func (h *Handler) serveAdmin(ctx *fasthttp.RequestCtx, path string) {
	var allowed string
	for _, r := range routes {
		rest, ok := path, path == r.path
		if strings.HasSuffix(r.path, "/") {
			rest, ok = strings.CutPrefix(path, r.path)
		}
		if !ok {
			continue
		}
		if string(ctx.Method()) == r.method || r.method == fasthttp.MethodGet && ctx.IsHead() {
			r.serve(h, ctx, rest)
			return
		}
		allowed = r.method
	}
	switch {
	case allowed != "":
		reply.OnlyMethod(ctx, allowed)
	case ctx.IsGet() && isEntryPath(path):
		h.getEntry(ctx, strings.TrimPrefix(path, "/admin/cache/"))
	default:
		reply.Error(ctx, errUnknownPath("unknown admin path "+strconv.Quote(path)))
	}
}

// isEntryPath reports whether path is /admin/cache/{id}: an entry id is
// hex digits (cache.NewEntryID), so other /admin/cache/... routes never match.
func isEntryPath(path string) bool {
	id, ok := strings.CutPrefix(path, "/admin/cache/")
	return ok && id != "" && len(id) <= 64 && strings.Trim(id, "0123456789abcdef") == ""
}

// cache is the cache's operations, or nil with the 409 written when the
// cache is off.
func (h *Handler) cache(ctx *fasthttp.RequestCtx) CacheOps {
	c := h.gw.Cache()
	if c == nil {
		reply.Error(ctx, errCacheOff())
	}
	return c
}

func (h *Handler) cacheStats(ctx *fasthttp.RequestCtx) {
	c := h.cache(ctx)
	if c == nil {
		return
	}
	st, err := c.Stats(context.Background())
	if err != nil {
		reply.Error(ctx, errStoreUnavailable(err))
		return
	}
	reply.JSON(ctx, 200, st)
}

// entryCache is the cache's operations for a request on entry id, or nil
// with the error written (the cache is off, or id is not an entry id).
func (h *Handler) entryCache(ctx *fasthttp.RequestCtx, id string) CacheOps {
	c := h.cache(ctx)
	if c != nil && (id == "" || len(id) > 64) {
		reply.Error(ctx, adapters.BadRequest("id", "an entry id is required"))
		return nil
	}
	return c
}

// entryError writes the error of an operation on entry id; false when
// there is none.
func entryError(ctx *fasthttp.RequestCtx, id string, err error) bool {
	switch {
	case errors.Is(err, cache.ErrNotFound):
		reply.Error(ctx, errEntryNotFound(id))
	case err != nil:
		reply.Error(ctx, errStoreUnavailable(err))
	default:
		return false
	}
	return true
}

func (h *Handler) getEntry(ctx *fasthttp.RequestCtx, id string) {
	c := h.entryCache(ctx, id)
	if c == nil {
		return
	}
	e, err := c.Get(context.Background(), id)
	if entryError(ctx, id, err) {
		return
	}
	v := EntryView{ID: e.ID, Namespace: e.Namespace, Model: e.Model, Endpoint: e.Endpoint, Created: e.Created,
		Finish: e.Finish, Usage: e.Usage, Semantic: e.Scope != "", Exact: e.ExactKey != "", Tag: e.Tag, Curated: e.Curated, Via: e.Via}
	if h.gw.QuestionsShown() {
		v.Question, v.Answer = &e.Query, &e.Content
	} else {
		v.Hidden = questionsHidden
	}
	reply.JSON(ctx, 200, v)
}

func (h *Handler) deleteEntry(ctx *fasthttp.RequestCtx, id string) {
	c := h.entryCache(ctx, id)
	if c == nil || entryError(ctx, id, c.Forget(context.Background(), id)) {
		return
	}
	h.log.Info("cache entry deleted", "entry", id)
	reply.JSON(ctx, 200, map[string]any{"deleted": id})
}

func (h *Handler) purge(ctx *fasthttp.RequestCtx) {
	c := h.cache(ctx)
	if c == nil {
		return
	}
	ns, tag := string(ctx.QueryArgs().Peek("namespace")), string(ctx.QueryArgs().Peek("tag"))
	if (ns == "") == (tag == "") {
		reply.Error(ctx, adapters.BadRequest("namespace", "one of namespace or tag is required: DELETE /admin/cache?namespace=NAME or ?tag=TAG"))
		return
	}
	if tag != "" {
		n, err := c.PurgeTag(context.Background(), tag)
		if err != nil {
			reply.Error(ctx, errStoreUnavailable(err))
			return
		}
		h.log.Info("cache tag purged", "tag", tag, "entries", n)
		reply.JSON(ctx, 200, map[string]any{"tag": tag, "deleted": n})
		return
	}
	n, err := c.Purge(context.Background(), ns)
	if err != nil {
		reply.Error(ctx, errStoreUnavailable(err))
		return
	}
	h.log.Info("cache namespace purged", "namespace", ns, "entries", n)
	reply.JSON(ctx, 200, map[string]any{"namespace": ns, "deleted": n})
}

// node serves POST /admin/nodes/{name}/drain and .../undrain.
func (h *Handler) node(ctx *fasthttp.RequestCtx, rest string) {
	name, action, _ := strings.Cut(rest, "/")
	var err error
	switch action {
	case "drain":
		err = h.gw.Pool().Drain(name)
	case "undrain":
		err = h.gw.Pool().Undrain(name)
	default:
		reply.Error(ctx, errUnknownPath("use /admin/nodes/{name}/drain or /undrain"))
		return
	}
	if errors.Is(err, balancer.ErrUnknownNode) {
		reply.Error(ctx, errNodeNotFound(name))
		return
	}
	if err != nil {
		reply.Error(ctx, adapters.BadRequest("", err.Error()))
		return
	}
	h.log.Info("node "+action+"ed", "node", name)
	reply.JSON(ctx, 200, map[string]any{"node": name, "action": action})
}

// importPair serves POST /admin/cache/entries: one answered pair
// (warm.ImportRequest) stored with no upstream call.
func (h *Handler) importPair(ctx *fasthttp.RequestCtx) {
	if h.cache(ctx) == nil {
		return
	}
	var in warm.ImportRequest
	if err := json.Unmarshal(ctx.PostBody(), &in); err != nil {
		reply.Error(ctx, adapters.BadRequest("", "invalid import body: "+err.Error()))
		return
	}
	res, err := h.gw.Import(context.Background(), in)
	switch {
	case errors.Is(err, warm.ErrImportRefused):
		reply.Error(ctx, errImportRefused(err))
	case err != nil:
		reply.Error(ctx, errImportFailed(err))
	default:
		reply.JSON(ctx, 200, res)
	}
}

// warm serves POST /admin/cache/warm: the body is a warm file in any
// format; ?name= names it in reports (and is the default tag), ?tag=,
// ?model= and ?system= are as frontdoor warm's flags. It starts a
// background job and answers 202 with its id.
func (h *Handler) warm(ctx *fasthttp.RequestCtx) {
	if h.cache(ctx) == nil {
		return
	}
	q := ctx.QueryArgs()
	name := string(q.Peek("name"))
	if name == "" {
		name = "upload"
	}
	tag := warm.TagFor(name)
	if v := q.Peek("tag"); len(v) > 0 {
		if tag = cache.ValidTag(v); tag == "" {
			reply.Error(ctx, adapters.BadRequest("tag", "a tag is 1 to 128 letters, digits or ._:/@+-"))
			return
		}
	}
	items, format, err := warm.Parse(name, ctx.PostBody(), warm.Defaults{Model: string(q.Peek("model")), System: string(q.Peek("system"))})
	if err != nil {
		reply.Error(ctx, adapters.BadRequest("", err.Error()))
		return
	}
	if len(items) == 0 {
		reply.Error(ctx, adapters.BadRequest("", "the file has no prompts"))
		return
	}
	j, err := h.gw.StartWarm(name, tag, items)
	if err != nil {
		reply.Error(ctx, errNotServing())
		return
	}
	h.log.Info("cache warm-up started", "job", j.ID(), "source", name, "items", len(items), "format", string(format), "tag", tag)
	reply.JSON(ctx, 202, map[string]any{"id": j.ID(), "total": len(items), "format": format, "tag": tag})
}

func (h *Handler) warmStatus(ctx *fasthttp.RequestCtx, id string) {
	j := h.gw.WarmJob(id)
	if j == nil {
		reply.Error(ctx, errWarmNotFound(id))
		return
	}
	reply.JSON(ctx, 200, j.Status())
}

// hot serves GET /admin/cache/hot?top=N (default 100)[&tenant=NAME]: the
// most-hit entries as chat-request JSON Lines, {"tenant", "hits", "entry",
// "request"}, ready for frontdoor warm. With tenant, only that tenant's,
// without the tenant field. The requests are the clients' prompts: refused
// unless the privacy switches show cached questions.
func (h *Handler) hot(ctx *fasthttp.RequestCtx) {
	if h.cache(ctx) == nil {
		return
	}
	if !h.gw.QuestionsShown() {
		reply.Error(ctx, errQuestionsHidden())
		return
	}
	top := 100
	if v := ctx.QueryArgs().Peek("top"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > 1_000_000 {
			reply.Error(ctx, adapters.BadRequest("top", "top must be between 1 and 1000000"))
			return
		}
		top = n
	}
	var out []byte
	for _, e := range h.gw.Hot(top, string(ctx.QueryArgs().Peek("tenant"))) {
		b, _ := json.Marshal(e)
		out = append(append(out, b...), '\n')
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/x-ndjson")
	ctx.SetBody(out)
}

// params serves GET /admin/cache/params?top=N (default 5): what the
// clients' chat requests send besides their question, most common first.
// No prompt is shown: a system prompt is a digest.
func (h *Handler) params(ctx *fasthttp.RequestCtx) {
	c := h.cache(ctx)
	if c == nil {
		return
	}
	top := 5
	if v := ctx.QueryArgs().Peek("top"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > 64 {
			reply.Error(ctx, adapters.BadRequest("top", "top must be between 1 and 64"))
			return
		}
		top = n
	}
	var out warm.ParamReport
	out.Sampled, out.Sets = c.ParamSets(top)
	if out.Sets == nil {
		out.Sets = []warm.ParamSet{}
	}
	reply.JSON(ctx, 200, out)
}

// reload serves POST /admin/reload: 200 when applied; 422 with the
// problems, or the settings that need a restart, when refused.
func (h *Handler) reload(ctx *fasthttp.RequestCtx) {
	r := h.gw.Reload()
	if r.Err == nil {
		reply.JSON(ctx, 200, map[string]any{"status": "reloaded"})
		return
	}
	body := map[string]any{"status": "refused", "error": r.Err.Error()}
	switch {
	case r.Problems != nil:
		body["problems"] = r.Problems
	case r.Restart != nil:
		body["restart_required"] = r.Restart
	case r.NoConfig:
		reply.JSON(ctx, 409, body)
		return
	}
	reply.JSON(ctx, 422, body)
}
