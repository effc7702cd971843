package relayer

import "encoding/json"

// Serializer turns message values into bodies and back. Implementations must be
// safe for concurrent use.
type Serializer interface {
	// ContentType is recorded in every message's content-type header.
	ContentType() string
	// Marshal encodes v.
	Marshal(v any) ([]byte, error)
	// Unmarshal decodes data into the value v points to.
	Unmarshal(data []byte, v any) error
}

// JSON is the default [Serializer]: encoding/json, content type application/json.
type JSON struct{}

// ContentType returns "application/json".
func (JSON) ContentType() string { return "application/json" }

// Marshal encodes v with [json.Marshal].
func (JSON) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes data with [json.Unmarshal].
func (JSON) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
