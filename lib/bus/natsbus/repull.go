package natsbus

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// consumeRepulling runs cons.Consume(handler) until ctx is done (nil) or the consume context
// closes on its own (closed reports it; the caller decides what that means), starting it
// again when a pull request found no responder.
//
// On a JetStream cluster the pull requests go to the consumer's leader. Right after the
// consumer was created, or after its leader changed, the server the client is connected to
// may not know of the new leader's interest yet, and answers the pull with "no responders".
// The client then waits for two missed heartbeats (30 s by default) before pulling again:
// a consumer joining a group could miss a whole burst of messages while the other members
// took it. Starting the consume again pulls again at once.
func consumeRepulling(ctx context.Context, cons jetstream.Consumer, handler jetstream.MessageHandler, onErr func(error), opts ...jetstream.PullConsumeOpt) (closed bool, err error) {
	for {
		repull := make(chan struct{}, 1)
		cc, err := cons.Consume(handler, append(opts, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			onErr(err)
			if errors.Is(err, nats.ErrNoResponders) {
				select {
				case repull <- struct{}{}:
				default:
				}
			}
		}))...)
		if err != nil {
			return false, err
		}
		select {
		case <-ctx.Done():
			cc.Stop()
			<-cc.Closed()
			return false, nil
		case <-cc.Closed():
			return true, nil
		case <-repull:
			cc.Stop()
			<-cc.Closed()
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(repullDelay):
		}
	}
}

// repullDelay spaces the pulls while the consumer's leader stays unreachable.
const repullDelay = 100 * time.Millisecond
