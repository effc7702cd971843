package storesql

import (
	"database/sql/driver"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// Arrays travel as PostgreSQL array literals in text form. Both database/sql
// drivers the stores support (pgx's stdlib and lib/pq) pass a string through,
// while neither accepts the other's native array wrappers; one text form keeps
// the store driver-agnostic. The hot statements declare the parameter as text
// and cast it in SQL ($1::text::uuid[]): typed as uuid[], pgx would parse the
// literal into an array and encode it again, which cost a 100-row delete
// nearly a thousand allocations and about a fifth of its time. For the same
// reason the lane statements pass lease tokens as strings: pgx encodes a
// uuid.UUID through its driver.Valuer, whose text it first tries to encode
// in binary, failing with a formatted error, and then parses back.

// UUIDArray is a uuid[] parameter, sent as an array literal.
type UUIDArray []uuid.UUID

// Value implements driver.Valuer.
func (a UUIDArray) Value() (driver.Value, error) {
	b := make([]byte, 0, 2+len(a)*37)
	b = append(b, '{')
	for i, id := range a {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendUUID(b, id)
	}
	b = append(b, '}')
	return string(b), nil
}

// appendUUID appends id's canonical text form to b, as uuid.UUID.String
// without its allocation. transport/kafka keeps the same few lines
// (encodeUUID) on purpose: a module of its own, it does not reach into the
// core's internal packages.
func appendUUID(b []byte, id uuid.UUID) []byte {
	var buf [36]byte
	hex.Encode(buf[0:8], id[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], id[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], id[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], id[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], id[10:])
	return append(b, buf[:]...)
}

// ArrayLiteral builds a one-dimensional array literal element by element. Every
// non-NULL element is double-quoted, so no element content can end it early.
// The zero value is an empty array.
type ArrayLiteral struct {
	b []byte
}

func (a *ArrayLiteral) next() {
	if len(a.b) == 0 {
		a.b = append(a.b, '{')
	} else {
		a.b = append(a.b, ',')
	}
}

func (a *ArrayLiteral) null() {
	a.next()
	a.b = append(a.b, "NULL"...)
}

// Text appends s, or NULL when null is set.
func (a *ArrayLiteral) Text(s string, null bool) {
	if null {
		a.null()
		return
	}
	a.next()
	a.b = append(a.b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			a.b = append(a.b, '\\')
		}
		a.b = append(a.b, s[i])
	}
	a.b = append(a.b, '"')
}

// Bytea appends b in bytea's hex input form; the backslash of \x is escaped
// once for the array literal.
func (a *ArrayLiteral) Bytea(b []byte) {
	a.next()
	a.b = append(a.b, `"\\x`...)
	a.b = hex.AppendEncode(a.b, b)
	a.b = append(a.b, '"')
}

// UUID appends id.
func (a *ArrayLiteral) UUID(id uuid.UUID) {
	a.next()
	a.b = appendUUID(a.b, id)
}

// Int appends n, or NULL when null is set.
func (a *ArrayLiteral) Int(n int, null bool) {
	if null {
		a.null()
		return
	}
	a.next()
	a.b = strconv.AppendInt(a.b, int64(n), 10)
}

// Time appends t as a timestamptz (see PgTime), or NULL when null is set.
func (a *ArrayLiteral) Time(t time.Time, null bool) {
	if null {
		a.null()
		return
	}
	a.next()
	a.b = append(a.b, '"')
	a.b = PgTime(t).AppendFormat(a.b, "2006-01-02 15:04:05.999999Z07:00")
	a.b = append(a.b, '"')
}

// String returns the literal.
func (a *ArrayLiteral) String() string {
	if len(a.b) == 0 {
		return "{}"
	}
	return string(append(a.b, '}'))
}

// IntArray returns ints as a PostgreSQL array literal, which every driver
// passes as text.
func IntArray(ints []int) string {
	b := make([]byte, 0, 2+4*len(ints))
	b = append(b, '{')
	for i, n := range ints {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(n), 10)
	}
	return string(append(b, '}'))
}
