package warm

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Reporter shows a run's progress: a live bar on a terminal, periodic plain
// lines otherwise. Update is safe for concurrent use.
type Reporter interface {
	Update(Progress)
	Finish(Summary)
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// NewReporter returns a bar when w is a terminal, else plain lines every
// `every`.
func NewReporter(w io.Writer, total int64, every time.Duration) Reporter {
	if IsTerminal(w) {
		return NewBar(w, total)
	}
	return NewLines(w, every)
}

// Counts is the counts part of a progress line.
func (p Progress) Counts() string {
	s := fmt.Sprintf("warmed %d, already cached %d, failed %d", p.Warmed, p.Cached, p.Failed)
	if p.Pending > 0 {
		s += fmt.Sprintf(", would warm %d", p.Pending)
	}
	return s
}

// SummaryLine is the final line of a run.
func (s Summary) Line() string {
	line := s.Counts()
	if s.Interrupted {
		line += fmt.Sprintf(" (interrupted: %d not started; run again to resume)", s.Total-s.Done)
	}
	return line
}

// Bar is the terminal reporter, a progressbar with done/total, rate, ETA
// and the counts.
type Bar struct {
	w   io.Writer
	bar *progressbar.ProgressBar
}

// NewBar renders to w (a terminal; or any writer, for tests).
func NewBar(w io.Writer, total int64) *Bar {
	return &Bar{w: w, bar: progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("warming"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("req"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionSetWidth(24),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetRenderBlankState(true),
	)}
}

// Update implements Reporter. Both calls render within the bar's throttle,
// so the counts may show one render late.
func (b *Bar) Update(p Progress) {
	_ = b.bar.Set64(p.Done)
	b.bar.Describe(p.Counts())
}

// Finish implements Reporter.
func (b *Bar) Finish(s Summary) {
	_ = b.bar.Set64(s.Done)
	b.bar.Describe(s.Counts())
	_ = b.bar.Exit()
	fmt.Fprintln(b.w)
}

// Lines is the reporter off a terminal: one line every period, and one at
// the end.
type Lines struct {
	w     io.Writer
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	last time.Time
}

// NewLines writes to w at most once per every.
func NewLines(w io.Writer, every time.Duration) *Lines {
	return &Lines{w: w, every: every, now: time.Now}
}

// Update implements Reporter.
func (l *Lines) Update(p Progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if l.last.IsZero() {
		l.last = now // the first line comes after a period
		return
	}
	if now.Sub(l.last) < l.every {
		return
	}
	l.last = now
	fmt.Fprintln(l.w, p.Line(now))
}

// Finish implements Reporter.
func (l *Lines) Finish(s Summary) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintln(l.w, "warm: done: "+s.Line())
}

// Line is a plain progress line: done/total, rate, ETA and counts.
func (p Progress) Line(now time.Time) string {
	el := now.Sub(p.Started).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(p.Done) / el
	}
	pct := 100.0
	if p.Total > 0 {
		pct = 100 * float64(p.Done) / float64(p.Total)
	}
	eta := "?"
	if rate > 0 {
		eta = (time.Duration(float64(p.Total-p.Done) / rate * float64(time.Second))).Round(time.Second).String()
	}
	return fmt.Sprintf("warm: %d/%d (%.0f%%) %.1f/s eta %s: %s", p.Done, p.Total, pct, rate, eta, p.Counts())
}
