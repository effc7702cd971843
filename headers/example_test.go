package headers_test

import (
	"fmt"

	"github.com/relayer-go/relayer/headers"
)

func ExampleEncode() {
	data, err := headers.Encode([]headers.Header{
		{Name: "type", Value: []byte("order.created")},
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("% x\n", data[:8])    // version 1, one entry
	fmt.Printf("% x\n", data[8:16])  // name length 4, "type"
	fmt.Printf("% x\n", data[16:20]) // value length 13
	fmt.Printf("%s\n", data[20:])
	fmt.Println(len(data), "bytes")
	// Output:
	// 01 00 00 00 01 00 00 00
	// 04 00 00 00 74 79 70 65
	// 0d 00 00 00
	// order.created
	// 33 bytes
}

func ExampleDecode() {
	// As read from the outbox table's bytea column.
	data := []byte("\x01\x00\x00\x00\x02\x00\x00\x00" +
		"\x04\x00\x00\x00type\x0d\x00\x00\x00order.created" +
		"\x0b\x00\x00\x00traceparent\x00\x00\x00\x00")

	hs, err := headers.Decode(data, nil)
	if err != nil {
		panic(err)
	}
	for _, h := range hs {
		fmt.Printf("%s=%q\n", h.Name, h.Value)
	}
	if v, ok := headers.Get(hs, "type"); ok {
		fmt.Println("type is", string(v))
	}
	// Output:
	// type="order.created"
	// traceparent=""
	// type is order.created
}
