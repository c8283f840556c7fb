package cache

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// ErrUnavailable means the store is not connected (yet).
var ErrUnavailable = errors.New("cache: store unavailable")

// LazyStore connects to its store in the background: a gateway whose Redis
// is down at start still serves, uncached, and picks the cache up once the
// store can be built.
type LazyStore struct {
	cur    atomic.Pointer[storeBox]
	cancel context.CancelFunc
	done   chan struct{}
}

type storeBox struct{ s Store }

var (
	_ Store       = (*LazyStore)(nil)
	_ BatchPutter = (*LazyStore)(nil)
	_ BatchPutter = (*RedisStore)(nil)
)

// NewLazyStore tries build once now and, if that fails, every retry in the
// background until it succeeds or Close is called. onErr sees each failure.
func NewLazyStore(build func(context.Context) (Store, error), retry time.Duration, onErr func(error)) *LazyStore {
	ctx, cancel := context.WithCancel(context.Background())
	l := &LazyStore{cancel: cancel, done: make(chan struct{})}
	try := func() bool {
		tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
		defer tcancel()
		s, err := build(tctx)
		if err != nil {
			if onErr != nil && ctx.Err() == nil {
				onErr(err)
			}
			return false
		}
		l.cur.Store(&storeBox{s})
		return true
	}
	if try() {
		close(l.done)
		return l
	}
	go func() {
		defer close(l.done)
		t := time.NewTicker(retry)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if try() {
					return
				}
			}
		}
	}()
	return l
}

var _ IndexSyncer = (*LazyStore)(nil)

// IndexSync implements IndexSyncer for the connected store, if it has one.
func (l *LazyStore) IndexSync() *IndexSyncHealth {
	if b := l.cur.Load(); b != nil {
		if s, ok := b.s.(IndexSyncer); ok {
			return s.IndexSync()
		}
	}
	return nil
}

// Ready reports whether the store is connected.
func (l *LazyStore) Ready() bool { return l.cur.Load() != nil }

func (l *LazyStore) store() (Store, error) {
	if b := l.cur.Load(); b != nil {
		return b.s, nil
	}
	return nil, ErrUnavailable
}

// Get implements Store.
func (l *LazyStore) Get(ctx context.Context, key string) (*Entry, error) {
	s, err := l.store()
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, key)
}

// GetMany implements MultiGetter.
func (l *LazyStore) GetMany(ctx context.Context, keys []string) ([]*Entry, error) {
	s, err := l.store()
	if err != nil {
		return nil, err
	}
	return getAll(ctx, s, keys)
}

// Put implements Store.
func (l *LazyStore) Put(ctx context.Context, e *Entry, vec []float32, ttl time.Duration) error {
	s, err := l.store()
	if err != nil {
		return err
	}
	return s.Put(ctx, e, vec, ttl)
}

// PutBatch stores ws in one round trip when the store can.
func (l *LazyStore) PutBatch(ctx context.Context, ws []Write) error {
	s, err := l.store()
	if err != nil {
		return err
	}
	return putAll(ctx, s, ws)
}

// Search implements Store.
func (l *LazyStore) Search(ctx context.Context, scope string, vec []float32, k int) ([]Match, error) {
	s, err := l.store()
	if err != nil {
		return nil, err
	}
	return s.Search(ctx, scope, vec, k)
}

// SearchQuery implements QuerySearcher.
func (l *LazyStore) SearchQuery(ctx context.Context, scope string, q *VecQuery, k int, minSim float32) ([]Match, error) {
	s, err := l.store()
	if err != nil {
		return nil, err
	}
	return searchQuery(ctx, s, scope, q, k, minSim)
}

// Delete implements Store.
func (l *LazyStore) Delete(ctx context.Context, id string) error {
	s, err := l.store()
	if err != nil {
		return err
	}
	return s.Delete(ctx, id)
}

// GetByID implements EntryGetter when the store it built does.
func (l *LazyStore) GetByID(ctx context.Context, id string) (*Entry, error) {
	s, err := l.store()
	if err != nil {
		return nil, err
	}
	g, ok := s.(EntryGetter)
	if !ok {
		return nil, ErrNotFound
	}
	return g.GetByID(ctx, id)
}

// Purge implements Store.
func (l *LazyStore) Purge(ctx context.Context, namespace string) (int, error) {
	s, err := l.store()
	if err != nil {
		return 0, err
	}
	return s.Purge(ctx, namespace)
}

// PurgeTag implements Store.
func (l *LazyStore) PurgeTag(ctx context.Context, tag string) (int, error) {
	s, err := l.store()
	if err != nil {
		return 0, err
	}
	return s.PurgeTag(ctx, tag)
}

// Stats implements Store.
func (l *LazyStore) Stats(ctx context.Context) (Stats, error) {
	s, err := l.store()
	if err != nil {
		return Stats{}, err
	}
	return s.Stats(ctx)
}

// Close stops the retries and closes the store, if connected.
func (l *LazyStore) Close() error {
	l.cancel()
	<-l.done
	if b := l.cur.Load(); b != nil {
		return b.s.Close()
	}
	return nil
}
