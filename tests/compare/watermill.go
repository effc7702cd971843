package compare

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/tool/bench"
)

// Watermill's SQL Pub/Sub used as an outbox: messages are published inside
// the business transaction to a PostgreSQL table through the forwarder's
// publisher, which wraps each in an envelope naming its destination, and the
// forwarder (a router reading that table with the SQL subscriber) publishes
// them to the broker, acknowledging each after the broker took it.
const (
	// NameWatermill runs with Watermill's documented defaults: the
	// subscriber reads 100 rows per query and polls every second when it
	// found none.
	NameWatermill = "watermill"
	// NameWatermillTuned turns the two documented knobs: 1,000 rows per
	// query (DefaultPostgreSQLSchema.SubscribeBatchSize) and a 10 ms poll
	// (SubscriberConfig.PollInterval).
	NameWatermillTuned = "watermill tuned"
)

// forwarderTopic is the SQL topic the forwarder reads.
const forwarderTopic = "forwarder"

// Watermill returns Watermill's SQL Pub/Sub with its forwarder as a
// contender, with its defaults or, when tuned, with its two documented knobs
// turned.
func Watermill(tuned bool) bench.Contender { return watermillContender{tuned: tuned} }

type watermillContender struct{ tuned bool }

func (c watermillContender) Name() string {
	if c.tuned {
		return NameWatermillTuned
	}
	return NameWatermill
}

// Runs reports the scenarios it takes part in: every one but ordered (its
// subscriber reads one consumer group's rows in a single sequence, with no
// per-key lanes to share among workers), and enlist only once, since both
// variants publish alike.
func (c watermillContender) Runs(scenario string) bool {
	switch scenario {
	case bench.ScenarioEnlist:
		return !c.tuned
	case bench.ScenarioOrdered:
		return false
	}
	return true
}

func (c watermillContender) New(ctx context.Context, env bench.Env) (bench.Instance, error) {
	table := func(name string) func(string) string {
		return func(string) string { return pgx.Identifier{env.Schema, env.Prefix + name}.Sanitize() }
	}
	schema := wsql.DefaultPostgreSQLSchema{
		GenerateMessagesTableName: table("watermill_messages"),
		// No schema initialization lock: each run's tables are its own.
		InitializeSchemaWithoutTransaction: true,
	}
	subCfg := wsql.SubscriberConfig{
		SchemaAdapter:    nil, // set below
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{GenerateMessagesOffsetsTableName: table("watermill_offsets")},
		InitializeSchema: true,
	}
	if c.tuned {
		schema.SubscribeBatchSize = 1000
		subCfg.PollInterval = 10 * time.Millisecond
	}
	subCfg.SchemaAdapter = schema
	logger := watermill.NopLogger{}
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(env.DB), subCfg, logger)
	if err != nil {
		return nil, err
	}
	if err := sub.SubscribeInitialize(forwarderTopic); err != nil {
		return nil, fmt.Errorf("watermill: create tables: %w", err)
	}
	fwd, err := forwarder.NewForwarder(sub, &sinkPublisher{sink: env.Sink}, logger, forwarder.Config{ForwarderTopic: forwarderTopic})
	if err != nil {
		return nil, err
	}
	metadata := message.Metadata{}
	for _, h := range env.Headers {
		metadata[h.Name] = string(h.Value)
	}
	return &watermillInstance{env: env, schema: schema, sub: sub, fwd: fwd, metadata: metadata,
		offsets: subCfg.OffsetsAdapter.(wsql.DefaultPostgreSQLOffsetsAdapter).MessagesOffsetsTable(forwarderTopic)}, nil
}

type watermillInstance struct {
	env      bench.Env
	schema   wsql.DefaultPostgreSQLSchema
	offsets  string
	sub      *wsql.Subscriber
	fwd      *forwarder.Forwarder
	metadata message.Metadata

	mu     sync.Mutex
	done   chan struct{}
	runErr error
}

