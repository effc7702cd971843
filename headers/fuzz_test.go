package headers_test

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/relayer-go/relayer/headers"
)

// FuzzDecode feeds arbitrary bytes to Decode. Besides not panicking, every
// accepted input must re-encode to exactly the same bytes: that is what makes
// the format canonical, and it would catch a decoder that skips or
// reinterprets anything it was given.
func FuzzDecode(f *testing.F) {
	for _, v := range vectors {
		f.Add(unhex(f, v.hex))
	}
	for _, c := range corrupt {
		f.Add(unhex(f, c.hex))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		hs, err := headers.Decode(data, nil)
		if err != nil {
			matched := 0
			for _, s := range sentinels {
				if errors.Is(err, s) {
					matched++
				}
			}
			if matched != 1 {
				t.Fatalf("error %q matches %d sentinels, want exactly 1", err, matched)
			}
			if errors.Is(err, headers.ErrLengthOverflow) {
				t.Fatalf("decode reported an encode-only error: %v", err)
			}
			return
		}
		for i, h := range hs {
			if !utf8.ValidString(h.Name) {
				t.Fatalf("header %d: decoded an invalid UTF-8 name %q", i, h.Name)
			}
		}
		if n := headers.EncodedLen(hs); n != len(data) {
			t.Fatalf("EncodedLen = %d, want input length %d", n, len(data))
		}
		again, err := headers.Encode(hs)
		if err != nil {
			t.Fatalf("re-encoding decoded headers: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("re-encoding differs from input\n got % x\nwant % x", again, data)
		}

		// Decoding into a dirty, reused slice must give the same headers.
		dst := append(make([]headers.Header, 0, 2), headers.Header{Name: "stale"})
		reused, err := headers.Decode(data, dst)
		if err != nil || !sameHeaders(reused, hs) {
			t.Fatalf("decode into reused dst = %q, %v; want %q", reused, err, hs)
		}
	})
}

// FuzzRoundTrip builds a header list from fuzz input, encodes it and decodes
// it again. The input is read as a little script: one byte for a name length,
// that many name bytes, one byte for a value length, that many value bytes,
// repeated. Names are raw bytes, so the fuzzer also explores invalid UTF-8,
// which Encode must refuse rather than write.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x01a\x01b"))
	f.Add([]byte("\x00\x00\x00\x00"))
	f.Add([]byte("\x02\xff\xfe\x00"))
	f.Add([]byte("\x06\xe6\x97\xa5\xe6\x9c\xac\x03\x00\xff\x01\x01x\x011\x01x\x012"))
	f.Fuzz(func(t *testing.T, script []byte) {
		var hs []headers.Header
		validNames := true
		for len(script) > 0 {
			var name, value []byte
			name, script = take(script)
			value, script = take(script)
			validNames = validNames && utf8.Valid(name)
			// value is a non-nil subslice of script, which keeps the
			// comparison below a plain reflect.DeepEqual: Decode also
			// returns non-nil empty values.
			hs = append(hs, headers.Header{Name: string(name), Value: value})
		}

		data, err := headers.Encode(hs)
		if !validNames {
			if !errors.Is(err, headers.ErrInvalidName) {
				t.Fatalf("Encode with an invalid name: error = %v, want ErrInvalidName", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		if len(data) != headers.EncodedLen(hs) {
			t.Fatalf("len(Encode) = %d, EncodedLen = %d", len(data), headers.EncodedLen(hs))
		}
		got, err := headers.Decode(data, nil)
		if err != nil {
			t.Fatalf("Decode of freshly encoded data: %v", err)
		}
		if !reflect.DeepEqual(got, hs) {
			t.Fatalf("round trip mismatch\n got %q\nwant %q", got, hs)
		}
	})
}

// take splits one length-prefixed chunk off the front of script. A length
// that runs past the end is cut short rather than rejected, so every input
// produces some header list.
func take(script []byte) (chunk, rest []byte) {
	if len(script) == 0 {
		return script, script
	}
	n := min(int(script[0]), len(script)-1)
	script = script[1:]
	return script[:n:n], script[n:]
}
