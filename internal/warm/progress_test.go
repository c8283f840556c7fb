package warm

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

func TestLinesAreThrottledAndCarryCounts(t *testing.T) {
	var buf bytes.Buffer
	l := NewLines(&buf, 2*time.Second)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	l.now = func() time.Time { return now }
	p := Progress{Total: 100, Started: start}
	for i := 1; i <= 50; i++ { // 50 items over 5 s: lines at 2 s and 4 s
		now = start.Add(time.Duration(i) * 100 * time.Millisecond)
		p.Done, p.Warmed, p.Cached = int64(i), int64(i-i/5), int64(i/5)
		l.Update(p)
	}
	l.Finish(Summary{Progress: Progress{Total: 100, Done: 100, Warmed: 90, Cached: 8, Failed: 2}})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 2 progress lines and a summary:\n%s", len(lines), buf.String())
	}
	if want := "warm: 21/100 (21%) 10.0/s eta 8s: warmed 17, already cached 4, failed 0"; lines[0] != want {
		t.Fatalf("line 1 = %q\nwant     %q", lines[0], want)
	}
	if !strings.HasPrefix(lines[1], "warm: 41/100 (41%) 10.0/s eta 6s:") {
		t.Fatalf("line 2 = %q", lines[1])
	}
	if want := "warm: done: warmed 90, already cached 8, failed 2"; lines[2] != want {
		t.Fatalf("summary = %q, want %q", lines[2], want)
	}
}

func TestSummaryLineSaysInterrupted(t *testing.T) {
	s := Summary{Progress: Progress{Total: 10, Done: 4, Warmed: 4}, Interrupted: true}
	if got := s.Line(); !strings.Contains(got, "interrupted: 6 not started") {
		t.Fatalf("Line = %q", got)
	}
}

func TestBarRendersCountsRateAndETA(t *testing.T) {
	var buf bytes.Buffer
	b := NewBar(&buf, 40)
	start := time.Now()
	b.Update(Progress{Total: 40, Done: 10, Warmed: 7, Cached: 2, Failed: 1, Started: start})
	p := Progress{Total: 40, Done: 20, Warmed: 15, Cached: 4, Failed: 1, Started: start}
	for range 2 { // the counts show one render late
		time.Sleep(150 * time.Millisecond) // past the bar's render throttle
		b.Update(p)
	}
	out := buf.String()
	for _, want := range []string{"20/40", "req/s", "warmed 15, already cached 4, failed 1", "\r"} {
		if !strings.Contains(out, want) {
			t.Fatalf("bar output lacks %q:\n%q", want, out)
		}
	}
	if !strings.Contains(out, ":") || !strings.Contains(out, "50%") {
		t.Fatalf("bar output lacks the percentage or the elapsed/ETA clock:\n%q", out)
	}
	b.Finish(Summary{Progress: Progress{Total: 40, Done: 40, Warmed: 35, Cached: 4, Failed: 1}})
	if out := buf.String(); !strings.Contains(out, "40/40") || !strings.HasSuffix(out, "warmed 35, already cached 4, failed 1\n") {
		t.Fatalf("finished bar:\n%q", out)
	}
}

// On a pseudo-terminal the reporter is the live bar, and it draws there;
// on a pipe it is plain lines.
func TestReporterPicksTheBarOnATerminal(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	r := NewReporter(tty, 10, time.Second)
	if _, ok := r.(*Bar); !ok {
		t.Fatalf("reporter on a terminal is %T, want *Bar", r)
	}
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		var all []byte
		for !bytes.Contains(all, []byte("warmed 9, already cached 0, failed 1")) {
			n, err := ptmx.Read(buf)
			if err != nil {
				break
			}
			all = append(all, buf[:n]...)
		}
		got <- string(all)
	}()
	r.Update(Progress{Total: 10, Done: 3, Warmed: 3, Started: time.Now()})
	r.Finish(Summary{Progress: Progress{Total: 10, Done: 10, Warmed: 9, Failed: 1}})
	select {
	case out := <-got:
		if !strings.Contains(out, "10/10") || !strings.Contains(out, "warmed 9, already cached 0, failed 1") {
			t.Fatalf("terminal shows:\n%q", out)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing drawn on the terminal")
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	if _, ok := NewReporter(pw, 10, time.Second).(*Lines); !ok {
		t.Fatal("reporter on a pipe is not plain lines")
	}
}
