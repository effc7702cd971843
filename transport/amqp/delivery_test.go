package relayeramqp_test

import (
	"errors"
	"strings"
	"testing"

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
