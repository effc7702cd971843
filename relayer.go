// Package relayer is a transactional outbox for Go services on PostgreSQL.
//
// A service writes its business rows and the messages it wants to publish in one
// database transaction. Relayer stores the messages in an outbox table and then
// delivers them to a message broker at least once: right after commit, in
// per-key order through leased lanes shared by several workers, and through
// recovery for whatever was left behind. Consumers deduplicate with the inbox.
//
// This package holds the vocabulary every other package speaks:
//
//   - [Message]: one outgoing message as it is stored and sent, with its UUIDv7
//     identity ([NewID]), headers in their exact bytes, optional ordering key and
//     lane, optional delivery time and the trace context it was created under.
//   - [Transport]: a broker adapter that sends one message or a batch and reports
//     each destination's [Capabilities].
//   - [Route] and [Routes]: where each message type goes, and whether it is
//     ordered. Message types are named by [TypeOf] and [TypeName].
//   - [Serializer], with [JSON] as the default.
//   - [Lane]: the lane of an ordering key, FNV-1a-32 of the key's UTF-8 bytes
//     modulo the lane count.
//
// The mechanisms live in sub-packages: headers (the binary header codec), store
// (the PostgreSQL store and its schema), and the enlistment and dispatch
// packages built on them. This package imports only the standard library, the
// uuid package and headers, so a service pays for the data layers and brokers
// it actually uses.
//
// # Guarantees
//
// Delivery is at least once: a committed message is never dropped, and may be
// delivered again after a crash between the broker's acceptance and the
// database's record of it. Messages with one ordering key are delivered in id
// order among the rows a lane scan sees; UUIDv7 order is creation order within a
// process, not commit order across concurrent writers.
package relayer

import (
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/headers"
)

// Outgoing is a message value to publish, with its per-message options.
type Outgoing struct {
	// Message is the value to serialize. Its type, named by [TypeOf], selects the
	// route.
	Message any
	// Key is the ordering key. Ordered routes require one; on unordered routes it
	// is stored and sent but orders nothing. A key orders across the whole
	// outbox: the messages of one key are delivered in commit order whatever
	// their type and destination (the lane is a hash of the key alone), so
	// "customer-7" on an orders route and on an invoices route is one
	// sequence, where a Kafka user might expect one per topic. Prefix keys
	// (for example "invoice:" + id) to keep sequences apart.
	Key string
	// DeliverAt delays delivery until the given time. Zero means immediately.
	DeliverAt time.Time
	// Headers are sent with the message after the headers the writer adds.
	Headers []headers.Header
	// ID overrides the message identity; the zero UUID means a new [NewID].
	ID uuid.UUID
}

// Option sets a per-message option of [Outgoing].
type Option func(*Outgoing)

// NewOutgoing returns msg with opts applied.
func NewOutgoing(msg any, opts ...Option) Outgoing {
	o := Outgoing{Message: msg}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Key sets the ordering key. Keys order across the outbox, whatever the
// message's type and destination: see [Outgoing].Key.
func Key(key string) Option { return func(o *Outgoing) { o.Key = key } }

// DeliverAt delays delivery until t.
func DeliverAt(t time.Time) Option { return func(o *Outgoing) { o.DeliverAt = t } }

// Header adds a header. Repeated names are kept in order.
func Header(name string, value []byte) Option {
	return func(o *Outgoing) { o.Headers = append(o.Headers, headers.Header{Name: name, Value: value}) }
}

// WithID sets the message identity instead of a new UUIDv7, for callers that
// derive ids themselves (for example to make a retried request idempotent).
func WithID(id uuid.UUID) Option { return func(o *Outgoing) { o.ID = id } }

// Header names the writer adds to every message, before the caller's headers.
const (
	HeaderContentType = "content-type"
)

// Header names transports use to carry a message's identity and type where the
// broker has no native field for them, so that consumers (and the inbox) can
// read them back.
const (
	HeaderMessageID   = "relayer-message-id"
	HeaderMessageType = "relayer-message-type"
	// HeaderKey carries a message's ordering key, when it has one, on the
	// brokers with no native field for it (NATS, RabbitMQ).
	HeaderKey = "relayer-key"
)

// Header names of the W3C Trace Context: the OpenTelemetry wrapper of a
// transport (package otel) sends a message's creation trace context under
// them, and consumers (package consume) read it back into the message's
// TraceParent and TraceState.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)
