// Package heldkeys lists and releases the ordering keys consumers hold: an
// operator's view of the <prefix>inbox_held and <prefix>inbox_waiting
// tables, where a consume.Consumer keeps a failing message with a key and
// the key's later messages behind it (see consume.Consumer.StartHeldKeys),
// as package store's parked keys are the view of the outbox's.
//
// Retry makes a held key's first message due at once, its attempts from
// zero; Skip sends a key's first message, named by its id, to its
// consumer's dead letters at the drain's next look, breaking the key's
// order on purpose, and the key goes on. Both take
// effect through the consumers' drains, within their poll, so that a
// message is never handled outside its consumer's transaction.
package heldkeys

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/tables"
	"github.com/relayer-go/relayer/store"
)

// ErrNoSelection is returned by [Retry] for a filter that selects nothing
// in particular: name a consumer or a key, or both.
var ErrNoSelection = errors.New("heldkeys: name a consumer or a key")

// Key is one held key of one consumer.
type Key struct {
	Consumer string
	Key      string
	// Since is when the key was held.
	Since time.Time
	// Attempts are the failed attempts of the key's first waiting message;
	// RetryAt is when it is tried again, and LastError its last error.
	Attempts  int
	RetryAt   time.Time
	LastError string
	// Skipping is set when an operator skipped the first message: the
	// drain sends it to the dead letters at its next look.
	Skipping bool
	// Waiting counts the key's messages in the consumer's database, the
	// first one included.
	Waiting int
	// HeadID, HeadType and HeadDestination name the first waiting message
	// (zero while the drain frees a key none waits behind).
	HeadID          uuid.UUID
	HeadType        string
	HeadDestination string
}

// Filter selects held keys: by consumer name, by key, or both; the zero
// Filter selects every held key.
type Filter struct {
	Consumer string
	Key      string
}

// Count is how many keys one consumer holds and how many messages wait
// behind them.
type Count struct {
	Consumer string
	Keys     int64
	Waiting  int64
}

// names returns the tables of opts, validated.
func names(opts store.Tables) (tables.Names, error) {
	if opts.Schema == "" {
		opts.Schema = "public"
	}
	if err := opts.Validate(); err != nil {
		return tables.Names{}, fmt.Errorf("heldkeys: %w", err)
	}
	return tables.Of(opts.Schema, opts.TablePrefix), nil
}

// List returns the held keys f selects, longest held first, at most limit
// (1 or more).
func List(ctx context.Context, db store.DBTX, tables store.Tables, f Filter, limit int) ([]Key, error) {
	n, err := names(tables)
	if err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("heldkeys: %w: limit %d, want 1 or more", store.ErrInvalidArgument, limit)
	}
	rows, err := db.QueryContext(ctx, `SELECT h.consumer, h.ordering_key, h.since, h.attempts, h.retry_at, coalesce(h.last_error, ''),
    h.skip_message IS NOT NULL AND h.skip_message = w.message_id,
    (SELECT count(*) FROM `+n.InboxWaiting+` AS c WHERE c.consumer = h.consumer AND c.ordering_key = h.ordering_key),
    w.message_id::text, w.message_type, w.destination
FROM `+n.InboxHeld+` AS h
LEFT JOIN LATERAL (SELECT message_id, message_type, destination FROM `+n.InboxWaiting+`
    WHERE consumer = h.consumer AND ordering_key = h.ordering_key ORDER BY seq LIMIT 1) AS w ON true
WHERE ($1 = '' OR h.consumer = $1) AND ($2 = '' OR h.ordering_key = $2)
ORDER BY h.since, h.consumer, h.ordering_key LIMIT $3`, f.Consumer, f.Key, limit)
	if err != nil {
		return nil, fmt.Errorf("heldkeys: list: %w", err)
	}
	defer rows.Close()
	var keys []Key
	for rows.Next() {
		var k Key
		var id, typ, dest sql.NullString
		if err := rows.Scan(&k.Consumer, &k.Key, &k.Since, &k.Attempts, &k.RetryAt, &k.LastError, &k.Skipping, &k.Waiting,
			&id, &typ, &dest); err != nil {
			return nil, fmt.Errorf("heldkeys: list: %w", err)
		}
		if id.Valid {
			if k.HeadID, err = uuid.Parse(id.String); err != nil {
				return nil, fmt.Errorf("heldkeys: list: %w", err)
			}
		}
		k.HeadType, k.HeadDestination = typ.String, dest.String
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heldkeys: list: %w", err)
	}
	return keys, nil
}

