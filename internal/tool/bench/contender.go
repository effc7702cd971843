package bench

import (
	"context"
	"database/sql"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
)

// A Contender is one way of getting messages from a business transaction to
// a broker that a run measures: one of Relayer's dispatch paths, the
// hand-written loop, or another library (added through Config.Contenders,
// from a module of its own, so that its dependencies reach no user of
// Relayer).
type Contender interface {
	// Name names the contender in results, such as "relayer direct".
	Name() string
	// Runs reports whether the contender takes part in a scenario.
	Runs(scenario string) bool
	// New sets up one measured run in env: its tables, producers and
	// dispatcher. It is called once per scenario variant and round.
	New(ctx context.Context, env Env) (Instance, error)
}

// Env is what a contender's run works with.
type Env struct {
	// DB is the run's database.
	DB *sql.DB
	// Schema and Prefix name the instance's tables: create them in Schema,
	// with names that begin with Prefix. They are new to each Env.
	Schema, Prefix string
	// Orders is the quoted, qualified name of the business table, with
	// columns (id bigserial, note text), already created.
	Orders string
	// Destination is where messages go (a subject, topic or exchange).
	Destination string
	// Sink is the transport to deliver to; it records every delivery. A
	// message reaches it with the id it committed with.
	Sink relayer.Transport
	// Body is each message's body, and Headers the headers each carries.
	Body    []byte
	Headers []headers.Header
	// Producers is how many producers the run has.
	Producers int
	// OrderedBatchSize is the ordered workers' rows per lane and batch
	// (dispatch.OrderedOptions.BatchSize); zero means the default.
	OrderedBatchSize int
	// Committed, when set, is told the ids of each transaction's messages as
	// soon as its commit returned; latencies are measured from then.
	Committed func(at time.Time, ids []uuid.UUID)
}

// An Instance is one contender's run: it writes messages and delivers them.
type Instance interface {
	// Producer returns what producer p (0 to Config.Producers-1) calls to
	// commit one business transaction: one row into Env.Orders and perTx
	// messages. Each producer runs on its own goroutine.
	Producer(p, perTx int) (func(context.Context) error, error)
	// Fill commits n messages without business rows, in large
	// transactions, and returns their ids.
	Fill(ctx context.Context, n int) ([]uuid.UUID, error)
	// Start starts delivering the committed messages to Env.Sink; Stop stops
	// and waits for the workers.
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	// Err returns the error that ended a worker, if one did: the run stops
	// waiting for deliveries that will not come.
	Err() error
	// Backlog counts messages committed and not yet delivered.
	Backlog(ctx context.Context) (int64, error)
}
