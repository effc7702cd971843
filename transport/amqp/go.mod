module github.com/relayer-go/relayer/transport/amqp

go 1.25.0

require (
	github.com/google/uuid v1.6.0
	github.com/rabbitmq/amqp091-go v1.8.1
	github.com/relayer-go/relayer v0.0.0-00010101000000-000000000000
)

replace github.com/relayer-go/relayer => ../..
