module github.com/relayer-go/relayer/transport/nats

go 1.25.0

require (
	github.com/google/uuid v1.6.0
	github.com/nats-io/nats.go v1.41.2
	github.com/relayer-go/relayer v0.0.0-00010101000000-000000000000
)

require (
	github.com/klauspost/compress v1.18.0 // indirect
	github.com/nats-io/nkeys v0.4.11 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.37.0 // indirect
	golang.org/x/sys v0.32.0 // indirect
)

replace github.com/relayer-go/relayer => ../..
