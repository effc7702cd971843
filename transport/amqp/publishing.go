package relayeramqp

import (
	"fmt"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
)

// HeaderKey is the AMQP header that carries a message's ordering key. It is
// set only for messages with a key. A consistent-hash exchange configured with
// "hash-header": HeaderKey spreads keys over queues while keeping each key in
// one queue.
const HeaderKey = relayer.HeaderKey

// publishing maps m to what is published. Nothing here can be fixed by
// sending again, so every error wraps relayer.ErrPermanent. The body and
// binary header values are not copied: the publish writes them before the
// send returns.
func (t *Transport) publishing(m *relayer.Message) (amqp.Publishing, error) {
	if m == nil {
		return amqp.Publishing{}, fmt.Errorf("relayeramqp: nil message: %w", relayer.ErrPermanent)
	}
	if len(m.Destination) > shortstrMax {
		return amqp.Publishing{}, fmt.Errorf("relayeramqp: message %s: destination (routing key) %.40q… is %d bytes, AMQP allows %d: %w",
			m.ID, m.Destination, len(m.Destination), shortstrMax, relayer.ErrPermanent)
	}
	if len(m.Type) > shortstrMax {
		return amqp.Publishing{}, fmt.Errorf("relayeramqp: message %s: type %.40q… is %d bytes, AMQP allows %d: %w",
			m.ID, m.Type, len(m.Type), shortstrMax, relayer.ErrPermanent)
	}
	table, contentType, err := headerTable(m.Headers, m.Key)
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("relayeramqp: message %s: %w", m.ID, err)
	}
	return amqp.Publishing{
		Headers:      table,
		ContentType:  contentType,
		DeliveryMode: t.deliveryMode,
		MessageId:    m.ID.String(),
		Timestamp:    m.CreatedAt,
		Type:         m.Type,
		Body:         m.Body,
	}, nil
}

// headerTable encodes headers, and the ordering key under HeaderKey, as an AMQP
// table: one entry per name, whose value is the header's bytes for a name that
// occurs once and an array of them, in order, for a repeated name. Values that
// are valid UTF-8 become long strings, which every client reads as text and
// headers exchanges match against string arguments; others become byte arrays.
//
// It also returns the first content-type header's value for the AMQP
// property, when that fits the property, a short string of text.
func headerTable(hs []headers.Header, key string) (t amqp.Table, contentType string, err error) {
	if len(hs) == 0 && key == "" {
		return nil, "", nil
	}
	t = make(amqp.Table, len(hs)+1)
	seenContentType := false
	for _, h := range hs {
		if len(h.Name) > shortstrMax {
			return nil, "", fmt.Errorf("header %.40q… has a %d-byte name, AMQP allows %d: %w",
				h.Name, len(h.Name), shortstrMax, relayer.ErrPermanent)
		}
		v := fieldValue(h.Value)
		if h.Name == relayer.HeaderContentType && !seenContentType {
			seenContentType = true
			if s, text := v.(string); text && len(s) <= shortstrMax {
				contentType = s
			}
		}
		add(t, h.Name, v)
	}
	if key != "" {
		var v any = key
		if !utf8.ValidString(key) {
			v = []byte(key)
		}
		add(t, HeaderKey, v)
	}
	return t, contentType, nil
}

func add(t amqp.Table, name string, v any) {
	old, ok := t[name]
	switch vs, repeated := old.([]any); {
	case !ok:
		t[name] = v
	case repeated:
		t[name] = append(vs, v)
	default:
		t[name] = []any{old, v}
	}
}

func fieldValue(b []byte) any {
	if utf8.Valid(b) {
		return string(b)
	}
	return b
}
