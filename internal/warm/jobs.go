package warm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"time"
)

// Job history: the last jobs are kept for a gateway's status; a job keeps
// its first failures only.
const (
	jobsKept    = 20
	failuresMax = 100
)

// JobStatus is a background warm-up as a gateway shows it.
type JobStatus struct {
	ID     string `json:"id"`
	Source string `json:"source"` // "warm.files" or the file name posted
	Tag    string `json:"tag,omitempty"`
	State  string `json:"state"` // running, done, interrupted
	Progress
	Finished *time.Time `json:"finished,omitempty"`
	Failures []Failure  `json:"failures,omitempty"`
}

// Job is a warm-up running in the background.
type Job struct {
	mu     sync.Mutex
	st     JobStatus
	cancel context.CancelFunc
	done   chan struct{}
}

// ID names the job.
func (j *Job) ID() string { return j.st.ID }

// Status is a snapshot of the job.
func (j *Job) Status() JobStatus {
	j.mu.Lock()
	defer j.mu.Unlock()
	st := j.st
	st.Failures = slices.Clone(st.Failures)
	return st
}

// Done is closed when the job has ended.
func (j *Job) Done() <-chan struct{} { return j.done }

// Cancel interrupts the job: no further item starts.
func (j *Job) Cancel() { j.cancel() }

// Jobs are a gateway's warm-ups, running and recent. The zero value is
// ready to use.
type Jobs struct {
	mu    sync.Mutex
	jobs  map[string]*Job
	order []string
}

// Start runs items against t in the background and returns the job; when
// it ends, finished (if not nil) gets its summary (at most the first
// failuresMax failures).
func (w *Jobs) Start(source, tag string, items []Item, t Target, opt Options, finished func(*Job, Summary)) *Job {
	ctx, cancel := context.WithCancel(context.Background())
	var b [6]byte
	_, _ = rand.Read(b[:])
	j := &Job{cancel: cancel, done: make(chan struct{}),
		st: JobStatus{ID: "warm-" + hex.EncodeToString(b[:]), Source: source, Tag: tag, State: "running",
			Progress: Progress{Total: int64(len(items)), Started: time.Now()}}}
	w.add(j)
	opt.OnProgress = func(p Progress) {
		j.mu.Lock()
		j.st.Progress = p
		j.mu.Unlock()
	}
	go func() {
		defer close(j.done)
		defer cancel()
		sum := Run(ctx, items, t, opt)
		sum.Failures = sum.Failures[:min(len(sum.Failures), failuresMax)]
		now := time.Now()
		j.mu.Lock()
		j.st.Progress, j.st.Finished, j.st.State = sum.Progress, &now, "done"
		if sum.Interrupted {
			j.st.State = "interrupted"
		}
		j.st.Failures = sum.Failures
		j.mu.Unlock()
		if finished != nil {
			finished(j, sum)
		}
	}()
	return j
}

func (w *Jobs) add(j *Job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.jobs == nil {
		w.jobs = map[string]*Job{}
	}
	w.jobs[j.st.ID] = j
	w.order = append(w.order, j.st.ID)
	for len(w.order) > jobsKept {
		old := w.jobs[w.order[0]]
		select {
		case <-old.done:
		default:
			return // the oldest still runs: keep it
		}
		delete(w.jobs, w.order[0])
		w.order = w.order[1:]
	}
}

// Get returns the job id, or nil.
func (w *Jobs) Get(id string) *Job {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.jobs[id]
}

// List returns the jobs kept, oldest first.
func (w *Jobs) List() []JobStatus {
	w.mu.Lock()
	ids := slices.Clone(w.order)
	w.mu.Unlock()
	out := make([]JobStatus, 0, len(ids))
	for _, id := range ids {
		if j := w.Get(id); j != nil {
			out = append(out, j.Status())
		}
	}
	return out
}

// Stop interrupts every running job: no further item starts; those in
// flight end with the server's shutdown.
func (w *Jobs) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range w.jobs {
		j.cancel()
	}
}
