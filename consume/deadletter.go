package consume

import (
	"strings"
	"unicode/utf8"
)

// Headers every adapter's dead letters carry besides the message's own;
// each adapter adds one naming where the message was consumed from.
const (
	// HeaderDeadReason holds why the message left delivery: the handler's
	// error, or why the broker message is not a Relayer message, as
	// [DeadReason] writes it.
	HeaderDeadReason = "relayer-dead-reason"
	// HeaderDeadConsumer holds the name of the consumer that gave up on the
	// message (Options.Name).
	HeaderDeadConsumer = "relayer-dead-consumer"
)

// DeadReasonMax bounds the reason a dead letter carries, in bytes.
const DeadReasonMax = 1024

// DeadReason returns s (an error's text, a consumer's name) the way a dead
// letter's headers carry it on every broker: one line (line breaks become
// spaces), no blanks at either end, invalid UTF-8 replaced, and at most
// DeadReasonMax bytes, cut between characters.
func DeadReason(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ").Replace(s)
	if len(s) > DeadReasonMax {
		cut := DeadReasonMax
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return strings.Trim(s, " \t")
}
