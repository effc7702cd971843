// Package vocab holds the words operators read about an outbox, once, for
// the relayer command and the console alike: the classes its rows fall into
// and the longest wait. Each word's comment names the store figure it shows.
package vocab

const (
	// Due: rows that may be sent now (store.Stats.Eligible less
	// store.Stats.Blocked; store.DestinationBacklog.Due).
	Due = "due"
	// Blocked: eligible ordered rows behind a parked or retrying row of
	// their key (store.Stats.Blocked).
	Blocked = "blocked"
	// Scheduled: rows whose delivery time is ahead (store.Stats.Scheduled).
	Scheduled = "scheduled"
	// BeingSent: rows a worker's live claim holds (store.Stats.Claimed).
	BeingSent = "being sent"
	// WaitingForRetry: rows whose last send failed, waiting for their retry
	// time (store.Stats.Retrying).
	WaitingForRetry = "waiting for retry"
	// Parked: rows parked with their key (store.Stats.Parked).
	Parked = "parked"
	// Dead: dead letters (store.Stats.Dead).
	Dead = "dead"
	// LongestWait: how long the longest-waiting due row has waited
	// (store.Stats.OldestDueAt).
	LongestWait = "longest wait"
)

// All lists the words in the order the backlog shows them.
var All = []string{Due, Blocked, Scheduled, BeingSent, WaitingForRetry, Parked, Dead, LongestWait}
