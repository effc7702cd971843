package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// relayer bench delivers to Kafka (a fake cluster in process, speaking the
// Kafka protocol) and to RabbitMQ (when one runs on this machine).
func TestBenchBrokers(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "relayer-bench"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	sinks := map[string][]string{"kafka": {"--sink", "kafka", "--kafka-brokers", strings.Join(cluster.ListenAddrs(), ",")}}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:5672", time.Second); err == nil {
		c.Close()
		sinks["amqp"] = []string{"--sink", "amqp"}
	} else {
		t.Logf("RabbitMQ is not on 127.0.0.1:5672, its sink is not tried: %v", err)
	}
	for name, flags := range sinks {
		var out, errOut bytes.Buffer
		args := append([]string{"bench", "--database-url", url, "--schema", testdb.NewSchema(t) + "_" + name,
			"--quick", "--scenario", "drain,ordered", "--backlog", "2000", "--contender", "relayer recovery,relayer ordered"}, flags...)
		code := run(t.Context(), args, &out, &errOut)
		if code != command.ExitOK || !strings.Contains(out.String(), "sink "+name) || !strings.Contains(out.String(), "relayer recovery") ||
			strings.Contains(out.String(), "hand-written loop") {
			t.Errorf("%s: code %d, stdout:\n%s\nstderr:\n%s", name, code, out.String(), errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"bench", "--database-url", url, "--sink", "kafka"}, &out, &errOut); code != command.ExitUsage || !strings.Contains(errOut.String(), "--kafka-brokers") {
		t.Errorf("--sink kafka without brokers: code %d, stderr %q", code, errOut.String())
	}
}
