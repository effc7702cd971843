package dispatch

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLaneShareSplitsEvenly(t *testing.T) {
	t.Parallel()
	for _, lanes := range []int{1, 2, 3, 7, 32, 100, 65536} {
		for members := 1; members <= 9; members++ {
			seen := make([]int, lanes)
			minSize, maxSize := lanes+1, -1
			for rank := range members {
				share := laneShare(rank, members, lanes)
				minSize, maxSize = min(minSize, len(share)), max(maxSize, len(share))
				for _, l := range share {
					seen[l]++
				}
			}
			for l, n := range seen {
				if n != 1 {
					t.Fatalf("lanes %d, members %d: lane %d assigned %d times", lanes, members, l, n)
				}
			}
			if maxSize-minSize > 1 {
				t.Errorf("lanes %d, members %d: shares from %d to %d lanes", lanes, members, minSize, maxSize)
			}
		}
	}
	if laneShare(3, 3, 10) != nil || laneShare(0, 0, 10) != nil {
		t.Error("out-of-range rank got lanes")
	}
}

func TestOrderedOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		o     OrderedOptions
		field string
	}{
		{OrderedOptions{Concurrency: -1}, "Concurrency"},
		{OrderedOptions{Concurrency: 65}, "Concurrency"},
		{OrderedOptions{LeaseDuration: 500 * time.Millisecond}, "LeaseDuration"},
		{OrderedOptions{LeaseDuration: 2 * time.Hour}, "LeaseDuration"},
		{OrderedOptions{PollInterval: -time.Second}, "PollInterval"},
		{OrderedOptions{LeaseDuration: 3 * time.Second, PollInterval: time.Second}, "PollInterval"},
		{OrderedOptions{BatchSize: -1}, "BatchSize"},
		{OrderedOptions{BatchSize: 10001}, "BatchSize"},
	} {
		if err := c.o.Validate(); !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", c.o, err, c.field)
		}
	}
	for _, ok := range []OrderedOptions{{}, {Concurrency: 1}, {Concurrency: 64}, {LeaseDuration: time.Second}, {LeaseDuration: time.Hour, PollInterval: 19 * time.Minute}} {
		if err := ok.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", ok, err)
		}
	}
	o, err := loadSection(MapSource(map[string]string{"Concurrency": "3", "LeaseDuration": "10s", "PollInterval": "500ms", "BatchSize": "50"}), (*OrderedOptions).options)
	if err != nil || o.Concurrency != 3 || o.LeaseDuration != 10*time.Second || o.PollInterval != 500*time.Millisecond || o.BatchSize != 50 {
		t.Errorf("LoadOrderedOptions = %+v, %v", o, err)
	}
	if _, err := loadSection(MapSource(map[string]string{"PollInterval": "20s"}), (*OrderedOptions).options); err == nil || !strings.Contains(err.Error(), "PollInterval") {
		t.Errorf("a poll interval over a third of the default lease: %v", err)
	}
}

// A Wake that finds every slot busy is kept for when a batch ends, instead of
// leaving the rows it was for to the next poll.
func TestWakeWithEverySlotBusyProbesWhenOneIsFree(t *testing.T) {
	o := &orderedWorker{opts: OrderedOptions{Concurrency: 1}}
	g := newLaneGroup(o)
	s := &groupLoop{g: g, running: map[int]bool{3: true}, held: map[int]bool{}, solo: map[int]bool{}}
	s.slots = []*laneSlot{{}} // the only slot, running lane 3
	s.probedAt = time.Now()
	s.progressAt = s.probedAt.Add(time.Millisecond) // busy with woken lanes
	o.Wake()
	if !s.refill(context.Background()) {
		t.Fatal("refill with a batch running reports nothing to wait for")
	}
	if !g.probeNow.Load() {
		t.Error("the Wake was dropped while every slot was busy")
	}
}

// A lane that a commit woke while its batch was in flight, perhaps after
// the batch read it, goes again once the batch ends, rather than waiting
// for the next commit or probe.
func TestLaneWokenDuringItsBatchGoesAgainAfterIt(t *testing.T) {
	o := &orderedWorker{opts: OrderedOptions{Concurrency: 1}}
	o.assigned.Store(&[]int{3, 4})
	g := newLaneGroup(o)
	g.live.Store(&[]*orderedWorker{o})
	sl := &laneSlot{}
	s := &groupLoop{g: g, running: map[int]bool{3: true}, again: map[int]bool{}, held: map[int]bool{},
		solo: map[int]bool{}, began: map[*laneSlot]time.Time{sl: time.Now()}, together: 1}
	s.slots = []*laneSlot{sl} // the only slot, running lane 3
	s.pending = []int{3}      // woken meanwhile
	s.startPending(context.Background())
	if len(s.pending) != 0 {
		t.Fatalf("pending %v while lane 3's batch runs", s.pending)
	}
	s.finished(laneDone{slot: sl, lanes: []int{3}, batchResult: batchResult{held: []int{3}}})
	if !slices.Equal(s.pending, []int{3}) {
		t.Errorf("after its batch, pending %v, want lane 3 again", s.pending)
	}
	// A lane not woken during its batch is not batched again for nothing.
	s.pending, s.running[4] = nil, true
	s.finished(laneDone{slot: sl, lanes: []int{4}, batchResult: batchResult{held: []int{4}}})
	if len(s.pending) != 0 {
		t.Errorf("pending %v after a batch no commit woke again", s.pending)
	}
}
