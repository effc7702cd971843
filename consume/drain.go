package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/storesql"
	"github.com/relayer-go/relayer/store"
)

// dueKeys returns held keys whose first message is due (or skipped), and
// when the next of the others is (zero: none is held, or more are due).
func (c *Consumer) dueKeys(ctx context.Context) (keys []string, next time.Time, err error) {
	err = c.inTx(ctx, func(q store.DBTX, _ func(context.Context, *relayer.Message) error) error {
		rows, err := queryRows(ctx, q, c.held.q.due, c.opts.Name)
		if err != nil {
			return err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var k string
			var due bool
			var at time.Time
			if err := rows.Scan(&k, &due, &at); err != nil {
				return err
			}
			n++
			switch {
			case due && len(keys) < 16:
				keys = append(keys, k)
			case !due && next.IsZero():
				next = at
			}
		}
		if n == 17 && next.IsZero() {
			next = time.Now() // more are due: look again at once
		}
		return rows.Err()
	})
	return keys, next, err
}

// drainHeld drains the due held keys until ctx ends: when the next is
// due, when a key is held, and at least every opts.Poll (for keys other
// processes of the consumer hold).
func (c *Consumer) drainHeld(ctx context.Context, opts HeldKeysOptions) {
	t := time.NewTimer(opts.Poll)
	defer t.Stop()
	for {
		keys, next, err := c.dueKeys(ctx)
		if err != nil && ctx.Err() == nil && !c.waitedOut(ctx, err) {
			c.opts.Logger.Warn("consume: reading the held keys failed; trying again", slog.String("consumer", c.opts.Name),
				slog.String("error", err.Error()))
		}
		for _, key := range keys {
			c.drainKey(ctx, key, opts.DeadLetters)
		}
		wait := opts.Poll
		if !next.IsZero() {
			wait = min(wait, max(time.Until(next), 0))
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.held.wake:
		}
	}
}

// drainStep is what one transaction of a key's drain did.
type drainStep int

const (
	drainStop    drainStep = iota // nothing to do now: not due, locked by another drain, or freed
	drainHandled                  // the first message was handled
	drainDead                     // the first message was dead-lettered
	drainRetry                    // the first message failed; tried again after the backoff
)

// drainKey handles key's waiting messages in order, each in a transaction
// that holds the key's row locked, until one fails or none is left.
func (c *Consumer) drainKey(ctx context.Context, key string, dl DeadLetters) {
	for ctx.Err() == nil {
		step, m, err := c.drainOnce(ctx, key, dl)
		switch {
		case err != nil:
			// A fault of the database is waited out; either way the next
			// look comes back to the key, so that a key whose handler keeps
			// meeting one does not hold the drain of the others.
			if !c.waitedOut(ctx, err) && ctx.Err() == nil {
				c.opts.Logger.Warn("consume: draining a held key failed; trying again", slog.String("consumer", c.opts.Name),
					slog.String("key", key), slog.String("error", err.Error()))
			}
			return
		case step == drainHandled:
			c.outage.committed()
			c.stats.handled.Add(1)
			continue
		case step == drainDead:
			c.stats.deadLettered.Add(1)
			c.opts.Logger.Error("consume: a held message failed for good; it is dead-lettered and its key goes on",
				slog.String("consumer", c.opts.Name), slog.String("key", key), slog.String("id", m.ID.String()))
			continue
		case step == drainRetry:
			c.stats.retried.Add(1)
		}
		return
	}
}

// drainOnce runs the first waiting message of key in a transaction that
// locks the key: handled, it leaves with the handler's effects; failing,
// the handler's effects are rolled back to a savepoint, and the message is
// tried again after the backoff or, its attempts spent (or at once for a
// permanent error, or skipped by an operator), dead-lettered while the key
// stays locked. A database fault fails the whole transaction, spending no
// attempt.
func (c *Consumer) drainOnce(ctx context.Context, key string, dl DeadLetters) (step drainStep, m relayer.Message, err error) {
	err = c.inTx(ctx, func(q store.DBTX, handle func(context.Context, *relayer.Message) error) error {
		hd, ok, err := c.lockHead(ctx, q, key)
		switch {
		case err != nil:
			return &ownStatement{fmt.Errorf("consume: reading held key %q: %w", key, err)}
		case !ok:
			step = drainStop
			return nil
		case !hd.waiting:
			step = drainStop
			return execOwn(ctx, q, "free held key", c.held.q.free, c.opts.Name, key)
		}
		m = hd.m
		if err := execOwn(ctx, q, "savepoint", "SAVEPOINT relayer_held_head"); err != nil {
			return err
		}
		failure := ErrSkipped
		if !hd.skip {
			failure = handle(ctx, &m)
		}
		if failure == nil {
			step = drainHandled
			return execOwn(ctx, q, "held message done", c.held.q.done, c.opts.Name, key, hd.seq)
		}
		if !hd.skip && classify(failure, true) == fault {
			return failure // the database's: the transaction rolls back, no attempt spent
		}
		if err := execOwn(ctx, q, "rollback to savepoint", "ROLLBACK TO SAVEPOINT relayer_held_head"); err != nil {
			return err
		}
		attempt := hd.attempts + 1
		if hd.skip || errors.Is(failure, relayer.ErrPermanent) || c.retry.Exhausted(attempt) {
			if err := dl.DeadLetter(ctx, &m, failure); err != nil {
				step = drainRetry
				c.opts.Logger.Warn("consume: dead-lettering a held message failed; trying again", slog.String("consumer", c.opts.Name),
					slog.String("key", key), slog.String("id", m.ID.String()), slog.String("error", err.Error()))
				return execOwn(ctx, q, "held message retry", c.held.q.retry, c.opts.Name, key, hd.attempts,
					jittered(c.retry.Delay(attempt)).Microseconds(), storesql.CleanText(err.Error()))
			}
			step = drainDead
			return execOwn(ctx, q, "held message done", c.held.q.done, c.opts.Name, key, hd.seq)
		}
		step = drainRetry
		delay := jittered(c.retry.Delay(attempt))
		c.opts.Logger.Warn("consume: a held message failed again; its key stays held", slog.String("consumer", c.opts.Name),
			slog.String("key", key), slog.String("id", m.ID.String()), slog.Int("attempt", attempt),
			slog.Duration("after", delay), slog.String("error", failure.Error()))
		return execOwn(ctx, q, "held message retry", c.held.q.retry, c.opts.Name, key, attempt, delay.Microseconds(),
			storesql.CleanText(failure.Error()))
	})
	return step, m, err
}

// execOwn runs one of the consumer's own statements through q.
func execOwn(ctx context.Context, q store.DBTX, op, query string, args ...any) error {
	if _, err := q.ExecContext(ctx, query, args...); err != nil {
		return &ownStatement{fmt.Errorf("consume: %s: %w", op, err)}
	}
	return nil
}
