package store

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// ConsumerMaxBytes is the longest inbox consumer name, in bytes: 1,024. The
// name is part of the inbox's primary key, whose b-tree entries PostgreSQL
// limits to 2,704 bytes.
const ConsumerMaxBytes = 1024

// RecordInbox records, in one statement, that consumer received the message
// messageID, and reports whether this call recorded it: first is false when the
// pair was recorded before. Run it on the consumer's transaction (see
// [Store.With]) so that the record commits or rolls back with the consumer's
// own writes.
//
// When another transaction has recorded the same pair and not yet ended, the
// statement waits for it: if that transaction commits, first is false; if it
// rolls back, this call records the pair. Under REPEATABLE READ or
// SERIALIZABLE, a pair committed by a transaction this one cannot see fails
// with a serialization error (SQLSTATE 40001) instead; retry the transaction.
//
// consumer must be non-empty valid UTF-8 without NUL bytes, at most
// [ConsumerMaxBytes] long, and messageID must
// not be the zero UUID; otherwise the error wraps [ErrInvalidArgument].
func (s *Store) RecordInbox(ctx context.Context, consumer string, messageID uuid.UUID) (first bool, err error) {
	if err := checkInboxArgs(consumer, messageID); err != nil {
		return false, err
	}
	return s.affectedOne(ctx, "record inbox", s.q.recordInbox, consumer, messageID)
}

func checkInboxArgs(consumer string, messageID uuid.UUID) error {
	switch {
	case consumer == "":
		return fmt.Errorf("%w: consumer is empty", ErrInvalidArgument)
	case !utf8.ValidString(consumer):
		return fmt.Errorf("%w: consumer is not valid UTF-8", ErrInvalidArgument)
	case strings.IndexByte(consumer, 0) >= 0:
		return fmt.Errorf("%w: consumer contains a NUL byte", ErrInvalidArgument)
	case len(consumer) > ConsumerMaxBytes:
		return fmt.Errorf("%w: consumer is %d bytes, over the limit of %d (ConsumerMaxBytes)", ErrInvalidArgument, len(consumer), ConsumerMaxBytes)
	case messageID == uuid.Nil:
		return fmt.Errorf("%w: message id is the zero UUID", ErrInvalidArgument)
	}
	return nil
}
