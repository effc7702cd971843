package faults

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/store"
)

// The consumer's half of the promise: whatever the broker got, duplicates
// included, handed to a consume.Consumer (four deliveries at once, in a
// shuffled order, so that copies of one message race each other) commits
// each message's effect once.

// consumerStageWorkers is how many deliveries the consumer stage handles at
// once.
const consumerStageWorkers = 4

// effects is what the consumer stage found.
type effects struct {
	Deliveries int // handed to the consumer, duplicates included
	Handled    int // handler runs that committed
	Skipped    int // deliveries the inbox found handled already
	Missing    int // delivered messages without an effect row
	Doubled    int // messages with more than one effect row
	Foreign    int // effect rows of messages no producer committed
	Took       time.Duration
}

// consumeEffects hands every delivery in ds to a consumer whose handler
// writes an effect row, then counts the rows per message against the
// ledger.
func (s *system) consumeEffects(ctx context.Context, ds []delivery) effects {
	table := s.schema + ".consumer_effects"
	must(s.t, s.harness(ctx, func(ctx context.Context) error {
		_, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (message_id uuid NOT NULL)`)
		return err
	}))
	// A pool of its own whose commits do not wait for the disk: what the
	// stage checks is that each message commits once, not durability, and
	// a flush per delivery would make it the slowest part of the suite.
	u, err := url.Parse(s.url)
	must(s.t, err)
	q := u.Query()
	q.Set("application_name", s.schema+"/consumer")
	q.Set("synchronous_commit", "off")
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	must(s.t, err)
	defer db.Close()
	db.SetMaxOpenConns(consumerStageWorkers)
	c, err := consume.New(db, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (message_id) VALUES ($1)`, m.ID)
		return err
	}, consume.Options{Name: "faults-consumer", Tables: store.TablesOf(s.outbox)})
	must(s.t, err)
	start := time.Now()
	order := rand.Perm(len(ds))
	work := make(chan delivery)
	var wg sync.WaitGroup
	for range consumerStageWorkers {
		wg.Go(func() {
			for d := range work {
				s.handleUntilSettled(ctx, c, d)
			}
		})
	}
	for _, i := range order {
		work <- ds[i]
	}
	close(work)
	wg.Wait()

	e := effects{Deliveries: len(ds), Handled: int(c.Stats().Handled), Skipped: int(c.Stats().Duplicates), Took: time.Since(start).Round(time.Millisecond)}
	rows := map[uuid.UUID]int{}
	must(s.t, s.harness(ctx, func(ctx context.Context) error {
		clear(rows)
		r, err := s.db.QueryContext(ctx, `SELECT message_id, count(*) FROM `+table+` GROUP BY message_id`)
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			var id uuid.UUID
			var n int
			if err := r.Scan(&id, &n); err != nil {
				return err
			}
			rows[id] = n
		}
		return r.Err()
	}))
	delivered := map[uuid.UUID]bool{}
	for _, d := range ds {
		delivered[d.id] = true
	}
	for id := range delivered {
		switch n := rows[id]; {
		case n == 0:
			e.Missing++
		case n > 1:
			e.Doubled++
		}
	}
	for id := range rows {
		if !delivered[id] || !s.ledger.mayHaveCommitted(id) {
			e.Foreign++
		}
	}
	return e
}

