package relayerbun

import (
	"database/sql"
	"weak"
)

// Bound reports whether the registry holds a state for tx.
func Bound(tx *sql.Tx) bool { return BoundWeak(weak.Make(tx)) }

// BoundWeak reports whether the registry holds a state for the *sql.Tx p was
// made from, without keeping it alive.
func BoundWeak(p weak.Pointer[sql.Tx]) bool {
	_, ok := bound.Load(p)
	return ok
}
