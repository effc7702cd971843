package dispatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/store"
)

// Stats are a dispatcher's counters since it was made.
type Stats struct {
	// Sent counts messages the broker accepted.
	Sent uint64
	// Deleted counts rows deleted after their send.
	Deleted uint64
	// Failed counts messages whose send failed and whose failure was recorded.
	Failed uint64
	// ShortDeletes counts groups whose delete removed fewer rows than were sent.
	ShortDeletes uint64
	// Expired counts groups not sent because their claim had expired by the time
	// the database answered.
	Expired uint64
	// SkippedGroups counts groups skipped without claiming (unregistered
	// transport, capability lookup failure, nonpositive MaxBatchSize).
	SkippedGroups uint64
	// CompletionFailures counts groups sent but not deleted because the delete
	// failed; their claims expire and recovery sends them again.
	CompletionFailures uint64
	// LeftForRecovery counts committed rows the dispatcher was told about but did
	// not take (full queue, stopped) or dropped at a hard stop.
	LeftForRecovery uint64
	// Scans counts recovery claim statements and ordered lane probes: the
	// worker's runs over the outbox.
	Scans uint64
}

type counters struct {
	sent, deleted, failed, shortDeletes, expired, skipped, completionFailures, left, scans atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Sent: c.sent.Load(), Deleted: c.deleted.Load(), Failed: c.failed.Load(),
		ShortDeletes: c.shortDeletes.Load(), Expired: c.expired.Load(), SkippedGroups: c.skipped.Load(),
		CompletionFailures: c.completionFailures.Load(), LeftForRecovery: c.left.Load(), Scans: c.scans.Load(),
	}
}

// group is the notified rows of one (transport, destination).
type group struct {
	endpoint
	msgs []*relayer.Message
}

// groupRows groups rows by endpoint in order of first appearance.
func groupRows(rows []relayer.Message) []group {
	var groups []group
	index := make(map[endpoint]int)
	for i := range rows {
		e := endpoint{rows[i].Transport, rows[i].Destination}
		g, ok := index[e]
		if !ok {
			g = len(groups)
			index[e] = g
			groups = append(groups, group{endpoint: e})
		}
		groups[g].msgs = append(groups[g].msgs, &rows[i])
	}
	return groups
}

// sender delivers groups of unordered rows: the claim, send, and fenced
// outcome protocol shared by direct dispatch and recovery. Not safe for
// concurrent use.
type sender struct {
	transports map[string]relayer.Transport
	caps       *capCache
	batchSize  int
	claimFor   time.Duration
	logger     *slog.Logger
	stats      *counters
	ids        []uuid.UUID
	claimed    []uuid.UUID
	// tainted is set when a transport call was abandoned and may still read
	// the messages it was given: their owner must not reuse that memory.
	tainted bool
}

// resolve returns the transport of an endpoint and the largest chunk to send
// to it. When the transport is not registered or its capabilities cannot be
// had, it logs, counts a skipped group and returns false.
func (s *sender) resolve(ctx context.Context, e endpoint, rows int) (relayer.Transport, int, bool) {
	tr, ok := s.transports[e.transport]
	if !ok {
		s.stats.skipped.Add(1)
		s.logger.Error("dispatch: transport not registered; group skipped for recovery",
			slog.String("transport", e.transport), slog.String("destination", e.destination), slog.Int("rows", rows))
		return nil, 0, false
	}
	caps, err := s.caps.get(ctx, e, tr)
	if err != nil {
		s.stats.skipped.Add(1)
		s.logger.Error("dispatch: capability lookup failed; group skipped for recovery",
			slog.String("transport", e.transport), slog.String("destination", e.destination),
			slog.Int("rows", rows), slog.String("error", err.Error()))
		return nil, 0, false
	}
	return tr, min(s.batchSize, caps.MaxBatchSize), true
}

// deliver claims and sends one group in chunks bounded by the batch size and
// the endpoint's MaxBatchSize. It returns an error only for a failed database
// statement, after which the caller drops its connection; transport failures
// are recorded on the rows and logged.
func (s *sender) deliver(ctx context.Context, conn *workerConn, g group) error {
	tr, size, ok := s.resolve(ctx, g.endpoint, len(g.msgs))
	if !ok {
		return nil
	}
	for start := 0; start < len(g.msgs); start += size {
		if err := s.deliverChunk(ctx, conn, tr, g.endpoint, g.msgs[start:min(start+size, len(g.msgs))]); err != nil {
			return err
		}
	}
	return nil
}

