package relayernats

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
)

// nameBytes marks the bytes a header name may hold: printable ASCII except
// the separators. It is the set the nats.go client accepts (it refuses the
// whole message with nats.ErrBadHeaderMsg otherwise); checking it here lets
// the error name the header.
var nameBytes = func() (set [256]bool) {
	for b := byte('!'); b <= '~'; b++ {
		set[b] = !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, rune(b))
	}
	return set
}()

// checkName returns why NATS cannot carry a header named name, or "".
func checkName(name string) string {
	if name == "" {
		return "the name is empty"
	}
	for i := 0; i < len(name); i++ {
		if !nameBytes[name[i]] {
			return fmt.Sprintf("the name holds byte %#02x at %d; names are printable ASCII without spaces or any of \"(),/:;<=>?@[\\]{}", name[i], i)
		}
	}
	return ""
}

// checkValue returns why NATS cannot carry value unchanged, or "". The client
// replaces CR and LF with spaces and trims spaces and tabs at both ends; every
// other byte, including NUL and bytes that are not UTF-8, arrives as sent.
func checkValue[V string | []byte](value V) string {
	for i := 0; i < len(value); i++ {
		if b := value[i]; b == '\r' || b == '\n' {
			return fmt.Sprintf("the value holds a line break (%#02x) at %d", b, i)
		}
	}
	if n := len(value); n > 0 && (isBlank(value[0]) || isBlank(value[n-1])) {
		return "the value begins or ends with a space or tab, which NATS trims"
	}
	return ""
}

func isBlank(b byte) bool { return b == ' ' || b == '\t' }

// reservedPrefix starts the names JetStream reads as publish directives
// (Nats-Msg-Id, Nats-Expected-*, Nats-TTL, Nats-Rollup, Nats-Schedule, …).
const reservedPrefix = "nats-"

// statusHeader is where the nats.go client puts the status line of a server
// control message; a consumer reads a message with this header and no body
// as one.
const statusHeader = "Status"

// natsHeader maps msg's headers, identity, type and key into a NATS header;
// it refuses with a *HeaderError whatever NATS would change or misread.
func natsHeader(msg *relayer.Message, stream string) (nats.Header, error) {
	h := make(nats.Header, len(msg.Headers)+4)
	for i, hd := range msg.Headers {
		if err := checkHeader(i, hd, len(msg.Body) == 0); err != nil {
			return nil, err
		}
		// Direct map use keeps the name's case: NATS header names are
		// case-sensitive and nats.go never canonicalizes them.
		h[hd.Name] = append(h[hd.Name], string(hd.Value))
	}
	if reason := checkValue(msg.Type); reason != "" {
		return nil, &HeaderError{Name: relayer.HeaderMessageType, Index: -1, Reason: reason}
	}
	// The transport's identity and type go last, after any values the
	// message itself carries under these names (a message forwarded with its
	// original headers, say); MessageID and MessageType read the last value.
	id := msg.ID.String()
	h[jetstream.MsgIDHeader] = []string{id}
	h[relayer.HeaderMessageID] = append(h[relayer.HeaderMessageID], id)
	h[relayer.HeaderMessageType] = append(h[relayer.HeaderMessageType], msg.Type)
	if msg.Key != "" {
		h[relayer.HeaderKey] = append(h[relayer.HeaderKey], encodeKey(msg.Key))
	}
	if stream != "" {
		h[jetstream.ExpectedStreamHeader] = []string{stream}
	}
	return h, nil
}

func checkHeader(i int, hd headers.Header, emptyBody bool) error {
	reason := checkName(hd.Name)
	switch {
	case reason != "":
	case len(hd.Name) >= len(reservedPrefix) && strings.EqualFold(hd.Name[:len(reservedPrefix)], reservedPrefix):
		reason = "names beginning with Nats- are JetStream publish directives"
	case hd.Name == statusHeader && emptyBody:
		reason = "with an empty body, NATS consumers read a Status header as a server status message"
	default:
		reason = checkValue(hd.Value)
	}
	if reason != "" {
		return &HeaderError{Name: hd.Name, Index: i, Reason: reason}
	}
	return nil
}

// MessageID returns the relayer message id a [Transport] put into a
// message's headers. Pass msg.Headers() of a jetstream.Msg or the Header field
// of a *nats.Msg. It reads the last relayer-message-id value: the transport
// adds its own after any the message carried itself. It fails with
// [ErrNoMessageID] when there is none, and with uuid's parse error for a value
// that is not a UUID.
func MessageID(h nats.Header) (uuid.UUID, error) {
	vs := h[relayer.HeaderMessageID]
	if len(vs) == 0 {
		return uuid.Nil, ErrNoMessageID
	}
	v := vs[len(vs)-1]
	id, err := uuid.Parse(v)
	if err != nil {
		return uuid.Nil, fmt.Errorf("relayernats: %s %q: %w", relayer.HeaderMessageID, v, err)
	}
	return id, nil
}

// MessageType returns the relayer message type a [Transport] put into a
// message's headers: the last relayer-message-type value, or "" when there is
// none.
func MessageType(h nats.Header) string {
	if vs := h[relayer.HeaderMessageType]; len(vs) > 0 {
		return vs[len(vs)-1]
	}
	return ""
}

// encodeKey returns key as the relayer-key header carries it: with the
// bytes NATS would change (CR and LF, spaces and tabs at either end) and
// '%' percent-encoded, so that any key arrives unchanged and decodeKey
// reads it back. A key without such bytes, the common case, is sent as it
// is.
func encodeKey(key string) string {
	n := len(key)
	escape := func(i int) bool {
		switch b := key[i]; {
		case b == '%' || b == '\r' || b == '\n':
			return true
		case isBlank(b):
			return i == 0 || i == n-1
		}
		return false
	}
	plain := true
	for i := range n {
		if escape(i) {
			plain = false
			break
		}
	}
	if plain {
		return key
	}
	const hexDigits = "0123456789ABCDEF"
	b := make([]byte, 0, n+8)
	for i := range n {
		if c := key[i]; escape(i) {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

// decodeKey reads back a key encodeKey wrote.
func decodeKey(v string) (string, error) {
	if !strings.Contains(v, "%") {
		return v, nil
	}
	key, err := url.PathUnescape(v)
	if err != nil {
		return "", fmt.Errorf("relayernats: %s %q: %w", relayer.HeaderKey, v, err)
	}
	return key, nil
}
