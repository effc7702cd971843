package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	relayeramqp "github.com/relayer-go/relayer/transport/amqp"
	relayerkafka "github.com/relayer-go/relayer/transport/kafka"
)

// benchKafka returns a transport producing to brokers (comma-separated
// host:port list) and the topic the run sends to, created by the broker on
// first use if it allows that and the topic is missing.
func benchKafka(ctx context.Context, brokers, topic string) (relayer.Transport, string, func(), error) {
	var seeds []string
	for b := range strings.SplitSeq(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			seeds = append(seeds, b)
		}
	}
	if len(seeds) == 0 {
		return nil, "", nil, command.Usagef("--sink kafka needs --kafka-brokers host:port[,host:port…]")
	}
	client, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.AllowAutoTopicCreation())
	if err != nil {
		return nil, "", nil, command.Usagef("--kafka-brokers: %v", err)
	}
	pctx, cancel := context.WithTimeout(ctx, command.ConnectTimeout)
	defer cancel()
	if err := client.Ping(pctx); err != nil {
		client.Close()
		return nil, "", nil, fmt.Errorf("--kafka-brokers: cannot connect: %w", err)
	}
	tr, err := relayerkafka.New(client, relayerkafka.Options{})
	if err != nil {
		client.Close()
		return nil, "", nil, err
	}
	return tr, topic, client.Close, nil
}

// benchAMQP connects to url, declares a durable queue for the run (deleted
// at the end), and returns a transport publishing to it through the default
// exchange.
func benchAMQP(url string) (relayer.Transport, string, func(), error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(command.ConnectTimeout)})
	if err != nil {
		return nil, "", nil, fmt.Errorf("--amqp-url: cannot connect: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, "", nil, fmt.Errorf("--amqp-url: %w", err)
	}
	queue := fmt.Sprintf("relayer-bench-%d", os.Getpid())
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		conn.Close()
		return nil, "", nil, fmt.Errorf("declare queue %s: %w", queue, err)
	}
	tr, err := relayeramqp.New(conn, relayeramqp.Options{})
	if err != nil {
		conn.Close()
		return nil, "", nil, err
	}
	return tr, queue, func() {
		tr.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = ch.QueueDelete(queue, false, false, false)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		conn.Close()
	}, nil
}
