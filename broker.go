package relayer

import "context"

// Transport delivers stored messages to a broker. Implementations must be safe for
// concurrent use. A transport reports success only after the broker has accepted
// the message (acknowledged, confirmed); the dispatcher deletes a row only after
// that, which is what makes delivery at-least-once.
//
// A transport keeps no Message it was given once Send or SendBatch returns:
// the dispatchers read their next rows into the same values. The conformance suite in package
// transporttest checks these promises against a real broker.
type Transport interface {
	// Send delivers one message. ctx bounds the whole send, including waiting for
	// the broker's acknowledgement.
	Send(ctx context.Context, msg *Message) error
	// SendBatch delivers several messages to one destination, in slice order.
	// When some messages fail and the transport knows which, it returns a
	// *[BatchError]; any other error means the whole batch failed.
	SendBatch(ctx context.Context, msgs []*Message) error
	// Capabilities describes what the broker offers for one destination. The
	// dispatcher caches successful answers per (transport, destination).
	Capabilities(ctx context.Context, destination string) (Capabilities, error)
}

// Capabilities are the native properties of one transport destination.
type Capabilities struct {
	// OrderedByKey reports that messages with the same key sent one after another
	// are delivered to consumers in that order. Ordered routes require it.
	OrderedByKey bool
	// MaxBatchSize is the largest number of messages SendBatch accepts at once. It
	// must be positive; dispatchers skip a destination that reports otherwise.
	MaxBatchSize int
	// NativeScheduling reports that the broker itself can hold a message until a
	// delivery time. Relayer keeps scheduled messages in the database either way.
	NativeScheduling bool
}
