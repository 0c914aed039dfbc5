// Package input is what ingest's inputs share: the environment each is built with (the bus,
// the metrics, the logger, the batch settings, the managed sources' decoding limits) and the
// emitter through which every one of them publishes, dead-letters and counts.
package input

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/services/ingest/metrics"
)

// Bus is what every input needs from the bus (with --bus-max-backlog, the back-pressure gate
// in front of it).
type Bus interface {
	bus.Publisher
	Ready() error
}

// DefaultMaxEventSize is the largest audit event of any input unless told otherwise.
const DefaultMaxEventSize = 1000000

// Env is what every input is built with. ingest.New makes one for all of them; NewEnv fills
// in what is left out, the one place the inputs' defaults are written.
type Env struct {
	Bus Bus
	// Cluster names events whose source names no cluster (the managed envelopes may).
	Cluster string
	// Node is sent with every event (header bus.HeaderNode).
	Node string
	// MaxEventSize caps an event; larger ones are dead letters.
	MaxEventSize int
	Logger       *slog.Logger
	// Registry is where an input registers metrics of its own (nil: not registered).
	Registry prometheus.Registerer
	// Metrics are the counters every input shares (nil: unregistered ones).
	Metrics *metrics.Ingest
	// Batch packs events into EventBatch messages (zero: eventbatch.DefaultConfig).
	Batch eventbatch.Config
	// Limits bound what the managed sources decode (zero: envelope.DefaultLimits).
	Limits envelope.Limits
	// Budget is the decoded bytes in flight the managed sources share (nil: one of
	// Limits.MaxInflight bytes).
	Budget *envelope.Budget
}

// NewEnv returns e completed: a discarding logger, unregistered metrics, the default batch
// and limits and a budget of Limits.MaxInflight where e has none.
func NewEnv(e Env) (*Env, error) {
	if e.Bus == nil {
		return nil, errors.New("an input needs a bus")
	}
	if e.Logger == nil {
		e.Logger = slog.New(slog.DiscardHandler)
	}
	if e.Metrics == nil {
		e.Metrics = metrics.New(nil)
	}
	if e.MaxEventSize <= 0 {
		e.MaxEventSize = DefaultMaxEventSize
	}
	e.Batch = e.Batch.OrDefault()
	if err := e.Batch.Validate(); err != nil {
		return nil, err
	}
	if e.Limits == (envelope.Limits{}) {
		e.Limits = envelope.DefaultLimits()
	}
	if err := e.Limits.Validate(); err != nil {
		return nil, err
	}
	if e.Budget == nil {
		e.Budget = envelope.NewBudget(e.Limits.MaxInflight)
	}
	return &e, nil
}

// MustEnv is NewEnv for tests; it panics on an error.
func MustEnv(e Env) *Env {
	env, err := NewEnv(e)
	if err != nil {
		panic(err)
	}
	return env
}

// Header is a new header of the event messages of input (its name, "file", "webhook", ...):
// the node and the input. An input makes one and shares it between its event messages.
func (e *Env) Header(input string) map[string]string {
	return map[string]string{bus.HeaderNode: e.Node, bus.HeaderInput: input}
}

// DeadLetter is the dead letter of data that input (the dead letter's stage) could not use
// for cause, named id, read from source.
func (e *Env) DeadLetter(cluster, input, id, source string, cause error, data []byte) bus.Message {
	return bus.NewDeadLetter(cluster, input, id, source, cause, data, e.Header(input))
}

// Limit is a fresh limit of what one request, message or poll decodes to, within the shared
// budget.
func (e *Env) Limit() *envelope.Limit {
	return &envelope.Limit{Max: e.Limits.MaxDecoded, Budget: e.Budget}
}
