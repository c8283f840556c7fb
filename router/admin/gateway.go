package admin

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"frontdoor/balancer"
	"frontdoor/cache"
	"frontdoor/internal/warm"
)

// Gateway is what the operator surface needs of the gateway.
type Gateway interface {
	// Status is the /status document.
	Status() Status
	// Counters is what the gateway has counted since start, the latency
	// quantiles over the requests answered since since.
	Counters(since time.Time) Counters
	// Reload reads the config file again and applies it.
	Reload() ReloadResult
	// Import stores an answered pair (POST /admin/cache/entries); an error
	// wrapping warm.ErrImportRefused is the request's fault, others the
	// store's.
	Import(ctx context.Context, in warm.ImportRequest) (warm.ImportResponse, error)
	// Pool is the node pool (listing, drain).
	Pool() *balancer.Pool
	// Cache is the cache's store; nil when the cache is off.
	Cache() CacheOps
	// Hot is the most-hit entries, of tenant only unless "".
	Hot(top int, tenant string) []HotEntry
	// StartWarm starts a warm-up of items through the gateway, tagged tag;
	// ErrNotServing before the gateway listens.
	StartWarm(source, tag string, items []warm.Item) (*warm.Job, error)
	// WarmJob is a warm-up started before, or nil.
	WarmJob(id string) *warm.Job
	// QuestionsShown says whether admin answers may show cached questions
	// and answers (logging.log_prompts or admin.show_cached_questions).
	QuestionsShown() bool
}

// ErrNotServing is StartWarm's error before the gateway listens.
var ErrNotServing = errors.New("the gateway is not serving yet")

// CacheOps are the operations on the cache's store. The deletes retire the
// answers in flight too, so that no purged answer is served or stored
// after them.
type CacheOps interface {
	Stats(ctx context.Context) (CacheStats, error)
	// Get returns an entry by id; cache.ErrNotFound when there is none.
	Get(ctx context.Context, id string) (*cache.Entry, error)
	// Forget deletes an entry by id; cache.ErrNotFound when there is none.
	Forget(ctx context.Context, id string) error
	// Purge deletes a namespace's entries and returns how many.
	Purge(ctx context.Context, namespace string) (int, error)
	// PurgeTag deletes the entries tagged tag and returns how many.
	PurgeTag(ctx context.Context, tag string) (int, error)
	// ParamSets is the n parameter sets sampled most among the clients'
	// chat requests, and how many requests were sampled.
	ParamSets(n int) (int64, []warm.ParamSet)
}

// CacheStats is GET /admin/cache/stats.
type CacheStats struct {
	Backend  string           `json:"backend"`
	Health   cache.Health     `json:"health"`
	HitRatio float64          `json:"hit_ratio"`
	Requests map[string]int64 `json:"requests"`
	Store    cache.Stats      `json:"store"`
}

// ReloadResult is how a reload went: Err is nil when it was applied.
type ReloadResult struct {
	Err      error
	Problems []string // the new config's problems
	Restart  []string // the settings that changed and need a restart
	NoConfig bool     // there is no config file to reload
}

// HotEntry is one line of the hot list's export. Tenant is left out of an
// export for one tenant, so that its lines warm with that tenant's API key.
type HotEntry struct {
	Tenant  string          `json:"tenant,omitempty"`
	Hits    uint64          `json:"hits"`
	Entry   string          `json:"entry"`
	Request json.RawMessage `json:"request"`
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
	Tag       string      `json:"tag,omitempty"`
	Curated   bool        `json:"curated,omitempty"` // stored by an import or a warm-up
	Via       string      `json:"via,omitempty"`     // the curated entry an approved near-miss repeats
	Question  *string     `json:"question,omitempty"`
	Answer    *string     `json:"answer,omitempty"`
	Hidden    string      `json:"hidden,omitempty"` // why question and answer are not shown
}

const questionsHidden = "question and answer are shown only with logging.log_prompts or admin.show_cached_questions"
