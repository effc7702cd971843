package dispatch

import (
	"database/sql"
	"fmt"
	"maps"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/workerstore"
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
	store      *workerstore.Store
	transports map[string]relayer.Transport
	retries    *retries
	caps       *capCache
	aside      *setAside
	clock      *dbClock
}

// newOutboxCore validates what the outbox gives its workers and builds
// their shared state; it does not touch the database. db must not be nil.
func newOutboxCore(db *sql.DB, outbox relayer.Outbox) (*outboxCore, error) {
	st, err := workerstore.New(db, store.OptionsOf(outbox))
	if err != nil {
		return nil, err
	}
	if err := outbox.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return &outboxCore{
		db:         db,
		outbox:     outbox,
		store:      st,
		transports: maps.Clone(outbox.Transports),
		retries:    newRetries(outbox),
		caps:       newCapCache(capabilityCacheSize),
		aside:      newSetAside(),
		clock:      &dbClock{},
	}, nil
}
