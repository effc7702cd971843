module github.com/relayer-go/relayer/transport/kafka

go 1.25.0

require (
	github.com/google/uuid v1.6.0
	github.com/relayer-go/relayer v0.0.0-00010101000000-000000000000
	github.com/twmb/franz-go v1.19.5
)

require (
	github.com/klauspost/compress v1.18.0 // indirect
	github.com/pierrec/lz4/v4 v4.1.22 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.11.2 // indirect
)

replace github.com/relayer-go/relayer => ../..
