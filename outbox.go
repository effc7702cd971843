package relayer

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/headers"
)

// Outbox describes one outbox: where its tables live, where each message type
// goes and how message values become bodies. Writers and dispatchers of one
// outbox are built from the same Outbox; they snapshot it at construction.
type Outbox struct {
	// Schema and TablePrefix name the outbox tables; see the store package for
	// the rules. Defaults: "public" and "".
	Schema      string
	TablePrefix string
	// Routes maps message types to transports and destinations. Required.
	Routes *Routes
	// Transports are the named transports routes refer to. Writers do not need
	// them; dispatchers look transports up here by name.
	Transports map[string]Transport
	// Serializer encodes message values. Default: [JSON].
	Serializer Serializer
	// Lanes is the number of ordered lanes, [LanesMin] to [LanesMax]. Every writer
	// and worker of the outbox must use the same count. Default: [LanesDefault].
	Lanes int
	// TraceContext returns the W3C trace context (traceparent and tracestate) to
	// store with each message enlisted under ctx. Default: none is stored.
	TraceContext func(ctx context.Context) (traceParent, traceState string)
}

// Outgoing is a message value to publish, with its per-message options.
type Outgoing struct {
	// Message is the value to serialize. Its type, named by [TypeOf], selects the
	// route.
	Message any
	// Key is the ordering key. Ordered routes require one; on unordered routes it
	// is stored and sent but orders nothing.
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

// Key sets the ordering key.
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
)
