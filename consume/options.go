package consume

import (
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/store"
)

// Options configure a [Consumer]. Name is required; zero fields take their
// defaults.
type Options struct {
	// Name is the consumer's name in the inbox: each name handles a message
	// once, so two services, or two handlers of one service, that consume
	// the same messages need names of their own. It follows the inbox's
	// rules (1 to store.ConsumerMaxBytes bytes of valid UTF-8, no NUL).
	Name string
	// Tables names the outbox tables whose <prefix>inbox table records the
	// handled messages. Default: the Writer's, when there is one; otherwise
	// schema "public" and no prefix.
	Tables store.Tables
	// Writer, when set, lets handlers publish follow-up messages in the
	// message's transaction (Tx.Publish), and tells its listener (a
	// dispatch.Runner in this process) about them once the transaction
	// commits.
	Writer *enlist.Writer
	// Retry is how a message whose handler fails is retried: each failure
	// spends one of MaxAttempts deliveries and waits Backoff, then twice as
	// long after each further failure up to MaxBackoff, each wait shortened
	// by a random part of up to a fifth. A message whose handler fails
	// MaxAttempts times, or fails with relayer.ErrPermanent, is
	// dead-lettered. Defaults: 10 attempts, 1s, 5m (relayer.Retry's).
	Retry relayer.Retry
	// TxOptions are the transaction's; nil is the driver's default, READ
	// COMMITTED on PostgreSQL, under which two deliveries of one message
	// racing each other commit its effects exactly once (see the inbox
	// package).
	TxOptions *sql.TxOptions
	// HoldKeys says whether a failing message with an ordering key holds
	// its key, so that the key's later messages wait behind it in the
	// consumer's database and take effect in order (see
	// [Consumer.StartHeldKeys]): [HoldKeysAuto], the default, where the
	// adapter hands a key's messages over in order. With HoldKeysOff, a
	// failing message is delivered again after the messages delivered
	// meanwhile, or holds its Kafka partition while it is retried.
	HoldKeys KeyHolding
	// Logger receives the consumer's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Validate reports the first field that cannot work, wrapping
// [ErrInvalidOptions].
func (o Options) Validate() error {
	if err := checkName(o.Name); err != nil {
		return err
	}
	if err := o.Tables.Validate(); err != nil {
		return fmt.Errorf("%w: Tables: %w", ErrInvalidOptions, err)
	}
	if err := o.Retry.Validate(); err != nil {
		return fmt.Errorf("%w: Retry: %w", ErrInvalidOptions, err)
	}
	if o.HoldKeys < HoldKeysAuto || o.HoldKeys > HoldKeysOff {
		return fmt.Errorf("%w: HoldKeys is %d, not one of HoldKeysAuto, HoldKeysOn, HoldKeysOff", ErrInvalidOptions, int(o.HoldKeys))
	}
	return nil
}

// checkName applies the inbox's rules for a consumer name.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: Name is required: it scopes the inbox's deduplication", ErrInvalidOptions)
	}
	if len(name) > store.ConsumerMaxBytes {
		return fmt.Errorf("%w: Name is %d bytes, over %d", ErrInvalidOptions, len(name), store.ConsumerMaxBytes)
	}
	if !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("%w: Name %q is not valid UTF-8 or holds a NUL byte", ErrInvalidOptions, name)
	}
	return nil
}