// Retry makes the first waiting message of each held key f selects due at
// once, its attempts from zero, and returns how many keys it changed; the
// consumers' drains try them again at their next look. A zero Filter is
// refused with [ErrNoSelection]: retry every key of a consumer by naming it.
func Retry(ctx context.Context, db store.DBTX, tables store.Tables, f Filter) (int64, error) {
	if f == (Filter{}) {
		return 0, ErrNoSelection
	}
	n, err := names(tables)
	if err != nil {
		return 0, err
	}
	res, err := db.ExecContext(ctx, `UPDATE `+n.InboxHeld+` SET attempts = 0, retry_at = now()
WHERE ($1 = '' OR consumer = $1) AND ($2 = '' OR ordering_key = $2) AND skip_message IS NULL`, f.Consumer, f.Key)
	if err != nil {
		return 0, fmt.Errorf("heldkeys: retry: %w", err)
	}
	return res.RowsAffected()
}

// Skip marks message, the first waiting message of consumer's held key
// key, for the dead letters: the consumer's drain sends it there at its
// next look (with consume.ErrSkipped for a cause), and the key's later
// messages go on without it. It reports whether message is the key's
// first waiting message: a skip meant for a message that was handled
// meanwhile skips nothing, and a drain skips the message only while it is
// still the first.
func Skip(ctx context.Context, db store.DBTX, tables store.Tables, consumer, key string, message uuid.UUID) (bool, error) {
	if consumer == "" || key == "" || message == uuid.Nil {
		return false, fmt.Errorf("heldkeys: %w: Skip needs a consumer, a key and the id of its first waiting message", store.ErrInvalidArgument)
	}
	n, err := names(tables)
	if err != nil {
		return false, err
	}
	res, err := db.ExecContext(ctx, `UPDATE `+n.InboxHeld+` AS h SET skip_message = $3::text::uuid, retry_at = now()
WHERE consumer = $1 AND ordering_key = $2 AND (SELECT message_id FROM `+n.InboxWaiting+` AS w
    WHERE w.consumer = h.consumer AND w.ordering_key = h.ordering_key ORDER BY seq LIMIT 1) = $3::text::uuid`,
		consumer, key, message.String())
	if err != nil {
		return false, fmt.Errorf("heldkeys: skip: %w", err)
	}
	changed, err := res.RowsAffected()
	return changed > 0, err
}

// Counts returns, per consumer that holds keys, how many it holds and how
// many messages wait behind them, in consumer order.
func Counts(ctx context.Context, db store.DBTX, tables store.Tables) ([]Count, error) {
	n, err := names(tables)
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT h.consumer, count(*), coalesce(sum(w.n), 0)::bigint
FROM `+n.InboxHeld+` AS h
LEFT JOIN (SELECT consumer, ordering_key, count(*) AS n FROM `+n.InboxWaiting+` GROUP BY consumer, ordering_key) AS w
  ON w.consumer = h.consumer AND w.ordering_key = h.ordering_key
GROUP BY h.consumer ORDER BY h.consumer`)
	if err != nil {
		return nil, fmt.Errorf("heldkeys: counts: %w", err)
	}
	defer rows.Close()
	var counts []Count
	for rows.Next() {
		var c Count
		if err := rows.Scan(&c.Consumer, &c.Keys, &c.Waiting); err != nil {
			return nil, fmt.Errorf("heldkeys: counts: %w", err)
		}
		counts = append(counts, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heldkeys: counts: %w", err)
	}
	return counts, nil
}
