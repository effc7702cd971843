package store

import (
	"crypto/sha256"
	"encoding/hex"
)

// channelMaxLen is PostgreSQL's longest channel name (NAMEDATALEN - 1).
const channelMaxLen = 63

// WakeChannel returns the notification channel of the outbox's wake-up
// across processes: writers NOTIFY it after commits that left rows for
// workers, and workers LISTEN to it. The payload is empty, or the lowest id
// (in its text form) of the unordered rows the commits wrote, from which
// recovery takes again. It is
// "relayer.<schema>.<prefix>outbox" (defaults applied), or, when that is
// longer than 63 bytes, its first 46 bytes, a dot and 16 hexadecimal digits
// of its SHA-256, so that every outbox has its own channel.
func (o Tables) WakeChannel() string {
	ch := "relayer." + o.Label()
	if len(ch) <= channelMaxLen {
		return ch
	}
	sum := sha256.Sum256([]byte(ch))
	return ch[:channelMaxLen-17] + "." + hex.EncodeToString(sum[:8])
}

// ListenSQL returns the statement that subscribes a session to the outbox's
// wake-up channel ([Tables.WakeChannel]).
func (o Tables) ListenSQL() string { return `LISTEN "` + o.WakeChannel() + `"` }

// NotifySQL returns a statement that wakes the outbox's listening
// workers: a NOTIFY on its wake-up channel, without a payload (every
// unordered row is then looked for from the start of recovery's next pass).
func (o Tables) NotifySQL() string { return `NOTIFY "` + o.WakeChannel() + `"` }
