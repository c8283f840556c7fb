package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"
)

// errNoVectorSearch means the server has no RediSearch with vector fields:
// no search module, or one too old for VECTOR (Debian's redis-redisearch 1.2).
var errNoVectorSearch = errors.New("server has no RediSearch with vector support (Redis Stack or Redis 8 needed)")

// ensureIndex creates the vector index idempotently: HASHes under the
// vector prefix, "scope" a case-sensitive TAG, "vec" an HNSW or FLAT FLOAT32
// COSINE vector of Dims. Replicas that start together race on FT.CREATE;
// Redis runs one, the others get "already exists", which is success. A
// server reply that rejects FT._LIST or FT.CREATE yields errNoVectorSearch;
// connection errors are returned as they are, so that auto never guesses
// while Redis is down.
func (r *RedisStore) ensureIndex(ctx context.Context) error {
	cctx, cancel := r.writeCtx(ctx)
	defer cancel()
	if _, err := r.w.FT_List(cctx).Result(); err != nil {
		return noSearchIfServerError(err)
	}
	ix := r.opt.Index
	args := &redis.FTVectorArgs{}
	if ix.Type == "flat" {
		args.FlatOptions = &redis.FTFlatOptions{Type: "FLOAT32", Dim: r.opt.Dims, DistanceMetric: "COSINE", InitialCapacity: ix.InitialCap}
	} else {
		args.HNSWOptions = &redis.FTHNSWOptions{Type: "FLOAT32", Dim: r.opt.Dims, DistanceMetric: "COSINE", InitialCapacity: ix.InitialCap,
			MaxEdgesPerNode: ix.M, MaxAllowedEdgesPerNode: ix.EFConstruction, EFRunTime: ix.EFRuntime}
	}
	err := r.w.FTCreate(cctx, r.keyIndex,
		&redis.FTCreateOptions{OnHash: true, Prefix: []any{r.keyVec}},
		&redis.FieldSchema{FieldName: "scope", FieldType: redis.SearchFieldTypeTag, CaseSensitive: true},
		&redis.FieldSchema{FieldName: "vec", FieldType: redis.SearchFieldTypeVector, VectorArgs: args},
	).Err()
	if err == nil || strings.Contains(strings.ToLower(err.Error()), "already exists") {
		return nil
	}
	return noSearchIfServerError(err)
}

// isNoIndex reports the server's answer to a search on an index it does not
// have (Redis restarted empty, or the index was dropped).
func isNoIndex(err error) bool {
	if !isServerError(err) {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "no such index") || strings.Contains(msg, "unknown index")
}

// reindex re-creates a lost index in the background, at most once a second.
func (r *RedisStore) reindex() {
	now := time.Now().UnixNano()
	last := r.reindexAt.Load()
	if now-last < int64(time.Second) || !r.reindexAt.CompareAndSwap(last, now) {
		return
	}
	go func() { _ = r.ensureIndex(context.Background()) }()
}

func noSearchIfServerError(err error) error {
	if isServerError(err) {
		return fmt.Errorf("%w: %w", errNoVectorSearch, err)
	}
	return err
}

// searchKNN runs the KNN query in RediSearch.
func (r *RedisStore) searchKNN(ctx context.Context, scope string, vec []float32, k int) ([]Match, error) {
	ctx, cancel := r.callCtx(ctx)
	defer cancel()
	res, err := r.c.FTSearchWithArgs(ctx, r.keyIndex, knnQuery(scope, k, r.opt.Index, r.scopeSize(ctx, scope)), knnOptions(vec, k)).Result()
	if err != nil {
		if isNoIndex(err) {
			r.reindex()
		}
		return nil, fmt.Errorf("cache: redis search: %w", err)
	}
	hits := parseKNNDocs(res.Docs, r.vecKey(""))
	out := make([]Match, 0, len(hits))
	for _, h := range hits {
		e, err := decodePayload([]byte(h.payload))
		if err != nil {
			continue // a corrupt entry is a miss
		}
		out = append(out, Match{Entry: e, Similarity: h.similarity})
	}
	return out, nil
}

// scanMax is the largest scope whose vectors a search scans one by one
// (RediSearch's ADHOC_BF policy): about 1 µs a vector at 512 dims.
const scanMax = 1024

