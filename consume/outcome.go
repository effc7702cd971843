package consume

import (
	"fmt"
	"sync/atomic"
)

// Outcome is what [Consumer.Handle] did with a delivery.
type Outcome int

// The outcomes of a delivery.
const (
	// Handled: the handler ran and its effects committed; acknowledged.
	Handled Outcome = iota + 1
	// Duplicate: the inbox held the message already; acknowledged without
	// running the handler.
	Duplicate
	// Retried: the handler failed, or the transaction did not commit; the
	// broker delivers the message again.
	Retried
	// DeadLettered: the message left delivery for good (attempts spent,
	// a permanent error, or not a Relayer message).
	DeadLettered
	// Abandoned: ctx ended before the transaction committed; nothing was
	// committed nor acknowledged, and the broker delivers the message again.
	Abandoned
	// Held: the handler failed, and the consumer holds the message's key
	// (see [Consumer.StartHeldKeys]): the message waits in the consumer's
	// database, recorded in the inbox, to be tried again from there before
	// any later message of its key; acknowledged.
	Held
	// Waiting: the message's key is held; the message was recorded in the
	// inbox and waits behind the key's failing message in the consumer's
	// database, without its handler run yet; acknowledged.
	Waiting
)

func (o Outcome) String() string {
	switch o {
	case Handled:
		return "handled"
	case Duplicate:
		return "duplicate"
	case Retried:
		return "retried"
	case DeadLettered:
		return "dead-lettered"
	case Abandoned:
		return "abandoned"
	case Held:
		return "held"
	case Waiting:
		return "waiting"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Stats are a consumer's counters since it was made.
type Stats struct {
	// Handled counts messages whose handler ran and committed.
	Handled uint64
	// Duplicates counts deliveries of messages handled before.
	Duplicates uint64
	// Retried counts deliveries whose handler failed and that were handed
	// back to the broker for another delivery, and the held messages whose
	// handler failed again, tried again from the consumer's database.
	Retried uint64
	// DeadLettered counts messages taken out of delivery for good.
	DeadLettered uint64
	// Abandoned counts deliveries left undone because their context ended.
	Abandoned uint64
	// SettleFailures counts broker calls (acknowledgement, retry, dead
	// letter) that failed; the broker then delivers the message again.
	SettleFailures uint64
	// DatabaseWaits counts transactions the database failed for a reason
	// not the message's (unreachable, restarting, read-only, a missing
	// table or privilege, a serialization failure): each delivery waited
	// for the database and ran again, spending no attempt.
	DatabaseWaits uint64
	// Held counts the messages whose failure held their key: each waits in
	// the consumer's database, to be tried again from there.
	Held uint64
	// Waiting counts the messages stored behind a held key on delivery.
	Waiting uint64
}

type counters struct {
	handled, duplicates, retried, deadLettered, abandoned, settleFailures, databaseWaits, held, waiting atomic.Uint64
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() Stats {
	s := &c.stats
	return Stats{Handled: s.handled.Load(), Duplicates: s.duplicates.Load(), Retried: s.retried.Load(),
		DeadLettered: s.deadLettered.Load(), Abandoned: s.abandoned.Load(), SettleFailures: s.settleFailures.Load(),
		DatabaseWaits: s.databaseWaits.Load(), Held: s.held.Load(), Waiting: s.waiting.Load()}
}
