package headers

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// Header is one name/value pair attached to an outbox message.
//
// Value is a byte slice rather than a string because brokers carry header
// values as raw bytes and producers are free to put binary data there.
type Header struct {
	Name  string
	Value []byte
}

// Version is the format version written by this package and the only one
// [Decode] accepts. It occupies the first four bytes of every encoding so
// that a later layout can coexist with rows already stored.
const Version = 1

// PrefixLen is the size of the fixed version and count prefix. It is also
// the complete encoding of an empty header set, and hence the shortest input
// [Decode] accepts.
const PrefixLen = 8

// minEntryLen is the size of an entry whose name and value are both empty:
// just its two length words. Bounding the count with it is what lets Decode
// reject an absurd count before allocating anything.
const minEntryLen = 8

// Sentinel errors. Errors returned by this package wrap exactly one of them
// together with positional detail, so match them with [errors.Is].
var (
	// ErrUnsupportedVersion reports a version word other than [Version],
	// typically a row written by a newer release of the relayer.
	ErrUnsupportedVersion = errors.New("unsupported header format version")

	// ErrTruncated reports input that ends too early: shorter than the
	// prefix (including empty input), or an entry whose length word, name
	// or value runs past the end.
	ErrTruncated = errors.New("truncated header data")

	// ErrCountTooLarge reports a count that could not possibly fit in the
	// remaining input, even if every entry were empty.
	ErrCountTooLarge = errors.New("header count exceeds input size")

	// ErrTrailingBytes reports bytes left over after the last entry. They
	// are rejected, not ignored, so that every accepted input is canonical.
	ErrTrailingBytes = errors.New("trailing bytes after last header")

	// ErrInvalidName reports a header name that is not valid UTF-8, both
	// when encoding and when decoding.
	ErrInvalidName = errors.New("header name is not valid UTF-8")

	// ErrLengthOverflow reports, when encoding, a header count, name or
	// value too long for its 32-bit length word, or a total encoding too
	// large to be held in memory on this platform.
	ErrLengthOverflow = errors.New("header length overflows the format")
)

// EncodedLen returns the number of bytes [Encode] would produce for hs, or
// -1 if encoding hs would fail. Callers that manage their own buffers can use
// it to size them before calling [Append].
func EncodedLen(hs []Header) int {
	n, err := encodedLen(hs)
	if err != nil {
		return -1
	}
	return n
}

// Encode returns the encoding of hs in a newly allocated slice of exactly the
// right size, so stored rows carry no spare capacity. It fails under the same
// conditions as [Append].
func Encode(hs []Header) ([]byte, error) {
	n, err := encodedLen(hs)
	if err != nil {
		return nil, err
	}
	return appendValid(make([]byte, 0, n), hs), nil
}

// Append appends the encoding of hs to dst and returns the extended slice.
// If dst already has room it does not allocate, which makes it suitable for
// reusing one buffer across many messages.
//
// hs is validated in full before anything is written: on error Append
// returns dst unchanged together with an error wrapping [ErrInvalidName] or
// [ErrLengthOverflow], so a half-written, undecodable encoding can never reach
// the database.
func Append(dst []byte, hs []Header) ([]byte, error) {
	n, err := encodedLen(hs)
	if err != nil {
		return dst, err
	}
	if n > math.MaxInt-len(dst) {
		return dst, fmt.Errorf("headers: encoding of %d bytes does not fit after %d existing bytes: %w",
			n, len(dst), ErrLengthOverflow)
	}
	return appendValid(slices.Grow(dst, n), hs), nil
}

// encodedLen validates hs and returns its encoded size. All arithmetic is in
// uint64 and checked against math.MaxInt after every entry, so neither a
// 32-bit int nor the uint64 itself can overflow: each step adds at most
// 2*math.MaxUint32+8, far below the headroom left above math.MaxInt.
func encodedLen(hs []Header) (int, error) {
	// Check the count before looking at any element, so an impossible
	// count is reported without touching memory.
	if uint64(len(hs)) > math.MaxUint32 {
		return 0, fmt.Errorf("headers: %d headers exceed the 32-bit count limit: %w",
			len(hs), ErrLengthOverflow)
	}
	total := uint64(PrefixLen)
	for i := range hs {
		h := &hs[i]
		// Lengths are checked before the UTF-8 scan so that an oversized
		// name is rejected without reading it.
		if uint64(len(h.Name)) > math.MaxUint32 {
			return 0, fmt.Errorf("headers: header %d: name length %d exceeds the 32-bit limit: %w",
				i, len(h.Name), ErrLengthOverflow)
		}
		if uint64(len(h.Value)) > math.MaxUint32 {
			return 0, fmt.Errorf("headers: header %d: value length %d exceeds the 32-bit limit: %w",
				i, len(h.Value), ErrLengthOverflow)
		}
		if !utf8.ValidString(h.Name) {
			return 0, fmt.Errorf("headers: header %d: name: %w", i, ErrInvalidName)
		}
		total += minEntryLen + uint64(len(h.Name)) + uint64(len(h.Value))
		if total > math.MaxInt {
			return 0, fmt.Errorf("headers: header %d: total encoded size exceeds the platform limit: %w",
				i, ErrLengthOverflow)
		}
	}
	return int(total), nil
}

// appendValid writes hs, which encodedLen must already have accepted, to dst.
func appendValid(dst []byte, hs []Header) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, Version)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(hs)))
	for i := range hs {
		h := &hs[i]
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(h.Name)))
		dst = append(dst, h.Name...)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(h.Value)))
		dst = append(dst, h.Value...)
	}
	return dst
}

