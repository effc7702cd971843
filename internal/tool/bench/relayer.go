package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/dispatch/pgxlisten"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/store"
)

// Relayer's dispatch paths, as contenders.
const (
	// PathDirect sends each transaction's messages right after its commit,
	// with recovery behind it: a Runner's defaults for unordered messages.
	PathDirect = "relayer direct"
	// PathRecovery turns direct dispatch off: recovery, woken at each
	// commit, sends the messages.
	PathRecovery = "relayer recovery"
	// PathOrdered publishes ordered messages over 1,000 keys, sent by a
	// Runner's ordered workers.
	PathOrdered = "relayer ordered"
	// PathOrderedRemote is PathOrdered with the workers as another
	// process's: the writer does not tell them about its commits, so they
	// find ordered rows at their poll (each second). Not run unless named
	// in Config.Only.
	PathOrderedRemote = "relayer ordered remote (poll)"
	// PathOrderedWoken is PathOrderedRemote with the wake-up across
	// processes on: the writer NOTIFYs (enlist.Options.Wake) and the
	// workers LISTEN (dispatch.RunnerOptions.Listen). Not run unless named
	// in Config.Only.
	PathOrderedWoken = "relayer ordered remote (wake)"
	// PathRelay is unordered delivery as `relayer run` does it: recovery
	// alone, in what stands for another process, taking rows of any age
	// (MinAge 1 ns) and woken by the writers' NOTIFY (enlist.Options.Wake,
	// RunnerOptions.Listen); the writer tells it of no commit. Not run
	// unless named in Config.Only.
	PathRelay = "relayer relay (wake)"
)

// orderedKeys is how many keys ordered messages are spread over.
const orderedKeys = 1000

// relayerPath is one of Relayer's dispatch paths as a contender.
type relayerPath struct {
	path string
	// workers is the ordered path's worker count.
	workers int
}

// Relayer returns the contender measuring one of Relayer's dispatch paths
// (PathDirect, PathRecovery or PathOrdered with 4 ordered workers).
func Relayer(path string) Contender {
	return relayerPath{path: path, workers: 4}
}

// remote reports whether the path's workers are as another process's.
func (c relayerPath) remote() bool {
	return c.path == PathOrderedRemote || c.path == PathOrderedWoken || c.path == PathRelay
}

func (c relayerPath) Name() string {
	if c.path == PathOrdered && c.workers == 1 {
		return c.path + " (1 worker)"
	}
	if c.path == PathOrdered && c.workers != 4 {
		return fmt.Sprintf("%s (%d workers)", c.path, c.workers)
	}
	return c.path
}

func (c relayerPath) Runs(scenario string) bool {
	if c.remote() {
		return scenario == ScenarioE2E || scenario == ScenarioLatency
	}
	switch scenario {
	case ScenarioEnlist:
		return c.path == PathDirect // the writer is the same for every path
	case ScenarioE2E, ScenarioLatency:
		return true
	case ScenarioDrain:
		return c.path == PathRecovery
	case ScenarioOrdered:
		return c.path == PathOrdered
	}
	return false
}

