package router

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"frontdoor/internal/warm"
)

// warmToken authenticates the gateway's own warm-up requests, which may name
// their tenant in X-Frontdoor-Tenant. It is random per process and never
// leaves it.
var warmToken = func() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// headerWarm carries warmToken.
const headerWarm = "X-Frontdoor-Warm"

// startWarm runs items in the background through the gateway's own HTTP
// server at addr (host:port), so that admission, balancing and write-back
// apply; answered pairs are imported directly. Entries are tagged tag, or
// (when "") with their file's name.
func (g *Gateway) startWarm(source, tag, addr string, items []warm.Item) *warm.Job {
	c := g.conf()
	client := &http.Client{Timeout: c.Timeouts.Total.D(), Transport: &http.Transport{MaxConnsPerHost: c.Warm.Concurrency}}
	t := &warm.HTTPTarget{BaseURL: "http://" + addr, Tag: tag, Client: client, Retries: -1,
		Header: http.Header{headerWarm: {warmToken}}, Import: g.ImportAnswer}
	return g.warms.Start(source, tag, items, t, warm.Options{Concurrency: c.Warm.Concurrency}, func(j *warm.Job, sum warm.Summary) {
		client.CloseIdleConnections()
		st := j.Status()
		for _, f := range st.Failures {
			g.log.Warn("cache warm-up: item failed", "job", st.ID, "file", f.File, "line", f.Line, "error", f.Error)
		}
		g.log.Info("cache warm-up finished", "job", st.ID, "source", source, "state", st.State,
			"warmed", sum.Warmed, "already_cached", sum.Cached, "failed", sum.Failed)
	})
}

// Warm replays the warm.files through the gateway at addr (host:port), as
// a background job that /status shows, and waits for it. Each file is in
// one of the formats internal/warm reads; warm.model is the model of
// plain-text prompts. Entries are tagged warm.tag, or with their file's
// base name.
func (g *Gateway) Warm(ctx context.Context, addr string) (warm.Summary, error) {
	if !g.cache.On() {
		return warm.Summary{}, errors.New("warm: the cache is off (cache.backend: off): warm.files ignored")
	}
	var items []warm.Item
	for _, path := range g.conf().Warm.Files {
		data, err := os.ReadFile(path)
		if err != nil {
			return warm.Summary{}, fmt.Errorf("warm: %w", err)
		}
		its, _, err := warm.Parse(filepath.Base(path), data, warm.Defaults{Model: g.conf().Warm.Model})
		if err != nil {
			return warm.Summary{}, fmt.Errorf("warm: %w", err)
		}
		items = append(items, its...)
	}
	j := g.startWarm("warm.files", g.conf().Warm.Tag, addr, items)
	select {
	case <-j.Done():
	case <-ctx.Done():
		j.Cancel()
		<-j.Done()
	}
	st := j.Status()
	return warm.Summary{Progress: st.Progress, Failures: st.Failures, Interrupted: st.State == "interrupted"}, ctx.Err()
}
