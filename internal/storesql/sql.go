package storesql

import (
	"strconv"
	"strings"
	"time"

	"github.com/relayer-go/relayer/internal/tables"
)

// eligible is the predicate of a row that may be delivered at the instant $now:
// not parked, due, past its retry time, and not held by a live claim. Expiry is
// inclusive: a claim or retry time equal to now has passed.
const eligible = `parked_at IS NULL
    AND (deliver_at IS NULL OR deliver_at <= $now)
    AND (retry_at IS NULL OR retry_at <= $now)
    AND (claimed_until IS NULL OR claimed_until <= $now)`

// Eligible returns the predicate of a row that may be delivered at the
// instant now (a parameter such as "$1"): not parked, due, past its retry
// time, and not held by a live claim. Expiry is inclusive: a claim or retry
// time equal to now has passed.
func Eligible(now string) string { return strings.ReplaceAll(eligible, "$now", now) }

// HeldKeys returns a WITH clause naming paused the destinations a worker
// has paused (transport, destination), and held the keys (lane,
// ordering_key) that are held at the instant now (a parameter such as
// "$1"): one of their rows is parked or waiting for its retry, or, not
// parked, goes to a paused destination, which no worker sends to until its
// probe succeeds. A pause not refreshed within PauseStaleAfter (its worker
// crashed) does not count. The first part reads the held-key index alone;
// the second reads the rows of paused destinations, and nothing when none
// is.
func HeldKeys(n tables.Names, now string) string {
	return `WITH paused AS (
    SELECT DISTINCT transport, destination FROM ` + n.Pauses + `
    WHERE updated_at > now() - interval '` + strconv.FormatInt(PauseStaleAfter.Microseconds(), 10) + ` microseconds'),
held AS (
    SELECT lane, ordering_key FROM ` + n.Outbox + `
    WHERE lane IS NOT NULL AND (parked_at IS NOT NULL OR retry_at > ` + now + `)
    UNION
    SELECT o.lane, o.ordering_key FROM ` + n.Outbox + ` AS o
    JOIN paused AS p ON p.transport = o.transport AND p.destination = o.destination
    WHERE o.lane IS NOT NULL AND o.parked_at IS NULL)
`
}

// PauseStaleAfter is how long a published pause counts without being
// refreshed (store.PauseStaleAfter).
const PauseStaleAfter = time.Minute

// Unheld is the predicate of an ordered row (alias o) whose key is not held:
// no row of its key is parked or waiting for its retry. Only the first row of
// a key is ever sent, so only it can fail; while it waits or is parked, the
// key's later rows wait with it, and the lane's other keys go on.
func Unheld(outbox string) string {
	return `NOT EXISTS (SELECT 1 FROM ` + outbox + ` AS p
          WHERE p.lane = o.lane AND p.ordering_key = o.ordering_key
            AND (p.parked_at IS NOT NULL OR p.retry_at > now()))`
}

// The prefixes of lane and member lease names in the leases table: a lane's
// lease is "lane:<n>", a worker instance's membership "member:<instance>".
// The statements that build or match such names in SQL use them too.
const (
	LaneLeasePrefix   = "lane:"
	MemberLeasePrefix = "member:"
)