// publish publishes n messages in tx through the forwarder's publisher, as
// the forwarder's documentation shows, and returns their ids.
func (in *watermillInstance) publish(tx *sql.Tx, n int, ids []uuid.UUID) ([]uuid.UUID, error) {
	pub, err := wsql.NewPublisher(wsql.TxFromStdSQL(tx), wsql.PublisherConfig{SchemaAdapter: in.schema}, watermill.NopLogger{})
	if err != nil {
		return ids, err
	}
	msgs := make([]*message.Message, n)
	for i := range msgs {
		id, err := uuid.NewV7()
		if err != nil {
			return ids, err
		}
		ids = append(ids, id)
		msgs[i] = message.NewMessage(id.String(), in.env.Body)
		msgs[i].Metadata = maps.Clone(in.metadata)
	}
	return ids, forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: forwarderTopic}).Publish(in.env.Destination, msgs...)
}

// Producer implements [bench.Instance].
func (in *watermillInstance) Producer(_, perTx int) (func(context.Context) error, error) {
	insert := `INSERT INTO ` + in.env.Orders + ` (note) VALUES ($1)`
	var ids []uuid.UUID
	return func(ctx context.Context) error {
		tx, err := in.env.DB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, insert, "order"); err != nil {
			return err
		}
		if perTx > 0 {
			if ids, err = in.publish(tx, perTx, ids[:0]); err != nil {
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if in.env.Committed != nil {
			in.env.Committed(time.Now(), ids)
		}
		return nil
	}, nil
}

// Fill implements [bench.Instance], 1,000 messages per transaction.
func (in *watermillInstance) Fill(ctx context.Context, n int) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, 0, n)
	for start := 0; start < n; start += 1000 {
		tx, err := in.env.DB.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		if ids, err = in.publish(tx, min(1000, n-start), ids); err != nil {
			tx.Rollback()
			return nil, err
		}
		if err := tx.Commit(); err != nil {
			return nil, err
		}
	}
	_, err := in.env.DB.ExecContext(ctx, `ANALYZE `+in.schema.MessagesTable(forwarderTopic))
	return ids, err
}

// Start runs the forwarder until Stop.
func (in *watermillInstance) Start(ctx context.Context) error {
	in.done = make(chan struct{})
	go func() {
		defer close(in.done)
		err := in.fwd.Run(context.WithoutCancel(ctx))
		in.mu.Lock()
		in.runErr = err
		in.mu.Unlock()
	}()
	select {
	case <-in.fwd.Running():
		return nil
	case <-in.done:
		return in.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop closes the forwarder and its subscriber.
func (in *watermillInstance) Stop(context.Context) error {
	err := in.fwd.Close()
	if in.done != nil {
		<-in.done
	}
	return errors.Join(err, in.sub.Close())
}

// Err returns the error that ended the forwarder's router, if it ended.
func (in *watermillInstance) Err() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.runErr != nil {
		return fmt.Errorf("watermill forwarder: %w", in.runErr)
	}
	return nil
}

// Backlog counts the rows past the forwarder's acknowledged offset.
func (in *watermillInstance) Backlog(ctx context.Context) (n int64, err error) {
	err = in.env.DB.QueryRowContext(ctx, `SELECT count(*) FROM `+in.schema.MessagesTable(forwarderTopic)+
		` WHERE "offset" > COALESCE((SELECT max(offset_acked) FROM `+in.offsets+`), 0)`).Scan(&n)
	return n, err
}

// sinkPublisher is the forwarder's broker: a Watermill publisher handing
// each message to the run's sink with the id it was published with.
type sinkPublisher struct{ sink relayer.Transport }

func (p *sinkPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		id, err := uuid.Parse(m.UUID)
		if err != nil {
			return fmt.Errorf("message id %q: %w", m.UUID, err)
		}
		hs := make([]headers.Header, 0, len(m.Metadata))
		for k, v := range m.Metadata {
			hs = append(hs, headers.Header{Name: k, Value: []byte(v)})
		}
		if err := p.sink.Send(m.Context(), &relayer.Message{ID: id, Type: "watermill", Destination: topic, Body: m.Payload, Headers: hs}); err != nil {
			return err
		}
	}
	return nil
}

func (p *sinkPublisher) Close() error { return nil }
