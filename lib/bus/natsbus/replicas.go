package natsbus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// maxReplicas is the most replicas JetStream keeps of a stream.
const maxReplicas = 5

// validateReplicas checks --nats-replicas against what JetStream and the chosen server allow.
func (c *Config) validateReplicas() error {
	switch {
	case c.Replicas < 0 || c.Replicas > maxReplicas:
		return fmt.Errorf("--nats-replicas %d: JetStream keeps 1 to %d replicas of a stream", c.Replicas, maxReplicas)
	case c.URL == Embedded && c.Replicas > 1:
		return fmt.Errorf("--nats-replicas %d needs a NATS cluster (--nats-url): the embedded server is a single server and keeps 1 replica", c.Replicas)
	}
	return nil
}

// JetStream API error codes of a replica count the servers cannot host.
const (
	errCodeNoPeers              jetstream.ErrorCode = 10005 // "no suitable peers for placement"
	errCodeInsufficientResource jetstream.ErrorCode = 10023 // "insufficient resources"
	errCodeReplicasNotSupported jetstream.ErrorCode = 10074 // "replicas > 1 not supported in non-clustered mode"
)

// replicasError names --nats-replicas in err when the servers refused the replica count.
func (b *Bus) replicasError(err error) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return err
	}
	n := b.cfg.Replicas
	switch apiErr.ErrorCode {
	case errCodeReplicasNotSupported:
		return fmt.Errorf("--nats-replicas %d: the NATS server is not part of a cluster, so it keeps 1 replica: %w", n, err)
	case errCodeNoPeers, errCodeInsufficientResource:
		if n > 1 {
			return fmt.Errorf("--nats-replicas %d: the NATS cluster has fewer than %d JetStream servers available: %w", n, n, err)
		}
	}
	return err
}

// streamReplicas returns the replicas stream has now, or 0 when it does not exist yet or
// cannot be read (then nothing is logged about a change).
func (b *Bus) streamReplicas(ctx context.Context, stream string) int {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := b.js.Stream(cctx, stream)
	if err != nil {
		return 0
	}
	return st.CachedInfo().Config.Replicas
}
