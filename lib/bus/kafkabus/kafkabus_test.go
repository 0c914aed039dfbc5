package kafkabus_test

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/bustest"
	"github.com/auditlens/auditlens/lib/bus/kafkabus"
)

// openKfake starts an in-process Kafka cluster (franz-go's kfake speaks the real wire protocol)
// and opens the bus on it, creating the topics as in production.
func openKfake(t *testing.T) bus.Bus {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	b, err := kafkabus.Open(context.Background(), kafkabus.Config{Brokers: c.ListenAddrs(), CreateTopics: true, Partitions: 6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	bustest.Run(t, openKfake)
}

func TestBadBrokers(t *testing.T) {
	for _, c := range []struct {
		brokers []string
		want    string
	}{
		{nil, "--kafka-brokers is empty"},
		{[]string{"kafka"}, "want host:port"},
		{[]string{"127.0.0.1:1"}, "dial kafka"},
	} {
		_, err := kafkabus.Open(context.Background(), kafkabus.Config{Brokers: c.brokers})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.brokers, err, c.want)
		}
	}
}

// The conformance suite on a 3-broker cluster, topics created with 6 partitions of 3
// replicas each (--kafka-partitions, --kafka-replication-factor).
func TestConformanceOnThreeBrokers(t *testing.T) {
	bustest.Run(t, func(t *testing.T) bus.Bus {
		c, err := kfake.NewCluster(kfake.NumBrokers(3))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		b, err := kafkabus.Open(context.Background(), kafkabus.Config{Brokers: c.ListenAddrs(), CreateTopics: true, Partitions: 6, ReplicationFactor: 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	})
}

// More replicas than brokers is refused at start-up, naming the flag.
func TestReplicationFactorAboveTheBrokers(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := kafkabus.Open(context.Background(), kafkabus.Config{Brokers: c.ListenAddrs(), CreateTopics: true, Partitions: 6, ReplicationFactor: 4})
	if err == nil {
		_ = b.Close()
		t.Fatal("4 replicas on 3 brokers accepted")
	}
	if !strings.Contains(err.Error(), "--kafka-replication-factor 4") {
		t.Fatalf("error %q does not name the flag", err)
	}
	for _, cfg := range []kafkabus.Config{{Brokers: []string{"a:1"}, Partitions: -1}, {Brokers: []string{"a:1"}, ReplicationFactor: 17}} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
