package dispatch

import (
	"database/sql"
	"fmt"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// The workers are the Runner's own; these names let the package's external
// tests drive one worker alone.
type (
	Direct   = directWorker
	Recovery = recoveryWorker
	Ordered  = orderedWorker
	Cleanup  = cleanupWorker
)

// testCore validates opts and builds an outbox core, as NewRunner does.
func testCore(db *sql.DB, outbox relayer.Outbox, opts interface{ Validate() error }) (*outboxCore, error) {
	if db == nil {
		return nil, fmt.Errorf("dispatch: %w", store.ErrNilDB)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return newOutboxCore(db, outbox)
}

// NewDirect builds a direct dispatcher alone.
func NewDirect(db *sql.DB, outbox relayer.Outbox, opts DirectOptions) (*Direct, error) {
	return NewDirectFor(db, outbox, opts, nil)
}

// NewDirectFor builds a direct dispatcher that wakes recovery (which may be
// nil) for the rows it leaves behind, on recovery's outbox core: they share
// its set-aside destinations, as a Runner's workers do.
func NewDirectFor(db *sql.DB, outbox relayer.Outbox, opts DirectOptions, recovery *Recovery) (*Direct, error) {
	core, err := testCore(db, outbox, opts)
	if err != nil {
		return nil, err
	}
	if recovery != nil {
		core = recovery.outboxCore // one set of paused destinations, one publisher
	}
	return newDirect(core, opts, recovery), nil
}

// NewRecovery builds a recovery worker alone.
func NewRecovery(db *sql.DB, outbox relayer.Outbox, opts RecoveryOptions) (*Recovery, error) {
	core, err := testCore(db, outbox, opts)
	if err != nil {
		return nil, err
	}
	return newRecovery(core, opts), nil
}

// NewOrdered builds an ordered worker alone.
func NewOrdered(db *sql.DB, outbox relayer.Outbox, opts OrderedOptions) (*Ordered, error) {
	core, err := testCore(db, outbox, opts)
	if err != nil {
		return nil, err
	}
	return newOrdered(core, opts), nil
}

// NewCleanup builds a cleanup worker alone.
func NewCleanup(db *sql.DB, outbox relayer.Outbox, opts CleanupOptions) (*Cleanup, error) {
	if db == nil {
		return nil, fmt.Errorf("dispatch: %w", store.ErrNilDB)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	st, err := workerstore.New(db, store.TablesOf(outbox))
	if err != nil {
		return nil, err
	}
	return newCleanup(db, st, opts), nil
}

// SetGenericTakePlans switches generic plans on taking connections made from
// now on, for benchmarks that compare; it returns the previous setting.
func SetGenericTakePlans(on bool) bool {
	was := genericTakePlans
	genericTakePlans = on
	return was
}

// loadSection reads one worker's options alone, keys unprefixed.
func loadSection[T interface{ Validate() error }](src Source, options func(*T) []option) (T, error) {
	var o T
	l := &loader{src: src}
	loadOptions(l, options(&o))
	if l.err != nil {
		var zero T
		return zero, l.err
	}
	return o, o.Validate()
}

// LoadDirectOptions reads direct dispatch's keys, unprefixed.
func LoadDirectOptions(src Source) (DirectOptions, error) {
	return loadSection(src, (*DirectOptions).options)
}

// LoadRecoveryOptions reads recovery's keys, unprefixed.
func LoadRecoveryOptions(src Source) (RecoveryOptions, error) {
	return loadSection(src, (*RecoveryOptions).options)
}

// LoadCleanupOptions reads cleanup's keys, unprefixed.
func LoadCleanupOptions(src Source) (CleanupOptions, error) {
	return loadSection(src, (*CleanupOptions).options)
}

// RecoveryWorker returns the runner's recovery worker, to tell whether a
// failed Start made the workers anew.
func (r *Runner) RecoveryWorker() *Recovery { return r.crew.Load().recovery }

// Defaults the external tests compare with.
const (
	CleanupInboxRetentionDefault = cleanupInboxRetentionDefault
	CleanupDeadRetentionDefault  = cleanupDeadRetentionDefault
	BatchSizeDefault             = batchSizeDefault
	DirectWorkersDefault         = directWorkersDefault
	RecoveryWorkersDefault       = recoveryWorkersDefault
)

// OrderedWorkers returns the runner's ordered workers, to stop one alone.
func (r *Runner) OrderedWorkers() []*Ordered { return r.crew.Load().ordered }
