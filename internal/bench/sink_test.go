package bench

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// The longest pause is the longest gap between consecutive deliveries
// from the first commit to the last, a stall that lasts until the last
// commit included; deliveries outside that span do not count.
func TestLongestPause(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	commits := []committed{{id: uuid.New(), at: at(0)}, {id: uuid.New()}, {id: uuid.New(), at: at(1000)}}
	for _, c := range []struct {
		name       string
		deliveries []int // ms after the first commit
		want       time.Duration
	}{
		{"steady, the first delivery late", []int{30, 40, 50, 60, 990}, 930 * time.Millisecond},
		{"a stall in the middle", []int{5, 10, 400, 405, 600, 800, 1000}, 390 * time.Millisecond},
		{"stalled until the last commit", []int{5, 10, 20}, 980 * time.Millisecond},
		{"deliveries after the last commit do not count", []int{5, 500, 995, 1500, 3000}, 495 * time.Millisecond},
	} {
		s := &sink{}
		for _, ms := range c.deliveries {
			s.deliveries = append(s.deliveries, delivery{id: uuid.New(), at: at(ms)})
		}
		if got := s.longestPause(commits); got != c.want {
			t.Errorf("%s: longest pause %s, want %s", c.name, got, c.want)
		}
	}
}
