package headers_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/relayer-go/relayer/headers"
)

// unhex decodes a hex literal in which spaces and '|' are only visual
// separators between fields, so the vectors below read like the format table.
func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	s = strings.NewReplacer(" ", "", "|", "").Replace(s)
	b, err := hex.DecodeString(s)
	if err != nil {
		tb.Fatalf("bad hex literal %q: %v", s, err)
	}
	return b
}

// sameHeaders reports whether a and b hold the same names and value bytes in
// the same order. A nil value and an empty one count as equal, because the
// format cannot tell them apart.
func sameHeaders(a, b []headers.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// vectors are fixed encodings, written out by hand from the format table.
// They pin the wire format: a change here breaks every row already stored.
var vectors = []struct {
	name string
	hex  string
	hs   []headers.Header
}{
	{
		name: "zero headers",
		hex:  "01000000 00000000",
		hs:   nil,
	},
	{
		name: "one header",
		hex:  "01000000 01000000 | 01000000 61 | 01000000 62",
		hs:   []headers.Header{{Name: "a", Value: []byte("b")}},
	},
	{
		name: "empty name",
		hex:  "01000000 01000000 | 00000000 | 01000000 76",
		hs:   []headers.Header{{Name: "", Value: []byte("v")}},
	},
	{
		name: "empty value",
		hex:  "01000000 01000000 | 01000000 6b | 00000000",
		hs:   []headers.Header{{Name: "k", Value: []byte{}}},
	},
	{
		name: "invalid UTF-8 value",
		hex:  "01000000 01000000 | 03000000 62696e | 03000000 fffe00",
		hs:   []headers.Header{{Name: "bin", Value: []byte{0xff, 0xfe, 0x00}}},
	},
	{
		name: "duplicate names keep order",
		hex: "01000000 03000000" +
			" | 01000000 78 | 01000000 31" +
			" | 01000000 79 | 01000000 32" +
			" | 01000000 78 | 01000000 33",
		hs: []headers.Header{
			{Name: "x", Value: []byte("1")},
			{Name: "y", Value: []byte("2")},
			{Name: "x", Value: []byte("3")},
		},
	},
	{
		name: "multi-byte UTF-8 name",
		hex:  "01000000 01000000 | 06000000 e697a5e69cac | 02000000 6f6b",
		hs:   []headers.Header{{Name: "日本", Value: []byte("ok")}},
	},
	{
		name: "all names and values empty",
		hex:  "01000000 02000000 | 00000000 | 00000000 | 00000000 | 00000000",
		hs:   []headers.Header{{}, {}},
	},
}

func TestVectorsEncode(t *testing.T) {
	t.Parallel()
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			want := unhex(t, v.hex)

			got, err := headers.Encode(v.hs)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("Encode = % x\nwant     % x", got, want)
			}
			if cap(got) != len(got) {
				t.Errorf("Encode returned cap %d for len %d, want an exact-size slice", cap(got), len(got))
			}
			if n := headers.EncodedLen(v.hs); n != len(want) {
				t.Errorf("EncodedLen = %d, want %d", n, len(want))
			}

			prefix := []byte("keep")
			got, err = headers.Append(prefix, v.hs)
			if err != nil {
				t.Fatalf("Append: %v", err)
			}
			if !bytes.Equal(got, append([]byte("keep"), want...)) {
				t.Fatalf("Append = % x, want existing bytes followed by % x", got, want)
			}
		})
	}
}

func TestVectorsDecode(t *testing.T) {
	t.Parallel()
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			got, err := headers.Decode(unhex(t, v.hex), nil)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !sameHeaders(got, v.hs) {
				t.Fatalf("Decode = %q, want %q", got, v.hs)
			}
		})
	}
}

var sentinels = []error{
	headers.ErrUnsupportedVersion,
	headers.ErrTruncated,
	headers.ErrCountTooLarge,
	headers.ErrTrailingBytes,
	headers.ErrInvalidName,
	headers.ErrLengthOverflow,
}

