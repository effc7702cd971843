package store

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/storesql"
)

// Claim is a fenced hold on rows: only the holder of Token may renew, complete or
// fail them, and only until Until.
type Claim struct {
	Token uuid.UUID
	Until time.Time
}

// NewClaim returns a claim with a fresh random token that lasts d from now.
func NewClaim(now time.Time, d time.Duration) Claim {
	return Claim{Token: uuid.New(), Until: pgTime(now).Add(d)}
}

func (c Claim) validate(now time.Time) error {
	if c.Token == uuid.Nil {
		return fmt.Errorf("%w: claim token is the zero UUID", ErrInvalidArgument)
	}
	if !pgTime(c.Until).After(now) {
		return fmt.Errorf("%w: claim expiry %s is not after now %s", ErrInvalidArgument,
			c.Until.UTC().Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	return nil
}

// Claim takes a fenced claim on one eligible row in one conditional UPDATE. It
// reports false, changing nothing, when the row is missing, parked, not yet due,
// or held by a claim that has not expired at now.
func (s *Store) Claim(ctx context.Context, id uuid.UUID, c Claim, now time.Time) (bool, error) {
	now = pgTime(now)
	if err := c.validate(now); err != nil {
		return false, err
	}
	return s.affectedOne(ctx, "claim", s.q.claim, id, c.Token, pgTime(c.Until), now)
}

// ClaimBatch claims, in one statement, those of ids that are eligible at now and
// not being claimed by anyone else at this moment, and returns the claimed rows in
// ascending id order appended to dst[:0]. Rows it cannot claim are left as they
// are; a caller sends only what it returns.
func (s *Store) ClaimBatch(ctx context.Context, dst []Row, ids []uuid.UUID, c Claim, now time.Time) ([]Row, error) {
	now = pgTime(now)
	if err := c.validate(now); err != nil {
		return dst[:0], err
	}
	if len(ids) == 0 {
		return dst[:0], nil
	}
	rows, err := s.db.QueryContext(ctx, s.q.claimBatch, storesql.UUIDArray(ids), c.Token, pgTime(c.Until), now)
	if err != nil {
		return dst[:0], wrap(ctx, "claim batch", err)
	}
	dst, err = s.scanRows(ctx, "claim batch", rows, dst[:0])
	if err != nil {
		return dst, err
	}
	sortByID(dst)
	return dst, nil
}

// sortByID puts rows in id order; RETURNING follows no order, and callers send
// in id order.
func sortByID(rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int { return bytes.Compare(a.ID[:], b.ID[:]) })
}

// Renew extends a live claim to the later of its current expiry and until. It
// reports false, changing nothing, when token is not the row's current token or
// the claim has expired at now.
func (s *Store) Renew(ctx context.Context, id, token uuid.UUID, until, now time.Time) (bool, error) {
	return s.affectedOne(ctx, "renew", s.q.renew, id, token, pgTime(until), pgTime(now))
}

// Complete deletes a delivered row. It reports false, changing nothing, when token
// is not the row's current token or the claim has expired at now.
func (s *Store) Complete(ctx context.Context, id, token uuid.UUID, now time.Time) (bool, error) {
	return s.affectedOne(ctx, "complete", s.q.complete, id, token, pgTime(now))
}

// CompleteBatch deletes, in one statement, those of ids whose current token is
// token and whose claim is live at now, and returns how many it deleted. A count
// below len(ids) means some rows lost their claim and may be delivered again.
func (s *Store) CompleteBatch(ctx context.Context, ids []uuid.UUID, token uuid.UUID, now time.Time) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	return s.affected(ctx, "complete batch", s.q.completeBatch, storesql.UUIDArray(ids), token, pgTime(now))
}

// Fail records a failed delivery: in one statement it increments attempts, saves
// errText as the last error and releases the claim, so that the row becomes
// eligible again. It reports false, changing nothing, when token is not the row's
// current token or the claim has expired at now; failing twice with one token
// therefore reports false the second time.
func (s *Store) Fail(ctx context.Context, id, token uuid.UUID, errText string, now time.Time) (bool, error) {
	return s.affectedOne(ctx, "fail", s.q.fail, id, token, cleanText(errText), pgTime(now))
}

// Failure is one row's failed delivery, for [Store.FailBatch] and
// [Store.Park].
type Failure struct {
	ID    uuid.UUID
	Error string
	// RetryAt is when the row may be sent again; zero means at once. Park
	// ignores it.
	RetryAt time.Time
}

// FailBatch is [Store.Fail] for several rows claimed with one token, in one
// statement, each eligible again from its RetryAt. It returns how many rows it
// changed.
func (s *Store) FailBatch(ctx context.Context, failures []Failure, token uuid.UUID, now time.Time) (int64, error) {
	if len(failures) == 0 {
		return 0, nil
	}
	ids, texts, retryAt := failureArrays(failures)
	return s.affected(ctx, "fail batch", s.q.failBatch, storesql.UUIDArray(ids), texts, token, pgTime(now), retryAt)
}

// Park records the last failed delivery of rows claimed with token and takes
// them out of delivery, in one statement: attempts incremented, error saved,
// claim released, and the row marked parked at the database's time. Ordered
// rows hold their key: none of its later rows is sent until the parked row is
// retried or skipped. Like FailBatch it changes only rows whose claim is live
// at now, and returns how many it changed.
func (s *Store) Park(ctx context.Context, failures []Failure, token uuid.UUID, now time.Time) (int64, error) {
	if len(failures) == 0 {
		return 0, nil
	}
	ids, texts, _ := failureArrays(failures)
	return s.affected(ctx, "park", s.q.park, storesql.UUIDArray(ids), texts, token, pgTime(now))
}

// failureArrays returns the failures' ids, and their errors and retry times
// as array literals.
func failureArrays(f []Failure) (ids []uuid.UUID, texts, retryAt string) {
	return storesql.FailureArrays(len(f), func(i int) (uuid.UUID, string, time.Time) { return f[i].ID, f[i].Error, f[i].RetryAt })
}

// ReleaseBatch gives up token's live claims on ids without recording an
// attempt, so that the rows are eligible again at once. It returns how many
// claims it released.
func (s *Store) ReleaseBatch(ctx context.Context, ids []uuid.UUID, token uuid.UUID, now time.Time) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	return s.affected(ctx, "release batch", s.q.releaseBatch, storesql.UUIDArray(ids), token, pgTime(now))
}

func (s *Store) affected(ctx context.Context, op, query string, args ...any) (int64, error) {
	return storesql.Affected(ctx, s.db, op, query, args...)
}

func (s *Store) affectedOne(ctx context.Context, op, query string, args ...any) (bool, error) {
	n, err := s.affected(ctx, op, query, args...)
	return n == 1, err
}

// cleanText is storesql.CleanText.
func cleanText(s string) string { return storesql.CleanText(s) }