// Decode parses data and appends the headers it holds to dst[:0], reusing
// dst's capacity, and returns the resulting slice. Passing the previous
// result back in as dst lets a relay loop decode message after message
// without reallocating the slice.
//
// Each returned Value aliases data (zero-copy): it is a subslice of the input,
// not a copy. Callers that later modify or reuse data must copy the values
// they keep. Each Value's capacity is clipped to its length, so appending to
// one copies it instead of overwriting the entry that follows in data. Names are strings and do not alias data; they all share one
// allocation, so with enough capacity in dst Decode allocates at most once,
// and not at all when there are no headers or all names are empty.
//
// Empty input is an error ([ErrTruncated]): this package always writes at
// least the 8-byte prefix, so an empty column indicates a foreign writer.
// On error Decode returns dst[:0] and an error wrapping one of
// [ErrUnsupportedVersion], [ErrTruncated], [ErrCountTooLarge],
// [ErrTrailingBytes] or [ErrInvalidName].
func Decode(data []byte, dst []Header) ([]Header, error) {
	dst = dst[:0]
	count, nameBytes, err := validate(data)
	if err != nil {
		return dst, err
	}
	dst = slices.Grow(dst, count)

	// Pass 2: every bound was proven by validate, so these walks only copy.
	// All names go into one exactly-sized buffer and each Name is a
	// substring of it: one allocation per call instead of one per header.
	var sb strings.Builder
	sb.Grow(nameBytes)
	off := PrefixLen
	for range count {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		off += 4
		sb.Write(data[off : off+n])
		off += n
		off += 4 + int(binary.LittleEndian.Uint32(data[off:]))
	}
	names := sb.String()

	pos := 0
	off = PrefixLen
	for range count {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		off += 4 + n
		name := names[pos : pos+n]
		pos += n
		n = int(binary.LittleEndian.Uint32(data[off:]))
		off += 4
		// The capacity is clipped so that appending to a Value reallocates
		// instead of overwriting the next entry in data.
		dst = append(dst, Header{Name: name, Value: data[off : off+n : off+n]})
		off += n
	}
	return dst, nil
}

// validate is pass 1 of Decode. It checks the whole input without
// allocating and returns the entry count together with the total length of
// all names, which is what pass 2 needs to allocate exactly once.
//
// Offsets stay ints because they never exceed len(data); every length read
// from the input is compared as a uint64 against the bytes remaining, so a
// length near 2^32 cannot wrap a 32-bit int into a small positive value.
func validate(data []byte) (count, nameBytes int, err error) {
	if len(data) < PrefixLen {
		if len(data) == 0 {
			return 0, 0, fmt.Errorf("headers: empty input, expected at least the %d-byte prefix: %w",
				PrefixLen, ErrTruncated)
		}
		return 0, 0, fmt.Errorf("headers: %d bytes of input, shorter than the %d-byte prefix: %w",
			len(data), PrefixLen, ErrTruncated)
	}
	if v := binary.LittleEndian.Uint32(data); v != Version {
		return 0, 0, fmt.Errorf("headers: found version %d at offset 0, want %d: %w",
			v, Version, ErrUnsupportedVersion)
	}
	c := binary.LittleEndian.Uint32(data[4:])
	if maxCount := uint64(len(data)-PrefixLen) / minEntryLen; uint64(c) > maxCount {
		return 0, 0, fmt.Errorf("headers: count %d at offset 4 exceeds the %d entries that %d bytes can hold: %w",
			c, maxCount, len(data), ErrCountTooLarge)
	}
	// c is now at most len(data)/8, so it fits in an int on every platform.
	count = int(c)

	off := PrefixLen
	for i := range count {
		var name []byte
		name, off, err = field(data, off, i, "name")
		if err != nil {
			return 0, 0, err
		}
		if !utf8.Valid(name) {
			return 0, 0, fmt.Errorf("headers: entry %d: name at offset %d: %w",
				i, off-len(name), ErrInvalidName)
		}
		nameBytes += len(name)
		if _, off, err = field(data, off, i, "value"); err != nil {
			return 0, 0, err
		}
	}
	if off != len(data) {
		return 0, 0, fmt.Errorf("headers: %d bytes left at offset %d after %d entries: %w",
			len(data)-off, off, count, ErrTrailingBytes)
	}
	return count, nameBytes, nil
}

// field reads one length-prefixed byte string starting at off and returns it
// with the offset just past it. what and entry only serve the error message.
func field(data []byte, off, entry int, what string) ([]byte, int, error) {
	if len(data)-off < 4 {
		return nil, off, fmt.Errorf("headers: entry %d: %s length at offset %d needs 4 bytes, %d remain: %w",
			entry, what, off, len(data)-off, ErrTruncated)
	}
	n := uint64(binary.LittleEndian.Uint32(data[off:]))
	off += 4
	if rem := uint64(len(data) - off); n > rem {
		return nil, off, fmt.Errorf("headers: entry %d: %s length %d at offset %d exceeds the %d remaining bytes: %w",
			entry, what, n, off-4, rem, ErrTruncated)
	}
	end := off + int(n)
	return data[off:end], end, nil
}

// Get returns the value of the first header named name, and whether one was
// found. The first occurrence is chosen to match net/http's Header.Get, so
// code moving between the two sees the same behaviour with duplicates; use
// [Values] to see them all. Names are compared byte for byte, exactly as they
// are stored, without case folding.
func Get(hs []Header, name string) ([]byte, bool) {
	for i := range hs {
		if hs[i].Name == name {
			return hs[i].Value, true
		}
	}
	return nil, false
}

// Values returns the values of every header named name, in their stored
// order, or nil if there is none. Like [Get] it compares names exactly. The
// returned values alias those in hs.
func Values(hs []Header, name string) [][]byte {
	var vs [][]byte
	for i := range hs {
		if hs[i].Name == name {
			vs = append(vs, hs[i].Value)
		}
	}
	return vs
}
