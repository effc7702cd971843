package faults

import (
	"sync"
	"time"

	"github.com/google/uuid"
)

// outcome is what became of a message a producer published.
type outcome int32

const (
	pending    outcome = iota
	committed          // its transaction committed
	rolledBack         // its transaction, or the savepoint it was in, rolled back
	uncertain          // the commit's reply never came: committed or not
)

// entry is one published message.
type entry struct {
	key     string // ordering key, "" for unordered messages
	outcome outcome
	// intended marks a message the scenario sends to the dead letters or
	// leaves in the table on purpose.
	intended bool
}

// ledger is what the producers published, and what became of it.
type ledger struct {
	mu      sync.Mutex
	entries map[uuid.UUID]*entry
	// byKey holds each key's messages in the order their producer published
	// them, which is their commit order: a key has one producer.
	byKey map[string][]uuid.UUID
	// lastCommit is when the last transaction committed.
	lastCommit time.Time
}

func newLedger() *ledger {
	return &ledger{entries: map[uuid.UUID]*entry{}, byKey: map[string][]uuid.UUID{}}
}

// publish notes messages about to be published in a transaction.
func (l *ledger) publish(ids []uuid.UUID, keys []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, id := range ids {
		l.entries[id] = &entry{key: keys[i]}
		if keys[i] != "" {
			l.byKey[keys[i]] = append(l.byKey[keys[i]], id)
		}
	}
}

// settle records the outcome of messages published earlier.
func (l *ledger) settle(o outcome, ids ...uuid.UUID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		l.entries[id].outcome = o
	}
	if o == committed {
		l.lastCommit = time.Now()
	}
}

// intend marks committed messages the scenario expects to stay undelivered.
func (l *ledger) intend(ids ...uuid.UUID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		l.entries[id] = &entry{outcome: committed, intended: true}
	}
}

// mayHaveCommitted reports whether message id was published and its
// transaction committed, or may have (its commit's reply was lost).
func (l *ledger) mayHaveCommitted(id uuid.UUID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries[id]
	return e != nil && (e.outcome == committed || e.outcome == uncertain)
}

// verdict is the checker's finding for one scenario.
type verdict struct {
	Committed, Uncertain, RolledBack int
	Delivered                        int // distinct messages delivered
	Lost                             int // committed, not delivered, not intended
	RolledBackDelivered              int
	Duplicates                       int // deliveries beyond each message's first
	OrderViolations                  int
	Overlaps                         int // moments with two sends of one lane in flight
}

// missing returns how many committed messages have not arrived yet.
func (l *ledger) missing(ds []delivery) int {
	seen := make(map[uuid.UUID]bool, len(ds))
	for _, d := range ds {
		seen[d.id] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for id, e := range l.entries {
		if e.outcome == committed && !e.intended && !seen[id] {
			n++
		}
	}
	return n
}

// check compares what the producers committed with what was delivered.
func (l *ledger) check(ds []delivery, overlaps int) verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := verdict{Overlaps: overlaps}
	first := map[uuid.UUID]int{} // id → position of its first delivery
	for i, d := range ds {
		if _, ok := first[d.id]; ok {
			v.Duplicates++
			continue
		}
		first[d.id] = i
	}
	for id, e := range l.entries {
		_, delivered := first[id]
		switch e.outcome {
		case committed:
			v.Committed++
			if !delivered && !e.intended {
				v.Lost++
			}
		case uncertain:
			v.Uncertain++
		case rolledBack, pending:
			v.RolledBack++
			if delivered {
				v.RolledBackDelivered++
			}
		}
		if delivered {
			v.Delivered++
		}
	}
	// Per key, the first deliveries of its committed messages must come in
	// commit order, which is the order their producer published them. An
	// uncertain commit is left out: its COMMIT may take effect after the
	// producer, told nothing, has gone on to commit the key's next message.
	for _, ids := range l.byKey {
		last := -1
		for _, id := range ids {
			e := l.entries[id]
			pos, delivered := first[id]
			if !delivered || e.outcome != committed {
				continue
			}
			if pos < last {
				v.OrderViolations++
			}
			last = max(last, pos)
		}
	}
	return v
}
