package bench

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// The longest pause is the longest time without a first delivery while a
// committed message waited: stalls of the commits themselves, repeated
// deliveries and pauses within the warm-up do not count.
func TestLongestPause(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type sent struct{ msg, at int } // message index (commits), ms after t0
	for _, c := range []struct {
		name       string
		commits    []int // ms after t0, one per message
		deliveries []sent
		warmUp     time.Duration
		want, at   time.Duration
	}{
		{"a stall while messages waited", []int{0, 10, 20, 30}, []sent{{0, 5}, {1, 15}, {2, 400}, {3, 405}}, 0,
			380 * time.Millisecond, 400 * time.Millisecond},
		{"the commits stalled, nothing waited", []int{0, 10, 500, 510}, []sent{{0, 5}, {1, 15}, {2, 506}, {3, 515}}, 0,
			6 * time.Millisecond, 506 * time.Millisecond},
		{"a message overtaken waits from the last delivery", []int{0, 5}, []sent{{1, 10}, {0, 300}}, 0,
			290 * time.Millisecond, 300 * time.Millisecond},
		{"a repeated delivery is no delivery", []int{0, 10}, []sent{{0, 5}, {0, 100}, {1, 200}}, 0,
			190 * time.Millisecond, 200 * time.Millisecond},
		{"delivered before its commit returned", []int{0, 50}, []sent{{0, 4}, {1, 40}}, 0,
			4 * time.Millisecond, 4 * time.Millisecond},
		{"a pause that ends within the warm-up does not count", []int{0, 10, 20, 30}, []sent{{0, 300}, {1, 310}, {2, 320}, {3, 480}},
			400 * time.Millisecond, 160 * time.Millisecond, 480 * time.Millisecond},
	} {
		commits := make([]committed, len(c.commits))
		for i, at := range c.commits {
			commits[i] = committed{id: uuid.New(), at: ms(at)}
		}
		commits = append(commits, committed{id: uuid.New()}) // no commit time: not counted
		s := &sink{}
		for _, d := range c.deliveries {
			s.deliveries = append(s.deliveries, delivery{id: commits[d.msg].id, at: ms(d.at)})
		}
		if got, at := s.longestPause(commits, c.warmUp); got != c.want || at != c.at {
			t.Errorf("%s: longest pause %s at %s, want %s at %s", c.name, got, at, c.want, c.at)
		}
	}
}
