package natsbus

// Batched publishing on JetStream's fast-batch protocol (nats-server >= 2.14, streams with
// allow_batched). A run of messages for one stream is sent as one batch: each message carries
// its place in the batch in its reply subject,
//
//	<inbox>.<batch id>.<max ack interval>.fail.<batch seq>.<op>.$FI
//
// and the server answers with a flow-control ack every N stored messages (N chosen by the
// server, at most the interval we ask for) and one PubAck for the whole batch after the last
// message (op "commit") is stored. In "fail" gap mode the server stops the batch at the first
// message it cannot store and its PubAck counts only what was stored, so "count == messages
// sent" means every message is stored. Duplicates (Nats-Msg-Id within the window) are skipped
// and counted as stored, as with single publishes.
//
// Compared with one asynchronous publish per message this saves the server a PubAck per
// message and the client a future, a reply-map entry and a JSON decode per message.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/auditlens/auditlens/lib/bus"
)

// Fast-batch operations, the last token before ".$FI" in a reply subject.
const (
	opStart  = "0"
	opAppend = "1"
	opCommit = "2"
	opPing   = "4"
)

// JetStream error codes: "message size exceeds maximum allowed" (JSStreamMessageExceedsMaximumErr)
// and "batch publish is disabled" (JSBatchPublishDisabledErr: the stream no longer allows it).
const (
	errCodeTooLarge      = 10054
	errCodeBatchDisabled = 10205
)

// errBatchDisabled marks a batch refused because the stream does not allow batched publishing.
var errBatchDisabled = errors.New("batch publish is disabled on the stream")

// batcher publishes batches and routes the server's answers back to them.
type batcher struct {
	nc       *nats.Conn
	inbox    string // replies arrive on inbox.<batch id>.>
	window   int    // messages sent but not yet acknowledged by flow control, at most
	interval string // the largest flow-control interval we accept, as a subject token
	timeout  time.Duration
	ping     time.Duration

	sub *nats.Subscription

	mu      sync.Mutex
	batches map[string]*pending
}

// pending is one batch waiting for the server.
type pending struct {
	notify chan struct{} // capacity 1: "state changed"

	// Guarded by batcher.mu.
	acked int    // highest batch sequence the server confirmed stored
	done  bool   // the PubAck arrived
	count int    // messages the PubAck says were stored
	err   string // first error the server reported for the batch
	code  int    // its JetStream error code
}

func newBatcher(nc *nats.Conn, window int, timeout time.Duration) (*batcher, error) {
	bt := &batcher{
		nc:       nc,
		inbox:    nats.NewInbox(),
		window:   window,
		interval: strconv.Itoa(min(max(window/2, 1), 65535)),
		timeout:  timeout,
		ping:     time.Second,
		batches:  map[string]*pending{},
	}
	sub, err := nc.Subscribe(bt.inbox+".>", bt.reply)
	if err != nil {
		return nil, fmt.Errorf("subscribe to batch replies: %w", err)
	}
	// Replies are small and few (one per flow-control interval); never drop one.
	_ = sub.SetPendingLimits(-1, -1)
	bt.sub = sub
	return bt, nil
}

