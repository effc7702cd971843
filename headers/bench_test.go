package headers_test

import (
	"testing"

	"github.com/relayer-go/relayer/headers"
)

// realistic returns the kind of header set a typical outbox message carries:
// identity, routing and tracing metadata plus a couple of application
// headers.
func realistic() []headers.Header {
	return []headers.Header{
		{Name: "message-id", Value: []byte("01J9Z3K8R6Q4W2X7V5T1N0M3P8")},
		{Name: "type", Value: []byte("order.created")},
		{Name: "content-type", Value: []byte("application/json")},
		{Name: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
		{Name: "x-tenant-id", Value: []byte("acme-eu-1")},
		{Name: "x-schema-version", Value: []byte("3")},
	}
}

func BenchmarkEncode(b *testing.B) {
	hs := realistic()
	b.SetBytes(int64(headers.EncodedLen(hs)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := headers.Encode(hs); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	hs := realistic()
	buf := make([]byte, 0, headers.EncodedLen(hs))
	b.SetBytes(int64(cap(buf)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = headers.Append(buf[:0], hs); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	data, err := headers.Encode(realistic())
	if err != nil {
		b.Fatal(err)
	}
	var dst []headers.Header
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if dst, err = headers.Decode(data, dst); err != nil {
			b.Fatal(err)
		}
	}
}
