package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"frontdoor/bench/internal/load"
)

// embeddingRuns measures /v1/embeddings batches of 8 inputs (384
// dimensions) on base (direct, bare proxy, pass-through, the default
// config's process): the default config missing all 8 inputs (each new),
// hitting all 8, and with 5 cached and 3 new (X-Cache partial: the 3 go to
// gpusim, which embeds any model name; qwen3-8b is the one the node lists).
func embeddingRuns(o opts, simPid int, base []target) error {
	direct, bare, pass, def := base[0], base[1], base[2], base[3]
	fixed := []string{"How do I reset my password?", "Where is my order?", "What are your opening hours?",
		"Can I change my delivery address?", "How do I cancel my subscription?", "Do you ship abroad?",
		"What payment methods do you accept?", "How do I contact support?"}
	var seq atomic.Uint64
	// batch is the 8 inputs, of which the last fresh are new ones.
	batch := func(fresh int) []byte {
		var b bytes.Buffer
		b.WriteString(`{"model":"qwen3-8b","dimensions":384,"input":[`)
		for i := range 8 {
			if i > 0 {
				b.WriteByte(',')
			}
			if i < 8-fresh {
				fmt.Fprintf(&b, "%q", fixed[i])
			} else {
				fmt.Fprintf(&b, `"Order %d: where is it?"`, seq.Add(1))
			}
		}
		b.WriteString(`]}`)
		return b.Bytes()
	}
	check := func(status int, b []byte) error {
		if status != 200 || !bytes.Contains(b, []byte(`"object":"list"`)) {
			return fmt.Errorf("status %d: %.200s", status, b)
		}
		return nil
	}
	miss, hit, partial := def, def, def
	miss.name, miss.xcache = "default config, miss (8 new)", "miss"
	hit.name, hit.xcache = "default config, hit (8 cached)", "hit-exact"
	partial.name, partial.xcache = "default config, partial (5 cached, 3 new)", "partial"
	pass.name += ", embeddings" // cache off: every input goes to gpusim
	ts := []target{direct, bare, pass, miss, hit, partial}
	for i := range ts {
		ts[i].url = strings.Replace(ts[i].url, "/v1/chat/completions", "/v1/embeddings", 1)
	}
	fresh := map[string]int{miss.name: 8, partial.name: 3}

	// Prime: the 8 fixed inputs are cached once a batch of them hits.
	var err error
	for i := 0; i < 100; i++ {
		var res load.Result
		res, err = load.Run(load.Target{URL: ts[4].url, Body: batch(0), Check: check, Header: [2]string{"X-Cache", "hit-exact"}}, 1, 50*time.Millisecond, 0)
		if err == nil && res.Errors == 0 {
			break
		}
		if err == nil {
			err = fmt.Errorf("%d of %d answers were no hit", res.Errors, res.Errors+res.Requests)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("priming the embeddings hit: %w", err)
	}

	fmt.Println()
	fmt.Println("/v1/embeddings, a batch of 8 inputs, 384 dimensions (floats, about 30 KB an answer):")
	fmt.Println()
	printHeader()
	for _, c := range []int{1, o.conc} {
		err := measure(o, simPid, "embeddings", c, ts, direct.name, bare.name, func(t target) load.Target {
			lt := load.Target{URL: t.url, Body: batch(0), Check: check}
			if n := fresh[t.name]; n > 0 {
				lt.NextBody = func() []byte { return batch(n) }
			}
			return lt
		})
		if err != nil {
			return err
		}
	}
	return nil
}
