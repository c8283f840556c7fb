package router

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/cache"
)

// isEntryPath reports whether path is /admin/cache/{id}: an entry id is
// hex digits (cache.NewEntryID), so other /admin/cache/... routes never match.
func isEntryPath(path string) bool {
	id, ok := strings.CutPrefix(path, "/admin/cache/")
	return ok && id != "" && len(id) <= 64 && strings.Trim(id, "0123456789abcdef") == ""
}

// EntryView is what GET /admin/cache/{id} shows of an entry, so that an
// operator can audit a hit (X-Cache-Matched names the entry). The question
// and answer are shown only when logging.log_prompts or
// admin.show_cached_questions allows it.
type EntryView struct {
	ID        string      `json:"id"`
	Namespace string      `json:"namespace"`
	Model     string      `json:"model"`
	Endpoint  string      `json:"endpoint"`
	Created   time.Time   `json:"created"`
	Finish    string      `json:"finish"`
	Usage     cache.Usage `json:"usage"`
	Semantic  bool        `json:"semantic"` // searchable by similarity
	Exact     bool        `json:"exact"`    // stored under an exact key
	Question  *string     `json:"question,omitempty"`
	Answer    *string     `json:"answer,omitempty"`
	Hidden    string      `json:"hidden,omitempty"` // why question and answer are not shown
}

func (g *Gateway) adminGetEntry(ctx *fasthttp.RequestCtx, id string) {
	if g.noCache(ctx) {
		return
	}
	if id == "" || len(id) > 64 {
		g.writeError(ctx, adapters.BadRequest("id", "an entry id is required"))
		return
	}
	getter, ok := g.store.(cache.EntryGetter)
	var (
		e   *cache.Entry
		err = cache.ErrNotFound
	)
	if ok {
		e, err = getter.GetByID(context.Background(), id)
	}
	switch {
	case errors.Is(err, cache.ErrNotFound):
		g.writeError(ctx, &adapters.APIError{Status: 404, Type: adapters.TypeNotFound, Code: "entry_not_found", Message: "no cache entry " + strconv.Quote(id)})
		return
	case err != nil:
		g.writeError(ctx, &adapters.APIError{Status: 503, Type: adapters.TypeUnavailable, Code: "store_unavailable", Message: "cache store: " + err.Error()})
		return
	}
	v := EntryView{ID: e.ID, Namespace: e.Namespace, Model: e.Model, Endpoint: e.Endpoint, Created: e.Created,
		Finish: e.Finish, Usage: e.Usage, Semantic: e.Scope != "", Exact: e.ExactKey != ""}
	if g.questionsShown() {
		v.Question, v.Answer = &e.Query, &e.Content
	} else {
		v.Hidden = questionsHidden
	}
	writeJSON(ctx, 200, v)
}

const questionsHidden = "question and answer are shown only with logging.log_prompts or admin.show_cached_questions"

// questionsShown reports whether admin answers may hold cached questions
// and answers (an entry, the hot list): only when the operator said so.
func (g *Gateway) questionsShown() bool {
	c := g.conf()
	return c.Logging.LogPrompts || c.Admin.ShowCachedQuestions
}