// knnQuery is the dialect-2 query for the k nearest vectors of one scope;
// the vector is passed as the parameter B. size is the scope's number of
// vectors, or -1 when unknown. A scope of at most scanMax vectors is scanned;
// a larger one is searched in the HNSW graph, in batches of batch_size
// nearest vectors filtered by scope. RediSearch's own choice between the two
// scans whole scopes of thousands of vectors (2–30 ms each, measured), and
// its default batch (k) takes many rounds for a scope that holds a tenth of
// the index. EF_RUNTIME is HNSW's search breadth.
func knnQuery(scope string, k int, ix RedisIndexConfig, size int) string {
	q := "(@scope:{" + escapeTag(scope) + "})=>[KNN " + strconv.Itoa(k) + " @vec $B"
	if size >= 0 && size <= scanMax {
		return q + " HYBRID_POLICY ADHOC_BF AS dist]" // EF_RUNTIME is refused here
	}
	if ix.Type != "flat" {
		q += " EF_RUNTIME " + strconv.Itoa(ix.EFRuntime)
	}
	if size > scanMax {
		q += " HYBRID_POLICY BATCHES"
	}
	return q + " BATCH_SIZE " + strconv.Itoa(ix.BatchSize) + " AS dist]"
}

// Scope sizes are counted in RediSearch (a scan of the scope's tag, about
// 150 ns a vector) and remembered for a while: large scopes change their
// policy rarely, small ones may grow past scanMax soon.
const (
	scopeSizeLarge = 30 * time.Second
	scopeSizeSmall = 2 * time.Second
	scopeSizesMax  = 10000 // remembered scopes; all are forgotten past it
)

type scopeSize struct {
	n  int
	at time.Time
}

// scopeSize returns the number of vectors in scope, or -1 when it cannot
// be counted now.
func (r *RedisStore) scopeSize(ctx context.Context, scope string) int {
	now := time.Now()
	r.sizesMu.Lock()
	sz, ok := r.sizes[scope]
	r.sizesMu.Unlock()
	if ok {
		ttl := scopeSizeSmall
		if sz.n > scanMax {
			ttl = scopeSizeLarge
		}
		if now.Sub(sz.at) < ttl {
			return sz.n
		}
	}
	res, err := r.c.FTSearchWithArgs(ctx, r.keyIndex, "@scope:{"+escapeTag(scope)+"}",
		&redis.FTSearchOptions{NoContent: true, LimitOffset: 0, Limit: 0, CountOnly: true, DialectVersion: 2}).Result()
	if err != nil {
		return -1
	}
	r.sizesMu.Lock()
	if len(r.sizes) >= scopeSizesMax {
		clear(r.sizes)
	}
	r.sizes[scope] = scopeSize{n: res.Total, at: now}
	r.sizesMu.Unlock()
	return res.Total
}

func knnOptions(vec []float32, k int) *redis.FTSearchOptions {
	return &redis.FTSearchOptions{
		Return:         []redis.FTSearchReturn{{FieldName: "entry"}, {FieldName: "dist"}},
		SortBy:         []redis.FTSearchSortBy{{FieldName: "dist", Asc: true}},
		Limit:          k,
		Params:         map[string]any{"B": vecBytes(vec)},
		DialectVersion: 2,
	}
}

// escapeTag backslash-escapes everything in a TAG value but letters, digits
// and '_', so that no scope can change the query. An empty scope becomes a
// value that no Put writes, never a syntax error.
func escapeTag(s string) string {
	if s == "" {
		return `\ `
	}
	var b strings.Builder
	for _, c := range s {
		if c != '_' && !unicode.IsLetter(c) && !unicode.IsDigit(c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

type knnHit struct {
	id         string
	payload    string
	similarity float32
}

// parseKNNDocs turns FT.SEARCH documents into hits: the id without keyPrefix,
// the entry payload and similarity = 1 - cosine distance. Documents without
// an entry (expired while the query ran) or a distance are skipped.
func parseKNNDocs(docs []redis.Document, keyPrefix string) []knnHit {
	out := make([]knnHit, 0, len(docs))
	for _, d := range docs {
		payload, ok := d.Fields["entry"]
		if !ok || d.Error != nil {
			continue
		}
		dist, err := strconv.ParseFloat(d.Fields["dist"], 32)
		if err != nil {
			continue
		}
		out = append(out, knnHit{id: strings.TrimPrefix(d.ID, keyPrefix), payload: payload, similarity: float32(1 - dist)})
	}
	return out
}

// indexDocs reads num_docs from FT.INFO. (go-redis's FTInfo parser reads 0
// from RediSearch 2.6's reply, so the flat reply is read as it is.)
func (r *RedisStore) indexDocs(ctx context.Context) (int64, error) {
	raw, err := r.w.Do(ctx, "FT.INFO", r.keyIndex).Slice()
	if err != nil {
		return 0, err
	}
	for i := 0; i+1 < len(raw); i += 2 {
		if k, _ := raw[i].(string); k == "num_docs" {
			switch v := raw[i+1].(type) {
			case int64:
				return v, nil
			case string:
				return strconv.ParseInt(v, 10, 64)
			case float64:
				return int64(v), nil
			}
		}
	}
	return 0, errors.New("FT.INFO has no num_docs")
}
