package relayer

import (
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/headers"
)

// Message is one outgoing message as it is stored in the outbox and handed to a
// [Transport]. Every field is fixed when the writer enlists the message; dispatchers
// send it exactly as stored and never serialize it again.
type Message struct {
	// ID is the message identity, a UUIDv7 made by the writer (see [NewID]). It is
	// unique per outbox and travels to the broker so that consumers can deduplicate.
	ID uuid.UUID
	// Type names the message type; routes are looked up by it.
	Type string
	// Body is the serialized payload.
	Body []byte
	// Headers are the message headers with their exact bytes, duplicates and order.
	Headers []headers.Header
	// Transport is the name of the transport that delivers the message.
	Transport string
	// Destination is the transport-specific destination (topic, subject, exchange).
	Destination string
	// Key is the ordering key. The empty string means the message has no key.
	Key string
	// Ordered reports whether the message belongs to an ordered lane; Lane is
	// meaningful only when it is true.
	Ordered bool
	// Lane is the lane of an ordered message: [Lane] of Key for the store's lane count.
	Lane int
	// CreatedAt is when the writer enlisted the message (UTC, microsecond precision).
	CreatedAt time.Time
	// DeliverAt is the earliest delivery time; the zero value means immediately.
	DeliverAt time.Time
	// TraceParent and TraceState hold the W3C trace context that was current when
	// the message was enlisted, so that delivery spans can be parented to it. Both
	// are empty when there was no valid span context.
	TraceParent string
	TraceState  string
}

// NewID returns a new message identity: a UUIDv7, whose leading 48 bits are the
// Unix time in milliseconds, so ids made later in one process sort after ids made
// earlier. Across processes ids sort by time only to the millisecond and do not
// reflect commit order.
func NewID() (uuid.UUID, error) {
	return uuid.NewV7()
}