// batchReply is any answer of the server to a batch message: a flow-control ack
// {"type":"ack","seq":N,"msgs":M}, a gap or error report, or the PubAck of the batch.
type batchReply struct {
	Type  string `json:"type"`
	Seq   uint64 `json:"seq"`
	Batch string `json:"batch"`
	Count int    `json:"count"`
	Error *struct {
		Code        int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

func (bt *batcher) reply(m *nats.Msg) {
	rest, ok := strings.CutPrefix(m.Subject, bt.inbox+".")
	if !ok {
		return
	}
	id, _, _ := strings.Cut(rest, ".")
	var r batchReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return // not ours to understand; the batch times out and is retried
	}
	bt.mu.Lock()
	p := bt.batches[id]
	if p == nil {
		bt.mu.Unlock()
		return // a late answer to a batch given up on
	}
	if r.Error != nil && p.err == "" {
		p.err, p.code = r.Error.Description, r.Error.Code
	}
	switch r.Type {
	case "ack":
		p.acked = max(p.acked, int(r.Seq))
	case "": // the PubAck (possibly an error one)
		if r.Error == nil || r.Batch != "" {
			p.done, p.count = true, r.Count
			p.acked = max(p.acked, r.Count)
		} else {
			p.done = true
		}
	}
	bt.mu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// publish sends msgs (all for one stream, validated, within the payload limit) as one batch
// and returns once the server stored all of them, or an error wrapping bus.ErrUnavailable
// (or bus.ErrTooLarge). Publishing the same messages again after an error is safe.
func (bt *batcher) publish(ctx context.Context, msgs []bus.Message) error {
	id := nuid.Next()
	p := &pending{notify: make(chan struct{}, 1)}
	bt.mu.Lock()
	bt.batches[id] = p
	bt.mu.Unlock()
	defer func() {
		bt.mu.Lock()
		delete(bt.batches, id)
		bt.mu.Unlock()
	}()

	prefix := bt.inbox + "." + id + "." + bt.interval + ".fail."
	nm := &nats.Msg{Header: nats.Header{}}
	msgID := []string{""}
	values := map[string][]string{}
	subject, cluster := Subject(msgs[0].Stream, msgs[0].Cluster), msgs[0].Cluster
	var reply []byte
	for i := range msgs {
		m := &msgs[i]
		seq := i + 1
		if err := bt.await(ctx, p, seq-bt.window, false, subject, prefix, i); err != nil {
			return err
		}
		op := opAppend
		switch {
		case seq == len(msgs):
			op = opCommit
		case seq == 1:
			op = opStart
		}
		reply = append(append(append(append(reply[:0], prefix...), strconv.Itoa(seq)...), '.'), op...)
		reply = append(reply, ".$FI"...)

		// One Msg and header map serve the whole batch: PublishMsg encodes them before returning.
		clear(nm.Header)
		msgID[0] = m.ID
		nm.Header["Nats-Msg-Id"] = msgID
		for k, v := range m.Header {
			vs := values[k]
			if vs == nil {
				vs = make([]string, 1)
				values[k] = vs
			}
			vs[0] = v
			nm.Header[textproto.CanonicalMIMEHeaderKey(k)] = vs
		}
		if c := clusterHeader(m.Cluster); c != "" {
			nm.Header[bus.HeaderCluster] = []string{c}
		}
		if m.Cluster != cluster {
			subject, cluster = Subject(m.Stream, m.Cluster), m.Cluster
		}
		nm.Subject, nm.Reply, nm.Data = subject, string(reply), m.Data
		if err := bt.nc.PublishMsg(nm); err != nil {
			if errors.Is(err, nats.ErrMaxPayload) {
				return fmt.Errorf("publish %s (%d bytes) to %s: %w: %w", bus.Short(m.ID, 100), len(m.Data), subject, bus.ErrTooLarge, err)
			}
			return fmt.Errorf("publish to %s: %w: %w", subject, bus.ErrUnavailable, err)
		}
	}
	if err := bt.await(ctx, p, len(msgs), true, subject, prefix, len(msgs)); err != nil {
		return err
	}
	bt.mu.Lock()
	defer bt.mu.Unlock()
	if p.count != len(msgs) {
		return bt.failure(p, subject, len(msgs))
	}
	return nil
}

// await waits until the server confirmed at least seq messages of the batch (with final,
// until its PubAck arrived), or the batch ended early, the context ended, or nothing
// arrived for the timeout. While waiting it pings every bt.ping, so that a lost
// flow-control ack is sent again.
func (bt *batcher) await(ctx context.Context, p *pending, seq int, final bool, subject, prefix string, sent int) error {
	if seq <= 0 {
		return nil
	}
	deadline := time.Now().Add(bt.timeout)
	var tick *time.Ticker
	for {
		bt.mu.Lock()
		acked, done := p.acked, p.done
		var err error
		if done && p.count < seq {
			err = bt.failure(p, subject, sent)
		}
		bt.mu.Unlock()
		if err != nil {
			return err
		}
		if done || acked >= seq && !final {
			if tick != nil {
				tick.Stop()
			}
			return nil
		}
		if tick == nil {
			tick = time.NewTicker(bt.ping)
			defer tick.Stop()
		}
		select {
		case <-p.notify:
			deadline = time.Now().Add(bt.timeout)
		case <-tick.C:
			if time.Now().After(deadline) {
				return fmt.Errorf("publish to %s: no acknowledgement within %s: %w", subject, bt.timeout, bus.ErrUnavailable)
			}
			if sent > 0 {
				ping := prefix + strconv.Itoa(sent) + "." + opPing + ".$FI"
				_ = bt.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: ping})
			}
		case <-ctx.Done():
			return fmt.Errorf("publish: %w", ctx.Err())
		}
	}
}

// failure describes a batch the server ended before storing all of it. Call with bt.mu held.
func (bt *batcher) failure(p *pending, subject string, sent int) error {
	what := p.err
	if what == "" {
		what = "batch ended early"
	}
	err := fmt.Errorf("publish to %s: %d of %d messages stored: %s", subject, p.count, sent, what)
	switch p.code {
	case errCodeTooLarge:
		return fmt.Errorf("%w: %w", err, bus.ErrTooLarge)
	case errCodeBatchDisabled:
		return fmt.Errorf("%w: %w", err, errBatchDisabled)
	}
	return fmt.Errorf("%w: %w", err, bus.ErrUnavailable)
}

func (bt *batcher) close() {
	if bt.sub != nil {
		_ = bt.sub.Unsubscribe()
	}
}