// handleUntilSettled hands d to c until it is handled or found a
// duplicate, as a broker redelivers what was not acknowledged.
func (s *system) handleUntilSettled(ctx context.Context, c *consume.Consumer, d delivery) {
	fd := &faultDelivery{id: d.id, key: d.key}
	for attempt := 1; ; attempt++ {
		out, err := c.Handle(ctx, fd)
		if out == consume.Handled || out == consume.Duplicate {
			return
		}
		if attempt == 100 || ctx.Err() != nil {
			s.t.Errorf("consumer stage: message %v not settled after %d deliveries: %s, %v", d.id, attempt, out, errors.Join(err, fd.lastErr))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// faultDelivery is a message the scenario's broker received, delivered to
// the consumer stage: Retry notes why it came back.
type faultDelivery struct {
	id      uuid.UUID
	key     string
	lastErr error
}

func (d *faultDelivery) Message() (relayer.Message, error) {
	return relayer.Message{ID: d.id, Type: "faults.event", Key: d.key, Destination: "faults"}, nil
}
func (d *faultDelivery) Attempt() int              { return 1 }
func (d *faultDelivery) Ack(context.Context) error { return nil }
func (d *faultDelivery) Retry(context.Context, time.Duration) error {
	d.lastErr = fmt.Errorf("retried")
	return nil
}
func (d *faultDelivery) DeadLetter(_ context.Context, cause error) error {
	d.lastErr = cause
	return nil
}

// consumeInOrder is the consumer stage for per-key order: the deliveries
// of ordered messages, duplicates included, handed one at a time in the
// order the broker got them to a consumer that holds keys, whose handler
// fails a fifth of its runs at random; a delivery handed back to the broker
// comes again behind the others. It returns how many messages of
// keys took effect out of the order of their first delivery, and how many
// took effect.
func (s *system) consumeInOrder(ctx context.Context, ds []delivery) (outOfOrder, took int) {
	table := s.schema + ".consumer_ordered_effects"
	must(s.t, s.harness(ctx, func(ctx context.Context) error {
		_, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (seq bigserial PRIMARY KEY, message_id uuid NOT NULL, key text NOT NULL)`)
		return err
	}))
	c, err := consume.New(s.db, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		if rand.IntN(5) == 0 {
			return errors.New("the ledger is busy")
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (message_id, key) VALUES ($1, $2)`, m.ID, m.Key)
		return err
	}, consume.Options{Name: "faults-ordered", Tables: store.TablesOf(s.outbox),
		Retry: relayer.Retry{MaxAttempts: 100, Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}})
	must(s.t, err)
	stop, err := c.StartHeldKeys(ctx, consume.HeldKeysOptions{Ordered: true, DeadLetters: stageDeadLetters{s}, Poll: 20 * time.Millisecond})
	must(s.t, err)
	defer stop()
	first := map[string][]uuid.UUID{} // each key's messages in the order of their first delivery
	seen := map[uuid.UUID]bool{}
	var queue []*faultDelivery
	for _, d := range ds {
		if !d.ordered {
			continue
		}
		if !seen[d.id] {
			seen[d.id] = true
			first[d.key] = append(first[d.key], d.id)
		}
		queue = append(queue, &faultDelivery{id: d.id, key: d.key})
	}
	// A delivery handed back comes again behind the ones delivered
	// meanwhile, as JetStream and RabbitMQ redeliver.
	for handed := 0; len(queue) > 0; handed++ {
		fd := queue[0]
		queue = queue[1:]
		out, err := c.Handle(ctx, fd)
		if out == consume.Retried || out == consume.Abandoned {
			queue = append(queue, fd)
		}
		if handed > 100*len(seen) || ctx.Err() != nil {
			s.t.Errorf("ordered consumer stage: %d deliveries not settled: %s, %v", len(queue), out, err)
			return 0, 0
		}
	}
	// The held keys drain; then each key's effects are in order.
	testkit.Within(30*time.Second, func() bool {
		var effected int
		must(s.t, s.harness(ctx, func(ctx context.Context) error {
			return s.db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&effected)
		}))
		return effected >= len(seen)
	})
	got := map[string][]uuid.UUID{}
	must(s.t, s.harness(ctx, func(ctx context.Context) error {
		clear(got)
		r, err := s.db.QueryContext(ctx, `SELECT message_id, key FROM `+table+` ORDER BY seq`)
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			var id uuid.UUID
			var key string
			if err := r.Scan(&id, &key); err != nil {
				return err
			}
			got[key] = append(got[key], id)
		}
		return r.Err()
	}))
	for key, want := range first {
		for i, id := range got[key] {
			took++
			if i >= len(want) || want[i] != id {
				outOfOrder++
			}
		}
	}
	return outOfOrder, took
}

// stageDeadLetters fails the test when the ordered consumer stage gives a
// message up.
type stageDeadLetters struct{ s *system }

func (d stageDeadLetters) DeadLetter(_ context.Context, m *relayer.Message, cause error) error {
	d.s.t.Errorf("ordered consumer stage: message %v dead-lettered: %v", m.ID, cause)
	return nil
}
