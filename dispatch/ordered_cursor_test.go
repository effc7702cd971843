package dispatch

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// TestSettledCountsRowsGoneFromReads checks which of a lane's head rows a
// committed batch took out of reads for good, from the first: the cursor
// may pass those and no others.
func TestSettledCountsRowsGoneFromReads(t *testing.T) {
	t.Parallel()
	retry := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := func(keys ...string) []store.Row {
		out := make([]store.Row, len(keys))
		for i, k := range keys {
			out[i] = store.Row{Message: relayer.Message{ID: uuid.New(), Key: k}}
		}
		return out
	}
	fail := func(r store.Row, at time.Time) laneFailure {
		return laneFailure{Failure: store.Failure{ID: r.ID, RetryAt: at}}
	}
	for _, tc := range []struct {
		name      string
		read      []store.Row
		admitted  int
		outcomes  []rowOutcome
		failures  func(rs []store.Row) []laneFailure
		gone      int
		wantRetry bool
		held      []string
	}{{
		name: "all sent", read: rows("a", "b", "a"), admitted: 3,
		outcomes: []rowOutcome{rowSent, rowSent, rowSent}, gone: 3,
	}, {
		name: "a row not admitted stops it", read: rows("a", "b", "c"), admitted: 2,
		outcomes: []rowOutcome{rowSent, rowSent}, gone: 2,
	}, {
		name: "a key that waits untouched stops it", read: rows("a", "b", "c"), admitted: 3,
		outcomes: []rowOutcome{rowSent, rowUntouched, rowSent}, gone: 1,
	}, {
		name: "a failure with a retry time hides its key", read: rows("a", "b", "a", "c"), admitted: 4,
		outcomes: []rowOutcome{rowFailed, rowSent, rowUntouched, rowSent}, gone: 4, wantRetry: true, held: []string{"a"},
		failures: func(rs []store.Row) []laneFailure { return []laneFailure{fail(rs[0], retry)} },
	}, {
		name: "a failure to retry at once hides nothing", read: rows("a", "b"), admitted: 2,
		outcomes: []rowOutcome{rowFailed, rowSent}, gone: 0,
		failures: func(rs []store.Row) []laneFailure { return []laneFailure{fail(rs[0], time.Time{})} },
	}, {
		name: "a parked row hides its key", read: rows("a", "a", "b"), admitted: 3,
		outcomes: []rowOutcome{rowFailed, rowUntouched, rowSent}, gone: 3, held: []string{"a"},
		failures: func(rs []store.Row) []laneFailure {
			f := fail(rs[0], time.Time{})
			f.park = true
			return []laneFailure{f}
		},
	}, {
		name: "a buried row is gone but its key is not held", read: rows("a", "a", "b"), admitted: 3,
		outcomes: []rowOutcome{rowFailed, rowUntouched, rowSent}, gone: 1,
		failures: func(rs []store.Row) []laneFailure {
			f := fail(rs[0], retry)
			f.row = &rs[0]
			return []laneFailure{f}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := &laneBatch{rows: tc.read[:tc.admitted], outcomes: tc.outcomes}
			if tc.failures != nil {
				p.failures = tc.failures(tc.read)
			}
			gone, retryAt, held := settled(tc.read, p)
			if gone != tc.gone || retryAt.Equal(retry) != tc.wantRetry || !slices.Equal(held, tc.held) {
				t.Errorf("settled = %d, %v, %q; want %d, retry %v, %q", gone, retryAt, held, tc.gone, tc.wantRetry, tc.held)
			}
		})
	}
	if gone, _, _ := settled(rows("a"), nil); gone != 0 {
		t.Errorf("settled of a lane with nothing admitted = %d, want 0", gone)
	}
}

// Lanes read from their start together, as at a worker's start, come due
// for their next such read one by one, spread over half of fullReadEvery and
// none later than it; later reads are recorded when they happen.
func TestLanesReadTogetherComeDueApart(t *testing.T) {
	t.Parallel()
	const lanes = 32
	var c laneCursors
	from := make([]workerstore.LaneCursor, lanes)
	for l := range lanes {
		from[l] = workerstore.NewLaneCursor(l)
	}
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	c.readFromStart(from, t0, []int{7})
	if _, ok := c.fullAt[7]; ok {
		t.Fatalf("lane 7, excepted, recorded as read from its start")
	}
	var due []time.Time
	for l := range lanes {
		if l == 7 {
			continue
		}
		at := c.fullAt[l].Add(fullReadEvery)
		if at.After(t0.Add(fullReadEvery)) || at.Before(t0.Add(fullReadEvery/2)) {
			t.Errorf("lane %d due %s after its read, want within [%s, %s]", l, at.Sub(t0), fullReadEvery/2, fullReadEvery)
		}
		due = append(due, at)
	}
	slices.SortFunc(due, time.Time.Compare)
	for i := 1; i < len(due); i++ {
		if gap := due[i].Sub(due[i-1]); gap < fullReadEvery/2/lanes {
			t.Errorf("two lanes come due %s apart, want at least %s", gap, fullReadEvery/2/lanes)
		}
	}
	t1 := t0.Add(20 * time.Second)
	c.readFromStart(from[3:4], t1, nil)
	if got := c.fullAt[3]; !got.Equal(t1) {
		t.Errorf("lane 3's second read from its start recorded at %s, want %s", got.Sub(t0), t1.Sub(t0))
	}
}

// While batches make progress, a probe that found only lanes a batch in
// flight or a commit's wake-up accounts for makes the next wait twice as
// long, up to the poll; one that found another lane brings it back to
// busyProbeGap.
func TestProbeGapBacksOffWhileCommitsAnnounceEveryLane(t *testing.T) {
	running := map[int]bool{1: true}
	poll := time.Second
	for _, c := range []struct {
		name         string
		gap          time.Duration
		found, woken []int
		want         time.Duration
	}{
		{"nothing found", busyProbeGap, nil, nil, 2 * busyProbeGap},
		{"a lane in flight", busyProbeGap, []int{1}, nil, 2 * busyProbeGap},
		{"a lane a commit woke", 4 * busyProbeGap, []int{2}, []int{2}, 8 * busyProbeGap},
		{"up to the poll", 800 * time.Millisecond, []int{1}, nil, poll},
		{"another process's lane", poll, []int{1, 3}, []int{2}, busyProbeGap},
	} {
		if got := nextProbeGap(c.gap, c.found, c.woken, running, poll); got != c.want {
			t.Errorf("%s: next gap %s, want %s", c.name, got, c.want)
		}
	}
	if got := nextProbeGap(busyProbeGap, nil, nil, nil, time.Millisecond); got != busyProbeGap {
		t.Errorf("with a 1 ms poll: next gap %s, want %s", got, busyProbeGap)
	}
}
