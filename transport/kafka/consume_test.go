package relayerkafka_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
	relayerkafka "github.com/relayer-go/relayer/transport/kafka"
)

func TestConsumeOptionsValidate(t *testing.T) {
	ok := relayerkafka.ConsumeOptions{Group: "g", Topics: []string{"orders"}, DeadLetterTopic: "orders.dead"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("%+v: %v", ok, err)
	}
	for _, tc := range []struct {
		edit func(*relayerkafka.ConsumeOptions)
		text string
	}{
		{func(o *relayerkafka.ConsumeOptions) { o.Group = "" }, "Group"},
		{func(o *relayerkafka.ConsumeOptions) { o.Topics = nil }, "Topics"},
		{func(o *relayerkafka.ConsumeOptions) { o.Topics = []string{"bad topic"} }, "bad topic"},
		{func(o *relayerkafka.ConsumeOptions) { o.DeadLetterTopic = "" }, "DeadLetterTopic"},
		{func(o *relayerkafka.ConsumeOptions) { o.DeadLetterTopic = strings.Repeat("x", 250) }, "DeadLetterTopic"},
		{func(o *relayerkafka.ConsumeOptions) { o.Topics = append(o.Topics, o.DeadLetterTopic) }, "consumed again"},
		{func(o *relayerkafka.ConsumeOptions) { o.DrainTimeout = -1 }, "DrainTimeout"},
	} {
		o := ok
		o.Topics = append([]string(nil), ok.Topics...)
		tc.edit(&o)
		if err := o.Validate(); !errors.Is(err, relayerkafka.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%+v: Validate = %v, want ErrInvalidOptions naming %q", o, err, tc.text)
		}
	}
}

func TestReceivedMessage(t *testing.T) {
	id := "0190a5d2-6a4b-7c3e-9f10-2b3c4d5e6f70"
	// A message that carried headers named like the transport's own: the
	// transport's are the last.
	r := &kgo.Record{Topic: "orders", Headers: []kgo.RecordHeader{
		{Key: relayer.HeaderMessageID, Value: []byte("mine")},
		{Key: relayer.HeaderMessageType, Value: []byte("my type")},
		{Key: relayer.HeaderMessageID, Value: []byte(id)},
		{Key: relayer.HeaderMessageType, Value: []byte("orders.Placed")},
	}}
	m, err := relayerkafka.ReceivedMessage(r)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID.String() != id || m.Type != "orders.Placed" || m.Key != "" || len(m.Headers) != 2 ||
		string(m.Headers[0].Value) != "mine" || string(m.Headers[1].Value) != "my type" {
		t.Errorf("ReceivedMessage = %+v", m)
	}
	if _, err := relayerkafka.ReceivedMessage(&kgo.Record{Topic: "orders"}); !errors.Is(err, relayerkafka.ErrNoMessageID) {
		t.Errorf("without an id: %v, want ErrNoMessageID", err)
	}
}