func (c relayerPath) New(ctx context.Context, env Env) (Instance, error) {
	routes := &relayer.Routes{}
	if err := routes.Add(eventType, relayer.Route{Transport: "bench", Destination: env.Destination}); err != nil {
		return nil, err
	}
	if err := routes.Add(orderedType, relayer.Route{Transport: "bench", Destination: env.Destination, Ordered: true}); err != nil {
		return nil, err
	}
	outbox := relayer.Outbox{Schema: env.Schema, TablePrefix: env.Prefix, Routes: routes,
		Transports: map[string]relayer.Transport{"bench": env.Sink}, Serializer: raw{}}
	if _, err := store.Migrate(ctx, env.DB, store.TablesOf(outbox)); err != nil {
		return nil, err
	}
	opts := dispatch.RunnerOptions{DisableCleanup: true, Logger: quiet}
	switch c.path {
	case PathDirect:
		opts.DisableOrdered = true
	case PathRecovery:
		opts.DisableDirect, opts.DisableOrdered = true, true
	case PathOrdered:
		opts.DisableDirect, opts.OrderedWorkers = true, c.workers
		opts.Ordered.BatchSize = env.OrderedBatchSize
	case PathOrderedRemote, PathOrderedWoken:
		opts.DisableDirect, opts.OrderedWorkers = true, c.workers
		if c.path == PathOrderedWoken {
			opts.Listen, opts.Notifications = true, pgxlisten.Waiter{}
		}
	case PathRelay:
		opts.DisableDirect, opts.DisableOrdered = true, true
		opts.Recovery.MinAge = time.Nanosecond
		opts.Listen, opts.Notifications = true, pgxlisten.Waiter{}
	}
	runner, err := dispatch.NewRunner(env.DB, outbox, opts)
	if err != nil {
		return nil, err
	}
	in := &relayerInstance{env: env, outbox: outbox, runner: runner, ordered: c.path == PathOrdered || (c.remote() && c.path != PathRelay)}
	wopts := enlist.Options{Logger: quiet}
	var next enlist.CommitListener = runner
	if c.remote() {
		next = nil // the writer of another process
		if c.path == PathOrderedWoken || c.path == PathRelay {
			wopts.Wake = env.DB
		}
	}
	switch {
	case env.Committed != nil:
		wopts.Listener = &stamper{next: next, committed: env.Committed, opts: runner.Tables()}
	case next != nil:
		wopts.Listener = next
	}
	if in.w, err = enlist.NewWriter(outbox, wopts); err != nil {
		return nil, err
	}
	return in, nil
}

// PathDirectPGX is PathDirect with its producers writing through a writer
// of pgx's native interface (see [RelayerPGX]).
const PathDirectPGX = PathDirect + " (pgx)"

// PGXPublish runs one business transaction on conn through a writer of pgx's
// native interface built on w: the business insert with its one argument,
// then msgs in one PublishAll, then the commit, which tells w's listener.
// The enlist/pgx module provides such a writer; the bench, in the core
// module, cannot depend on it.
type PGXPublish func(ctx context.Context, conn *pgx.Conn, w *enlist.Writer, insert string, arg any, msgs []relayer.Outgoing) error

// RelayerPGX returns the contender PathDirectPGX: Relayer's direct path,
// whose producers publish through publish on pgx connections of Env.DB
// (pgx's database/sql driver), as the minimal loop's do. It runs in the
// enlist scenario only, where it sets the writer's interface against the
// minimal loop's.
func RelayerPGX(publish PGXPublish) Contender {
	return relayerPGX{relayerPath: relayerPath{PathDirect, 4}, publish: publish}
}

type relayerPGX struct {
	relayerPath
	publish PGXPublish
}

func (c relayerPGX) Name() string              { return PathDirectPGX }
func (c relayerPGX) Runs(scenario string) bool { return scenario == ScenarioEnlist }

func (c relayerPGX) New(ctx context.Context, env Env) (Instance, error) {
	in, err := c.relayerPath.New(ctx, env)
	if err != nil {
		return nil, err
	}
	in.(*relayerInstance).publish = c.publish
	return in, nil
}

type relayerInstance struct {
	env     Env
	outbox  relayer.Outbox
	runner  *dispatch.Runner
	w       *enlist.Writer
	ordered bool
	// publish, when set, runs the producers' transactions on pgx's native
	// interface (see RelayerPGX).
	publish PGXPublish
}

