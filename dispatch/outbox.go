package dispatch

import (
	"database/sql"
	"fmt"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/store"
)

// outboxCore is what the workers of one outbox share: its store, its
// transports and retry policies, one capability cache (the 256-entry FIFO
// of capabilityCacheSize), one view of the destinations set aside as slow
// or unavailable, and one measure of the database's clock. A [Runner] builds
// one for all its workers; a worker built alone builds its own.
type outboxCore struct {
	db         *sql.DB
	outbox     relayer.Outbox
	store      *store.Store
	transports map[string]relayer.Transport
	retries    *retries
	caps       *capCache
	aside      *setAside
	clock      *dbClock
}

// newOutboxCore validates what the outbox gives its workers and builds
// their shared state; it does not touch the database. db must not be nil.
func newOutboxCore(db *sql.DB, outbox relayer.Outbox) (*outboxCore, error) {
	st, err := store.New(db, store.OptionsOf(outbox))
	if err != nil {
		return nil, err
	}
	transports, retries, err := checkOutbox(outbox)
	if err != nil {
		return nil, err
	}
	return &outboxCore{
		db:         db,
		outbox:     outbox,
		store:      st,
		transports: transports,
		retries:    retries,
		caps:       newCapCache(capabilityCacheSize),
		aside:      newSetAside(),
		clock:      &dbClock{},
	}, nil
}

// checkOutbox snapshots the named transports, refusing nil ones, and the
// retry policies, refusing one out of range. A route naming an unregistered
// transport is not an error here: its rows are skipped and logged, and
// recovery sends them once the transport is registered.
func checkOutbox(outbox relayer.Outbox) (map[string]relayer.Transport, *retries, error) {
	transports := make(map[string]relayer.Transport, len(outbox.Transports))
	for name, tr := range outbox.Transports {
		if tr == nil {
			return nil, nil, fmt.Errorf("%w: Outbox.Transports[%q] is nil", ErrInvalidOptions, name)
		}
		transports[name] = tr
	}
	retries, err := newRetries(outbox)
	if err != nil {
		return nil, nil, err
	}
	return transports, retries, nil
}
