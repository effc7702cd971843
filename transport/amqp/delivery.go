package relayeramqp

import (
	"fmt"
	"slices"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
)

// MessageID returns the relayer message id of a delivery, for deduplication
// (see package inbox). It reads the message-id property, which the transport
// sets, and falls back to a [relayer.HeaderMessageID] header for messages
// that reached the queue another way. It fails with [ErrNoMessageID] when
// there is neither, and with a parse error when the id is not a UUID.
func MessageID(d amqp.Delivery) (uuid.UUID, error) {
	s := d.MessageId
	if s == "" {
		switch v := d.Headers[relayer.HeaderMessageID].(type) {
		case string:
			s = v
		case []byte:
			s = string(v)
		}
	}
	if s == "" {
		return uuid.Nil, ErrNoMessageID
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf("relayeramqp: message id %q: %w", s, err)
	}
	return id, nil
}

// Headers decodes a table the transport wrote back into headers: a string or
// byte-array value is one header, an array is one header per element, in
// order. The table is a map, so the order between different names is lost in
// transit; Headers returns them sorted by name, repeated names in the order
// they were sent. The ordering key, when the message had one, is among them
// under [HeaderKey]. A value of any other type — such as the x-death table
// RabbitMQ adds when it dead-letters a message — fails with an error wrapping
// [ErrHeaderType] that names the header; remove such entries first to decode
// the rest.
func Headers(t amqp.Table) ([]headers.Header, error) {
	if len(t) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(t))
	for name := range t {
		names = append(names, name)
	}
	slices.Sort(names)
	hs := make([]headers.Header, 0, len(t))
	for _, name := range names {
		switch v := t[name].(type) {
		case []any:
			for i, e := range v {
				b, ok := fieldBytes(e)
				if !ok {
					return nil, fmt.Errorf("%w: header %q, element %d, is a %T", ErrHeaderType, name, i, e)
				}
				hs = append(hs, headers.Header{Name: name, Value: b})
			}
		default:
			b, ok := fieldBytes(v)
			if !ok {
				return nil, fmt.Errorf("%w: header %q is a %T", ErrHeaderType, name, v)
			}
			hs = append(hs, headers.Header{Name: name, Value: b})
		}
	}
	return hs, nil
}

func fieldBytes(v any) ([]byte, bool) {
	switch v := v.(type) {
	case string:
		return []byte(v), true
	case []byte:
		return v, true
	}
	return nil, false
}
