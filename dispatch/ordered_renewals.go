package dispatch

import (
	"slices"
	"sync"
	"time"
)

// laneRenewals records, for each lane, when the group's lease on it was last
// renewed and under which owner name. A batch whose lanes were all renewed
// under their current owners within the last third of the lease locks their
// lease rows (store.Store.LockLaneLeases) instead of renewing them: a row
// lock rather than a new version of each lease row per batch, which an old
// snapshot held elsewhere would keep from vacuum, slowing every statement
// that reads the leases. A lane is renewed again once a third of its lease
// has passed, so a lease still runs at least two thirds of its duration
// beyond any batch that starts, and releasing a lane works as before.
type laneRenewals struct {
	mu sync.Mutex
	at map[int]renewal
}

// renewal is a lane's last renewal: until is a local time before which the
// lease cannot have expired (its database expiry, measured no later than the
// renewing transaction began), and owner the name it was renewed under.
type renewal struct {
	until time.Time
	owner string
}

// fresh reports whether each of lanes was renewed under its owner in owners
// (owners[i] for lanes[i]) and keeps its lease for more than left.
func (r *laneRenewals) fresh(lanes []int, owners []string, left time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	by := time.Now().Add(left)
	for i, l := range lanes {
		rn, ok := r.at[l]
		if !ok || rn.owner != owners[i] || !rn.until.After(by) {
			return false
		}
	}
	return len(lanes) > 0
}

// renewed records that a committed transaction renewed the leases of held,
// those of lanes it held, each under its owner in owners (owners[i] for
// lanes[i]), until at least until.
func (r *laneRenewals) renewed(held, lanes []int, owners []string, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[int]renewal{}
	}
	for i, l := range lanes {
		if slices.Contains(held, l) {
			r.at[l] = renewal{until: until, owner: owners[i]}
		}
	}
}

// forget drops the records of lanes: their next batch renews their leases.
func (r *laneRenewals) forget(lanes []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range lanes {
		delete(r.at, l)
	}
}