// corrupt lists malformed inputs with the one sentinel each must produce.
var corrupt = []struct {
	name string
	hex  string
	want error
}{
	{"nil input", "", headers.ErrTruncated},
	{"one byte", "01", headers.ErrTruncated},
	{"seven bytes", "01000000 000000", headers.ErrTruncated},
	{"version 0", "00000000 00000000", headers.ErrUnsupportedVersion},
	{"version 2", "02000000 00000000", headers.ErrUnsupportedVersion},
	{"version 1 big-endian", "00000001 00000000", headers.ErrUnsupportedVersion},
	{"version max", "ffffffff 00000000 | 00000000 00000000", headers.ErrUnsupportedVersion},
	{"count 1 with no entry", "01000000 01000000", headers.ErrCountTooLarge},
	{"count 2 in 15 entry bytes", "01000000 02000000 | 00000000 00000000 | 00000000 000000", headers.ErrCountTooLarge},
	{"count max", "01000000 ffffffff | 00000000 00000000", headers.ErrCountTooLarge},
	{"name runs past end", "01000000 01000000 | 05000000 6162 0000", headers.ErrTruncated},
	{"name length max", "01000000 01000000 | ffffffff 00000000", headers.ErrTruncated},
	{"value runs past end", "01000000 01000000 | 00000000 | 01000000", headers.ErrTruncated},
	{"value length max", "01000000 01000000 | 00000000 | ffffffff | 00000000", headers.ErrTruncated},
	{"name length field cut", "01000000 02000000 | 06000000 616263646566 | 00000000 | 0000", headers.ErrTruncated},
	{"value length field cut", "01000000 02000000 | 04000000 61626364 | 00000000 | 00000000", headers.ErrTruncated},
	{"trailing byte after zero headers", "01000000 00000000 | 00", headers.ErrTrailingBytes},
	{"trailing bytes after one header", "01000000 01000000 | 01000000 61 | 01000000 62 | 0000", headers.ErrTrailingBytes},
	{"trailing empty entry beyond count", "01000000 00000000 | 00000000 00000000", headers.ErrTrailingBytes},
	{"name is 0xff", "01000000 01000000 | 01000000 ff | 00000000", headers.ErrInvalidName},
	{"name with overlong NUL", "01000000 01000000 | 03000000 61c080 | 00000000", headers.ErrInvalidName},
	{"name with surrogate", "01000000 01000000 | 03000000 eda080 | 00000000", headers.ErrInvalidName},
	{"name with cut rune", "01000000 01000000 | 02000000 e697 | 00000000", headers.ErrInvalidName},
	{"second name invalid", "01000000 02000000 | 01000000 61 | 00000000 | 01000000 80 | 00000000", headers.ErrInvalidName},
}

func TestDecodeCorrupt(t *testing.T) {
	t.Parallel()
	for _, c := range corrupt {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			data := unhex(t, c.hex)
			if c.hex == "" {
				data = nil
			}
			dst := make([]headers.Header, 3, 4)
			hs, err := headers.Decode(data, dst)
			if err == nil {
				t.Fatalf("Decode succeeded with %q, want %v", hs, c.want)
			}
			for _, s := range sentinels {
				if got := errors.Is(err, s); got != (s == c.want) {
					t.Errorf("errors.Is(%q, %q) = %v", err, s, got)
				}
			}
			if !strings.HasPrefix(err.Error(), "headers: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			if len(hs) != 0 || cap(hs) != cap(dst) {
				t.Errorf("on error Decode returned len %d cap %d, want dst[:0] (cap %d)", len(hs), cap(hs), cap(dst))
			}
		})
	}
}

func TestDecodeEmptyNonNilInput(t *testing.T) {
	t.Parallel()
	_, err := headers.Decode([]byte{}, nil)
	if !errors.Is(err, headers.ErrTruncated) {
		t.Fatalf("Decode(empty) error = %v, want ErrTruncated", err)
	}
}

