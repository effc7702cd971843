package consume

import (
	"context"
	"database/sql"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
)

// Tx is the consumer's transaction for one message: a *sql.Tx (the
// handler's writes go through it), and the outbox side of it when the
// consumer has a writer. The Consumer commits or rolls it back; the handler
// must do neither.
type Tx struct {
	*sql.Tx
	out      *enlist.Tx
	onCommit []func()
}

// OnCommit registers f to run once the transaction committed, before the
// broker is acknowledged: for work that must follow the commit and never
// precede it (a cache to invalidate, a notification), in the order
// registered. f runs at most once per message: when the process dies
// between the commit and the acknowledgement, the message's redelivery is
// a duplicate, whose handler, and so whose OnCommit functions, do not run.
// Nothing runs when the transaction rolls back. A panic in f is logged and
// does not stop the acknowledgement.
func (t *Tx) OnCommit(f func()) {
	if f != nil {
		t.onCommit = append(t.onCommit, f)
	}
}

// Publish writes a follow-up message in the transaction, as enlist.Tx's
// Publish does: it commits with the handler's effects and the inbox record,
// or not at all. It returns an error wrapping [ErrNoWriter] when the
// consumer has no writer.
func (t *Tx) Publish(ctx context.Context, msg any, opts ...relayer.Option) error {
	if t.out == nil {
		return ErrNoWriter
	}
	return t.out.Publish(ctx, msg, opts...)
}

// PublishAll is [Tx.Publish] for several messages, in one statement.
func (t *Tx) PublishAll(ctx context.Context, msgs ...relayer.Outgoing) error {
	if t.out == nil {
		return ErrNoWriter
	}
	return t.out.PublishAll(ctx, msgs...)
}

func (t *Tx) commit() error {
	if t.out != nil {
		return t.out.Commit()
	}
	return t.Tx.Commit()
}

func (t *Tx) rollback() {
	if t.out != nil {
		_ = t.out.Rollback()
		return
	}
	_ = t.Tx.Rollback()
}