// Producer publishes ordered messages, each producer over keys of its own
// (numbered per key), or unordered ones with the Env's body.
func (in *relayerInstance) Producer(p, perTx int) (func(context.Context) error, error) {
	insert := `INSERT INTO ` + in.env.Orders + ` (note) VALUES ($1)`
	opts := []relayer.Option{}
	for _, h := range in.env.Headers {
		opts = append(opts, relayer.Header(h.Name, h.Value))
	}
	msgs := make([]relayer.Outgoing, perTx)
	for i := range msgs {
		msgs[i] = relayer.NewOutgoing(event{in.env.Body}, opts...)
	}
	var keys []string
	var seq []int
	next := 0
	if in.ordered {
		// Producers own keys p, p+producers, …: each key has one writer,
		// whose commit order is the key's order.
		for k := p; k < orderedKeys; k += in.env.Producers {
			keys = append(keys, "key-"+strconv.Itoa(k))
		}
		seq = make([]int, len(keys))
	}
	return func(ctx context.Context) error {
		if in.ordered {
			for i := range msgs {
				k := next % len(keys)
				next++
				seq[k]++
				msgs[i] = relayer.NewOutgoing(newPayload(len(in.env.Body), seq[k], true), append(opts, relayer.Key(keys[k]))...)
			}
		}
		// A failed transaction ends the run, so its numbers are never
		// reused.
		if in.publish != nil {
			c, err := in.env.DB.Conn(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			return native(c, func(pc *pgx.Conn) error { return in.publish(ctx, pc, in.w, insert, "order", msgs) })
		}
		return in.w.RunInTx(ctx, in.env.DB, nil, func(tx *enlist.Tx) error {
			if _, err := tx.ExecContext(ctx, insert, "order"); err != nil {
				return err
			}
			return tx.PublishAll(ctx, msgs...)
		})
	}, nil
}

// Fill writes n messages, 1,000 per transaction: ordered ones over 1,000
// keys (numbered per key) on the ordered path.
func (in *relayerInstance) Fill(ctx context.Context, n int) ([]uuid.UUID, error) {
	keys := 0
	if in.ordered {
		keys = orderedKeys
	}
	w, err := enlist.NewWriter(in.outbox, enlist.Options{Logger: quiet})
	if err != nil {
		return nil, err
	}
	seq := make([]int, keys)
	ids := make([]uuid.UUID, 0, n)
	for start := 0; start < n; start += 1000 {
		msgs := make([]relayer.Outgoing, min(1000, n-start))
		for i := range msgs {
			id := uuid.Must(relayer.NewID())
			ids = append(ids, id)
			if keys == 0 {
				msgs[i] = relayer.NewOutgoing(event{in.env.Body}, relayer.WithID(id))
				continue
			}
			k := (start + i) % keys
			seq[k]++
			msgs[i] = relayer.NewOutgoing(newPayload(len(in.env.Body), seq[k], true), relayer.Key("key-"+strconv.Itoa(k)), relayer.WithID(id))
		}
		if err := w.RunInTx(ctx, in.env.DB, nil, func(tx *enlist.Tx) error { return tx.PublishAll(ctx, msgs...) }); err != nil {
			return nil, err
		}
	}
	_, err = in.env.DB.ExecContext(ctx, `ANALYZE `+quoteTable(in.env.Schema, in.env.Prefix+"outbox"))
	return ids, err
}

// Start starts the runner and wakes its recovery, so that rows committed
// before, such as a drain's backlog, do not wait to be a second old
// (RecoveryOptions.MinAge), which is there to leave them to direct dispatch.
func (in *relayerInstance) Start(ctx context.Context) error {
	if err := in.runner.Start(ctx); err != nil {
		return err
	}
	in.runner.Wake()
	return nil
}

func (in *relayerInstance) Stop(ctx context.Context) error { return in.runner.Stop(ctx) }
func (in *relayerInstance) Err() error                     { return nil }

func (in *relayerInstance) Backlog(ctx context.Context) (int64, error) {
	st, err := store.New(in.env.DB, store.TablesOf(in.outbox))
	if err != nil {
		return 0, err
	}
	s, err := st.Stats(ctx, time.Now())
	return s.Eligible + s.Scheduled + s.Claimed + s.Retrying + s.Parked, err
}

// stamper is a commit listener that tells the run when each row committed,
// then hands the rows on.
type stamper struct {
	next      enlist.CommitListener // nil: none
	committed func(time.Time, []uuid.UUID)
	opts      store.Tables
}

func (s *stamper) Tables() store.Tables { return s.opts }

// SendsCommitted tells the writer whether the next listener sends rows
// itself (enlist.Sender).
func (s *stamper) SendsCommitted() bool {
	sender, ok := s.next.(enlist.Sender)
	return ok && sender.SendsCommitted()
}

func (s *stamper) Committed(rows []relayer.Message) error {
	now := time.Now()
	ids := make([]uuid.UUID, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	s.committed(now, ids)
	if s.next == nil {
		return nil
	}
	return s.next.Committed(rows)
}