func TestDecodeReusesDst(t *testing.T) {
	t.Parallel()
	data := unhex(t, vectors[5].hex) // three headers
	dst := make([]headers.Header, 5, 8)
	for i := range dst {
		dst[i] = headers.Header{Name: "stale", Value: []byte("stale")}
	}
	hs, err := headers.Decode(data, dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 3 {
		t.Fatalf("len = %d, want 3", len(hs))
	}
	if &hs[0] != &dst[0] {
		t.Error("Decode did not reuse the backing array of dst")
	}
	if !sameHeaders(hs, vectors[5].hs) {
		t.Errorf("Decode = %q, want %q", hs, vectors[5].hs)
	}

	// Too little capacity must still work, by growing.
	small := make([]headers.Header, 0, 1)
	hs, err = headers.Decode(data, small)
	if err != nil || !sameHeaders(hs, vectors[5].hs) {
		t.Errorf("Decode into small dst = %q, %v", hs, err)
	}
}

func TestDecodeValuesAliasInput(t *testing.T) {
	t.Parallel()
	data := unhex(t, vectors[5].hex)
	hs, err := headers.Decode(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Zero-copy: the value is a window onto data.
	data[len(data)-1] = '9'
	if string(hs[2].Value) != "9" {
		t.Errorf("value after modifying input = %q, want it to alias the input", hs[2].Value)
	}
	// But appending to one value must not spill into the next entry.
	_ = append(hs[0].Value, "XXXXXXXX"...)
	if hs[1].Name != "y" || string(hs[1].Value) != "2" {
		t.Errorf("append to a value clobbered the next header: %q", hs[1])
	}
	// Names are copies and survive changes to data.
	data[12] = 'z'
	if hs[0].Name != "x" {
		t.Errorf("name changed with input to %q", hs[0].Name)
	}
}

func TestEncodeRejectsInvalidName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"\xff", "ok\x80", "a\xc0\x80", "\xed\xa0\x80", "\xe6\x97"} {
		hs := []headers.Header{
			{Name: "fine", Value: []byte("v")},
			{Name: name, Value: []byte("v")},
		}
		if _, err := headers.Encode(hs); !errors.Is(err, headers.ErrInvalidName) || errors.Is(err, headers.ErrLengthOverflow) {
			t.Errorf("Encode(name %q) error = %v, want ErrInvalidName only", name, err)
		}
		if n := headers.EncodedLen(hs); n != -1 {
			t.Errorf("EncodedLen(name %q) = %d, want -1", name, n)
		}
		dst := make([]byte, 3, 64)
		copy(dst, "abc")
		got, err := headers.Append(dst, hs)
		if !errors.Is(err, headers.ErrInvalidName) {
			t.Errorf("Append(name %q) error = %v, want ErrInvalidName", name, err)
		}
		// Nothing may be written, not even into spare capacity.
		if string(got) != "abc" || !bytes.Equal(dst[:cap(dst)][3:], make([]byte, cap(dst)-3)) {
			t.Errorf("Append(name %q) wrote data on error: % x", name, dst[:cap(dst)])
		}
	}
}

// TestAllocs is deliberately not parallel: allocation counts are process-wide,
// and the testing package refuses AllocsPerRun in parallel tests for that
// reason.
func TestAllocs(t *testing.T) {
	hs := realistic()
	data, err := headers.Encode(hs)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]headers.Header, 0, len(hs))
	if n := testing.AllocsPerRun(100, func() {
		dst, _ = headers.Decode(data, dst)
	}); n > 1 {
		t.Errorf("Decode with sufficient dst: %v allocs, want <= 1", n)
	}

	empty := unhex(t, vectors[0].hex)
	if n := testing.AllocsPerRun(100, func() {
		dst, _ = headers.Decode(empty, dst)
	}); n != 0 {
		t.Errorf("Decode of zero headers: %v allocs, want 0", n)
	}

	unnamed := unhex(t, vectors[len(vectors)-1].hex)
	if n := testing.AllocsPerRun(100, func() {
		dst, _ = headers.Decode(unnamed, dst)
	}); n != 0 {
		t.Errorf("Decode with only empty names: %v allocs, want 0", n)
	}

	buf := make([]byte, 0, len(data))
	if n := testing.AllocsPerRun(100, func() {
		buf, _ = headers.Append(buf[:0], hs)
	}); n != 0 {
		t.Errorf("Append into sufficient dst: %v allocs, want 0", n)
	}

	if n := testing.AllocsPerRun(100, func() {
		_, _ = headers.Encode(hs)
	}); n != 1 {
		t.Errorf("Encode: %v allocs, want exactly 1", n)
	}
}

func TestGetAndValues(t *testing.T) {
	t.Parallel()
	hs := vectors[5].hs // x=1, y=2, x=3
	if v, ok := headers.Get(hs, "x"); !ok || string(v) != "1" {
		t.Errorf(`Get("x") = %q, %v; want the first value "1"`, v, ok)
	}
	if v, ok := headers.Get(hs, "X"); ok || v != nil {
		t.Errorf(`Get("X") = %q, %v; names must match exactly`, v, ok)
	}
	vs := headers.Values(hs, "x")
	if len(vs) != 2 || string(vs[0]) != "1" || string(vs[1]) != "3" {
		t.Errorf(`Values("x") = %q, want ["1" "3"]`, vs)
	}
	if vs := headers.Values(hs, "missing"); vs != nil {
		t.Errorf(`Values("missing") = %q, want nil`, vs)
	}

	// An empty value is still present, which is what the bool is for.
	if v, ok := headers.Get([]headers.Header{{Name: "k"}}, "k"); !ok || len(v) != 0 {
		t.Errorf(`Get of empty value = %q, %v; want "", true`, v, ok)
	}
}