// deliverChunk claims notified rows by id and sends the ones it claimed. The
// claim returns ids only: the notification already holds each row's stored
// bytes, so they are not read back.
func (s *sender) deliverChunk(ctx context.Context, conn *workerConn, tr relayer.Transport, e endpoint, msgs []*relayer.Message) error {
	st, err := conn.store(ctx)
	if err != nil {
		return fmt.Errorf("pin connection: %w", err)
	}
	s.ids = s.ids[:0]
	for _, m := range msgs {
		s.ids = append(s.ids, m.ID)
	}
	now := time.Now()
	claim := store.NewClaim(now, s.claimFor)
	s.claimed, err = st.ClaimIDs(ctx, s.claimed, s.ids, claim, now)
	if err != nil {
		return err
	}
	if len(s.claimed) == 0 {
		return nil // sent by someone else, not yet due, or gone with a savepoint
	}
	if len(s.claimed) < len(msgs) {
		keep := msgs[:0:0]
		for _, m := range msgs {
			if _, found := slices.BinarySearchFunc(s.claimed, m.ID, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) }); found {
				keep = append(keep, m)
			}
		}
		msgs = keep
	}
	abandoned, err := s.sendClaimed(ctx, st, e, tr, msgs, claim)
	s.tainted = s.tainted || abandoned
	return err
}

// sendClaimed sends msgs, all claimed with claim, and settles the outcome. It
// reports abandoned when a transport call was abandoned and may still read the
// messages: the caller must not reuse their memory.
func (s *sender) sendClaimed(ctx context.Context, st *store.Store, e endpoint, tr relayer.Transport, msgs []*relayer.Message, claim store.Claim) (abandoned bool, err error) {
	if !time.Now().Before(claim.Until) {
		s.stats.expired.Add(1)
		s.logger.Warn("dispatch: claim expired before sending; not sending",
			slog.String("transport", e.transport), slog.String("destination", e.destination), slog.Int("rows", len(msgs)))
		return false, nil
	}
	sendErr := send(ctx, tr, msgs, claim.Until)
	return errors.Is(sendErr, errAbandoned), s.settle(ctx, st, e, msgs, claim.Token, sendErr)
}

// settle records the outcome of a send: deletes what the broker accepted and
// records the failures, both fenced by the claim token.
func (s *sender) settle(ctx context.Context, st *store.Store, g endpoint, msgs []*relayer.Message, token uuid.UUID, sendErr error) error {
	var accepted []uuid.UUID
	var failures []store.Failure
	var batchErr *relayer.BatchError
	switch {
	case sendErr == nil:
		accepted = make([]uuid.UUID, len(msgs))
		for i, m := range msgs {
			accepted[i] = m.ID
		}
	case errors.As(sendErr, &batchErr) && len(batchErr.Errs) == len(msgs):
		for i, m := range msgs {
			if err := batchErr.Errs[i]; err != nil {
				failures = append(failures, store.Failure{ID: m.ID, Error: err.Error()})
			} else {
				accepted = append(accepted, m.ID)
			}
		}
	default:
		failures = make([]store.Failure, len(msgs))
		for i, m := range msgs {
			failures[i] = store.Failure{ID: m.ID, Error: sendErr.Error()}
		}
	}
	s.stats.sent.Add(uint64(len(accepted)))
	if len(accepted) > 0 {
		n, err := st.CompleteBatch(ctx, accepted, token, time.Now())
		if err != nil {
			s.stats.completionFailures.Add(1)
			s.logger.Error("dispatch: completion failed after a successful send; claims left to expire, the rows will be sent again",
				slog.String("transport", g.transport), slog.String("destination", g.destination),
				slog.Int("rows", len(accepted)), slog.String("error", err.Error()))
			return err
		}
		s.stats.deleted.Add(uint64(n))
		if n < int64(len(accepted)) {
			s.stats.shortDeletes.Add(1)
			s.logger.Warn("dispatch: deleted fewer rows than were sent; their claims expired and they may be delivered again",
				slog.String("transport", g.transport), slog.String("destination", g.destination),
				slog.Int("sent", len(accepted)), slog.Int64("deleted", n))
		}
	}
	if len(failures) > 0 {
		n, err := st.FailBatch(ctx, failures, token, time.Now())
		if err != nil {
			s.logger.Error("dispatch: recording a failed send failed; claims left to expire",
				slog.String("transport", g.transport), slog.String("destination", g.destination),
				slog.Int("rows", len(failures)), slog.String("error", err.Error()))
			return err
		}
		s.stats.failed.Add(uint64(n))
		s.logger.Warn("dispatch: send failed; attempts recorded and claims released",
			slog.String("transport", g.transport), slog.String("destination", g.destination),
			slog.Int("rows", len(failures)), slog.Int64("recorded", n), slog.String("error", failures[0].Error))
	}
	return nil
}

// send calls the transport with a deadline at the claim's expiry: a send that
// outlives its claim risks a duplicate. A transport that ignores its context is
// abandoned at the deadline (its goroutine ends when the transport returns),
// so that neither the claim protocol nor shutdown waits on it.
func send(ctx context.Context, tr relayer.Transport, msgs []*relayer.Message, until time.Time) error {
	ctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("transport panicked: %v", r)
			}
		}()
		if len(msgs) == 1 {
			done <- tr.Send(ctx, msgs[0])
		} else {
			done <- tr.SendBatch(ctx, msgs)
		}
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errAbandoned, ctx.Err())
	}
}

var errAbandoned = errors.New("send abandoned at the claim deadline or shutdown")
