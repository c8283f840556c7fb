package admission

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeBucket is a Bucket on a clock the test moves.
func fakeBucket(rate, burst float64) (*Bucket, *int64) {
	var now int64
	b := NewBucket(rate, burst)
	b.now = func() int64 { return now }
	return b, &now
}

// slack is added to the clock's moves and allowed in the waits, so that
// the float arithmetic's rounding (which may differ between platforms)
// cannot change an outcome.
const slack = time.Microsecond

// checkWait fails unless got is want, give or take slack.
func checkWait(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if got < want-slack || got > want+slack {
		t.Fatalf("%s: wait %v, want %v", what, got, want)
	}
}

func TestBucketTake(t *testing.T) {
	b, now := fakeBucket(2, 3) // 2 tokens a second, 3 at most
	for i := range 3 {
		if w := b.Take(1); w != 0 {
			t.Fatalf("take %d of a full bucket of 3: wait %v", i+1, w)
		}
	}
	// Empty: the wait until one token is there, and nothing is taken.
	for range 2 {
		checkWait(t, "take 1 of an empty bucket at 2/s", b.Take(1), 500*time.Millisecond)
	}
	*now += int64(250 * time.Millisecond)
	checkWait(t, "half a token there", b.Take(1), 250*time.Millisecond)
	*now += int64(250*time.Millisecond + slack)
	if w := b.Take(1); w != 0 {
		t.Fatalf("a token refilled: wait %v", w)
	}
	// The refill stops at burst.
	*now += int64(time.Hour)
	if w := b.Take(3); w != 0 {
		t.Fatalf("take 3 after an hour: wait %v", w)
	}
	checkWait(t, "half a token once burst was taken (the refill stops at burst)", b.Take(0.5), 250*time.Millisecond)
}

func TestBucketTakeOverBurst(t *testing.T) {
	b, now := fakeBucket(1, 10)
	// More than the whole budget takes all of it, once it is full.
	if w := b.Take(25); w != 0 {
		t.Fatalf("take 25 of a full bucket of 10: wait %v", w)
	}
	checkWait(t, "take 1 after the whole budget went", b.Take(1), time.Second)
	*now += int64(4*time.Second + slack)
	checkWait(t, "take 25 of 4 tokens (until full)", b.Take(25), 6*time.Second)
	if w := b.Take(4); w != 0 {
		t.Fatalf("the refused take took something: wait %v for the 4 tokens there", w)
	}
}

func TestBucketRefundAndDrain(t *testing.T) {
	b, now := fakeBucket(1, 2)
	if w := b.Take(2); w != 0 {
		t.Fatalf("take 2 of 2: wait %v", w)
	}
	b.Refund(1)
	if w := b.Take(1); w != 0 {
		t.Fatalf("take the refunded token: wait %v", w)
	}
	b.Refund(100) // up to burst only
	if w := b.Take(2); w != 0 {
		t.Fatalf("take 2 after a refund: wait %v", w)
	}
	checkWait(t, "take 1 after a refund of 100 and a take of 2 (the refund stops at burst)", b.Take(1), time.Second)
	*now += int64(10 * time.Second)
	b.Drain()
	checkWait(t, "take 1 of a drained bucket", b.Take(1), time.Second)
	*now += int64(time.Second + slack)
	if w := b.Take(1); w != 0 {
		t.Fatalf("a drained bucket refills from the drain: wait %v", w)
	}
}

func TestBucketRealClock(t *testing.T) {
	b := NewBucket(1e-3, 1) // a token every 1,000s: none refills during the test
	if w := b.Take(1); w != 0 {
		t.Fatalf("take 1 of a new bucket: wait %v", w)
	}
	if w := b.Take(1); w < 990*time.Second || w > 1000*time.Second {
		t.Fatalf("take 1 of an empty bucket at 1/1000s: wait %v", w)
	}
}

func TestBucketConcurrent(t *testing.T) {
	b := NewBucket(1e-6, 100) // no refill to speak of during the test
	var got atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if b.Take(1) == 0 {
					got.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got.Load() != 100 {
		t.Fatalf("400 takes of 1 from a bucket of 100: %d went through", got.Load())
	}
}
