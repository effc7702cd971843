package relayeramqp_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relayer-go/relayer"
	relayeramqp "github.com/relayer-go/relayer/transport/amqp"
)

func TestMessageID(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("0190a5d2-6a4b-7c3e-9f10-2b3c4d5e6f70")
	for _, tc := range []struct {
		name string
		d    amqp.Delivery
		want error
	}{
		{"property", amqp.Delivery{MessageId: id.String()}, nil},
		{"property before header", amqp.Delivery{MessageId: id.String(), Headers: amqp.Table{relayer.HeaderMessageID: "x"}}, nil},
		{"string header", amqp.Delivery{Headers: amqp.Table{relayer.HeaderMessageID: id.String()}}, nil},
		{"bytes header", amqp.Delivery{Headers: amqp.Table{relayer.HeaderMessageID: []byte(id.String())}}, nil},
		{"none", amqp.Delivery{}, relayeramqp.ErrNoMessageID},
	} {
		got, err := relayeramqp.MessageID(tc.d)
		if !errors.Is(err, tc.want) || tc.want == nil && got != id {
			t.Errorf("%s: MessageID = %v, %v", tc.name, got, err)
		}
	}
	if _, err := relayeramqp.MessageID(amqp.Delivery{MessageId: "order-1"}); err == nil || !strings.Contains(err.Error(), `"order-1"`) {
		t.Errorf("MessageID of a non-UUID = %v", err)
	}
}

func TestHeadersRefusesForeignValues(t *testing.T) {
	t.Parallel()
	for _, table := range []amqp.Table{
		{"x-death": []any{amqp.Table{"count": int64(1)}}},
		{"x-count": int64(3)},
	} {
		_, err := relayeramqp.Headers(table)
		if !errors.Is(err, relayeramqp.ErrHeaderType) || !strings.Contains(err.Error(), `"x-`) {
			t.Errorf("Headers(%v) = %v, want ErrHeaderType naming the header", table, err)
		}
	}
	if hs, err := relayeramqp.Headers(nil); hs != nil || err != nil {
		t.Errorf("Headers(nil) = %v, %v", hs, err)
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts  relayeramqp.Options
		field string
	}{
		{relayeramqp.Options{Exchange: strings.Repeat("e", 256)}, "Exchange"},
		{relayeramqp.Options{MaxBatchSize: -1}, "MaxBatchSize"},
		{relayeramqp.Options{MaxBatchSize: relayeramqp.MaxBatchSizeMax + 1}, "MaxBatchSize"},
		{relayeramqp.Options{Channels: -1}, "Channels"},
		{relayeramqp.Options{Channels: relayeramqp.ChannelsMax + 1}, "Channels"},
	} {
		if err := tc.opts.Validate(); err == nil || !strings.HasPrefix(err.Error(), "relayeramqp: "+tc.field+" ") {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.opts, err, tc.field)
		}
	}
	valid := relayeramqp.Options{Exchange: "orders", MaxBatchSize: relayeramqp.MaxBatchSizeMax, Channels: 1}
	if err := valid.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", valid, err)
	}
	if _, err := relayeramqp.New(nil, relayeramqp.Options{}); err == nil {
		t.Error("New without a connection succeeded")
	}
}

func TestReceivedMessage(t *testing.T) {
	id := uuid.Must(uuid.NewV7())
	for _, tc := range []struct {
		name    string
		headers amqp.Table
		key     string
		want    string // the headers left, as name=value
	}{
		{"no headers", nil, "", ""},
		{"key alone", amqp.Table{relayeramqp.HeaderKey: "k"}, "k", ""},
		{"binary key", amqp.Table{relayeramqp.HeaderKey: []byte{0xff}}, "\xff", ""},
		{"key after a header of its name", amqp.Table{relayeramqp.HeaderKey: []any{"mine", "k"}}, "k", relayeramqp.HeaderKey + "=mine"},
		{"key after two headers of its name", amqp.Table{relayeramqp.HeaderKey: []any{"a", "b", "k"}}, "k", relayeramqp.HeaderKey + "=a " + relayeramqp.HeaderKey + "=b"},
		{"what a retry adds", amqp.Table{"x-death": []any{amqp.Table{}}, "x-first-death-queue": "q.retry-1000ms",
			relayeramqp.HeaderAttempts: int64(2), relayeramqp.HeaderDestination: "orders.placed", "app": "1"}, "", "app=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := relayeramqp.ReceivedMessage(amqp.Delivery{MessageId: id.String(), RoutingKey: "q", Headers: tc.headers})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range m.Headers {
				got = append(got, h.Name+"="+string(h.Value))
			}
			if m.ID != id || m.Key != tc.key || strings.Join(got, " ") != tc.want {
				t.Errorf("ReceivedMessage = id %v key %q headers %q; want key %q headers %q", m.ID, m.Key, got, tc.key, tc.want)
			}
			wantDest := "q"
			if tc.headers[relayeramqp.HeaderDestination] != nil {
				wantDest = "orders.placed"
			}
			if m.Destination != wantDest {
				t.Errorf("Destination = %q, want %q", m.Destination, wantDest)
			}
		})
	}
	if _, err := relayeramqp.ReceivedMessage(amqp.Delivery{}); !errors.Is(err, relayeramqp.ErrNoMessageID) {
		t.Errorf("without an id: %v, want relayeramqp.ErrNoMessageID", err)
	}
	if _, err := relayeramqp.ReceivedMessage(amqp.Delivery{MessageId: id.String(), Headers: amqp.Table{"n": int64(1)}}); !errors.Is(err, relayeramqp.ErrHeaderType) {
		t.Errorf("a numeric header: %v, want relayeramqp.ErrHeaderType", err)
	}
}

func TestConsumeOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		opts relayeramqp.ConsumeOptions
		ok   bool
	}{
		{relayeramqp.ConsumeOptions{}, false},
		{relayeramqp.ConsumeOptions{DeadLetterRoutingKey: "dead"}, true},
		{relayeramqp.ConsumeOptions{DeadLetterExchange: "dlx"}, true},
		{relayeramqp.ConsumeOptions{DeadLetterExchange: strings.Repeat("x", 256)}, false},
		{relayeramqp.ConsumeOptions{DeadLetterRoutingKey: "dead", Concurrency: relayeramqp.ConcurrencyMax}, true},
		{relayeramqp.ConsumeOptions{DeadLetterRoutingKey: "dead", Concurrency: -1}, false},
		{relayeramqp.ConsumeOptions{DeadLetterRoutingKey: "dead", Prefetch: 65536}, false},
		{relayeramqp.ConsumeOptions{DeadLetterRoutingKey: "dead", DrainTimeout: -time.Second}, false},
	} {
		err := tc.opts.Validate()
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, relayeramqp.ErrInvalidOptions) {
			t.Errorf("%+v.Validate() = %v", tc.opts, err)
		}
	}
}
