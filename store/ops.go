package store

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/storesql"
)

// Operator reads: what the command line and consoles show. None of them is on
// a hot path.

// LeaseRow is one live lease: a worker's membership ("member:<instance>"), a
// lane ("lane:<n>"), or a singleton worker's ([RecoveryLeaseName], [CleanupLeaseName]).
type LeaseRow struct {
	Name      string
	Owner     string
	Token     uuid.UUID
	ExpiresAt time.Time
}

// The names of the singleton workers' leases, which let one recovery and
// one cleanup instance per outbox work at a time.
const (
	RecoveryLeaseName = "recovery"
	CleanupLeaseName  = "cleanup"
)

// Lane returns the lane whose lease l is, or ok false when l is not a lane's
// lease ("lane:<n>").
func (l LeaseRow) Lane() (lane int, ok bool) {
	rest, ok := strings.CutPrefix(l.Name, storesql.LaneLeasePrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || strconv.Itoa(n) != rest {
		return 0, false // not a name a lane's lease is written under
	}
	return n, true
}

// Member returns the worker instance whose membership lease l is, or ok false
// when l is not a membership lease ("member:<instance>").
func (l LeaseRow) Member() (instance string, ok bool) {
	return strings.CutPrefix(l.Name, storesql.MemberLeasePrefix)
}

// MemberLanes is a live ordered worker and the lanes it holds.
type MemberLanes struct {
	// Instance names the member's lease ("member:<instance>").
	Instance string
	// Owner is the worker's name; ExpiresAt ends its membership lease.
	Owner     string
	ExpiresAt time.Time
	// Lanes are the lanes whose leases record Owner as their owner, sorted.
	Lanes []int
}

// GroupLanes groups live leases by member, the one answer of every tool
// (the command, the console): each membership lease with the lanes whose
// leases record its worker's name as owner — a Runner's lane leases carry
// its lane group's token, not the member's, so the name is what ties them,
// and live workers' names are unique — and, sorted, the lanes held under a
// name no live member has.
func GroupLanes(leases []LeaseRow) (members []MemberLanes, orphans []int) {
	byOwner := map[string]int{}
	for _, l := range leases {
		if id, ok := l.Member(); ok {
			byOwner[l.Owner] = len(members)
			members = append(members, MemberLanes{Instance: id, Owner: l.Owner, ExpiresAt: l.ExpiresAt, Lanes: []int{}})
		}
	}
	for _, l := range leases {
		lane, ok := l.Lane()
		if !ok {
			continue
		}
		if i, live := byOwner[l.Owner]; live {
			members[i].Lanes = append(members[i].Lanes, lane)
		} else {
			orphans = append(orphans, lane)
		}
	}
	for i := range members {
		slices.Sort(members[i].Lanes)
	}
	slices.Sort(orphans)
	return members, orphans
}

// Members returns the live members' lease names ("member:<instance>") in
// sorted order, writing nothing: the ordered workers that share the outbox's
// lanes now, as they see one another between heartbeats.
func (s *Store) Members(ctx context.Context) ([]string, error) {
	return storesql.QueryRows(ctx, s.db, "live members", s.q.liveMembers, nil, func(rows *sql.Rows, name *string) error {
		return rows.Scan(name)
	})
}

// LiveLeases returns the leases that have not expired, by name.
func (s *Store) LiveLeases(ctx context.Context) ([]LeaseRow, error) {
	return storesql.QueryRows(ctx, s.db, "live leases", s.q.listLeases, nil, func(rows *sql.Rows, l *LeaseRow) error {
		err := rows.Scan(&l.Name, &l.Owner, &l.Token, &l.ExpiresAt)
		l.ExpiresAt = l.ExpiresAt.UTC()
		return err
	})
}
