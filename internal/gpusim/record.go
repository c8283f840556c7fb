package gpusim

import (
	"bytes"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// recordCap is how many requests Requests() remembers.
const recordCap = 256

// RecordedRequest is a request the server received, for adapter tests.
// Header holds every request header under fasthttp's canonical name
// ("Content-Type"); repeated headers are joined with ", ".
type RecordedRequest struct {
	Path          string
	Authorization string
	Header        map[string]string
	Body          []byte
	At            time.Time
}

// recSlot is one ring entry; its buffers are reused so recording does not
// allocate once the ring is warm. Headers are stored as "key\x00value\x00".
type recSlot struct {
	path    []byte
	headers []byte
	body    []byte
	at      time.Time
}

// recorder is a ring of the last recordCap requests.
type recorder struct {
	mu    sync.Mutex
	slots [recordCap]recSlot
	next  int // index of the slot to write next
	n     int // filled slots
}

func (r *recorder) record(ctx *fasthttp.RequestCtx, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sl := &r.slots[r.next]
	sl.path = append(sl.path[:0], ctx.Path()...)
	sl.headers = sl.headers[:0]
	for k, v := range ctx.Request.Header.All() {
		sl.headers = append(sl.headers, k...)
		sl.headers = append(sl.headers, 0)
		sl.headers = append(sl.headers, v...)
		sl.headers = append(sl.headers, 0)
	}
	sl.body = append(sl.body[:0], ctx.PostBody()...)
	sl.at = now
	r.next = (r.next + 1) % recordCap
	r.n = min(r.n+1, recordCap)
}

// snapshot returns the recorded requests, oldest first.
func (r *recorder) snapshot() []RecordedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]RecordedRequest, 0, r.n)
	for i := 0; i < r.n; i++ {
		sl := &r.slots[(r.next-r.n+i+recordCap)%recordCap]
		rr := RecordedRequest{
			Path:   string(sl.path),
			Header: make(map[string]string),
			Body:   bytes.Clone(sl.body),
			At:     sl.at,
		}
		if rr.Body == nil {
			rr.Body = []byte{}
		}
		for h := sl.headers; len(h) > 0; {
			k, rest, _ := bytes.Cut(h, []byte{0})
			v, rest, _ := bytes.Cut(rest, []byte{0})
			h = rest
			key := string(k)
			if prev, ok := rr.Header[key]; ok {
				rr.Header[key] = prev + ", " + string(v)
			} else {
				rr.Header[key] = string(v)
			}
		}
		rr.Authorization = rr.Header["Authorization"]
		out = append(out, rr)
	}
	return out
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next, r.n = 0, 0
}
