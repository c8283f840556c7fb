package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/redis/go-redis/v9"
)

// errNoVectorSearch means the server has no RediSearch with vector fields:
// no search module, or one too old for VECTOR (Debian's redis-redisearch 1.2).
var errNoVectorSearch = errors.New("server has no RediSearch with vector support (Redis Stack or Redis 8 needed)")

// ensureIndex creates the vector index idempotently: HASHes under p v:,
// "scope" a case-sensitive TAG, "vec" an HNSW FLOAT32 COSINE vector of Dims. A server reply
// that rejects FT._LIST or FT.CREATE yields errNoVectorSearch; connection
// errors are returned as they are, so that auto never guesses while Redis is
// down.
func (r *RedisStore) ensureIndex(ctx context.Context) error {
	cctx, cancel := r.callCtx(ctx)
	_, err := r.c.FT_List(cctx).Result()
	cancel()
	if err != nil {
		return noSearchIfServerError(err)
	}
	cctx, cancel = r.callCtx(ctx)
	defer cancel()
	err = r.c.FTCreate(cctx, r.keyIndex,
		&redis.FTCreateOptions{OnHash: true, Prefix: []any{r.vecKey("")}},
		&redis.FieldSchema{FieldName: "scope", FieldType: redis.SearchFieldTypeTag, CaseSensitive: true},
		&redis.FieldSchema{FieldName: "vec", FieldType: redis.SearchFieldTypeVector, VectorArgs: &redis.FTVectorArgs{
			HNSWOptions: &redis.FTHNSWOptions{Type: "FLOAT32", Dim: r.opt.Dims, DistanceMetric: "COSINE"},
		}},
	).Err()
	if err == nil {
		return nil
	}
	if !strings.Contains(strings.ToLower(err.Error()), "already exists") {
		return noSearchIfServerError(err)
	}
	// An index made earlier: check that it has our dims (best effort, FT.INFO
	// replies differ between versions).
	info, ierr := r.c.FTInfo(cctx, r.keyIndex).Result()
	if ierr != nil {
		return nil
	}
	for _, a := range info.Attributes {
		if (a.Attribute == "vec" || a.Identifier == "vec") && a.Dim != 0 && a.Dim != r.opt.Dims {
			return fmt.Errorf("index %s has DIM %d but the embedder has %d dims: drop it (FT.DROPINDEX %s) or change redis.key_prefix",
				r.keyIndex, a.Dim, r.opt.Dims, r.keyIndex)
		}
	}
	return nil
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
	res, err := r.c.FTSearchWithArgs(ctx, r.keyIndex, knnQuery(scope, k), knnOptions(vec, k)).Result()
	if err != nil {
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

// knnQuery is the dialect-2 query for the k nearest vectors of one scope;
// the vector is passed as the parameter B.
func knnQuery(scope string, k int) string {
	return "(@scope:{" + escapeTag(scope) + "})=>[KNN " + strconv.Itoa(k) + " @vec $B AS dist]"
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
