package bus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/auditlens/auditlens/lib/reason"
)

// Bounds of what is built from event data. Event data is written by whoever calls the
// apiserver (it copies a client's Audit-ID header into auditID verbatim, at any length), so
// ids and headers built from it are bounded here, once, for every service.
const (
	// MaxIDLen is the longest message id published; longer ids are shortened by BoundID.
	MaxIDLen = 200
	// MaxHeaderLen is the longest header value of a dead letter.
	MaxHeaderLen = 1024
	// DeadLetterMaxData is the most of the offending data a dead letter keeps.
	DeadLetterMaxData = 64 << 10
)

// HeaderTruncated is set on a dead letter whose data was cut: "<kept> of <original> bytes".
const HeaderTruncated = "Auditlens-Truncated"

// HeaderDelivered is set on a message given up after too many deliveries: how many there were.
const HeaderDelivered = "Auditlens-Delivered"

// BoundID returns id when it is at most MaxIDLen bytes, else a readable prefix of it followed
// by "~" and a hash of the whole id: still unique and stable (de-duplication keeps working),
// but bounded.
func BoundID(id string) string {
	if len(id) <= MaxIDLen {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	const hashLen = 32 // hex digits: 128 bits
	return cutUTF8(id, MaxIDLen-hashLen-1) + "~" + hex.EncodeToString(sum[:hashLen/2])
}

// EventID is the message id of one audit event of cluster: "<cluster>/<auditID>/<stage>"
// (key is auditID/stage), bounded by BoundID since a client chooses its auditID at any
// length. The same event re-read or redelivered gets the same id, so the bus stores it once.
func EventID(cluster, key string) string { return BoundID(cluster + "/" + key) }

// Short returns s cut to n bytes (at a UTF-8 boundary) with "..." and the original length
// appended when it was longer: for logs and headers.
func Short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cutUTF8(s, n) + "...(" + strconv.Itoa(len(s)) + " bytes)"
}

// cutUTF8 returns at most n bytes of s, not splitting a UTF-8 sequence.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// NewDeadLetter builds the dead letter of data, the one way every service does: stage names
// who gave up on it ("file", "webhook", "classify", "report", ...) and its id is
// BoundID(stage + "/" + id); source says where the data came from (file:offset, a request, a
// bus position); cause says why, as text (HeaderReason) and as a label of the reason
// vocabulary (HeaderReasonLabel). A cluster name the bus cannot carry becomes "unknown".
// Headers are bounded by MaxHeaderLen and at most
// DeadLetterMaxData bytes of data are kept (HeaderTruncated says so), so that it fits any bus
// that accepts a small message. extra headers (node, ...) are copied, bounded too.
func NewDeadLetter(cluster, stage, id, source string, cause error, data []byte, extra map[string]string) Message {
	if ValidateClusterName(cluster) != nil {
		cluster = "unknown" // the cause says which name the bus could not carry
	}
	h := make(map[string]string, len(extra)+4)
	for k, v := range extra {
		h[k] = Short(v, MaxHeaderLen)
	}
	h[HeaderSource] = Short(source, MaxHeaderLen)
	h[HeaderReason] = Short(cause.Error(), MaxHeaderLen)
	h[HeaderReasonLabel] = reason.Of(cause)
	if len(data) > DeadLetterMaxData {
		h[HeaderTruncated] = fmt.Sprintf("%d of %d bytes", DeadLetterMaxData, len(data))
		data = data[:DeadLetterMaxData]
	}
	return Message{Stream: DeadLetter, Cluster: cluster, ID: BoundID(stage + "/" + id), Header: h, Data: data}
}

// summarize shrinks a dead letter the bus refused for its size: first to 4 KiB of data, then
// to none (the headers still say where and why).
func summarize(m *Message) bool {
	keep := 0
	if len(m.Data) > 4<<10 {
		keep = 4 << 10
	} else if len(m.Data) == 0 {
		return false
	}
	h := make(map[string]string, len(m.Header)+1)
	for k, v := range m.Header {
		h[k] = v
	}
	orig := len(m.Data)
	if t, ok := h[HeaderTruncated]; ok {
		var kept, total int
		if _, err := fmt.Sscanf(t, "%d of %d bytes", &kept, &total); err == nil {
			orig = total
		}
	}
	h[HeaderTruncated] = fmt.Sprintf("%d of %d bytes", keep, orig)
	m.Header, m.Data = h, m.Data[:keep]
	return true
}

// PublishOrDeadLetter publishes msgs; when the bus refuses some of them for good (ErrTooLarge
// for their size, ErrInvalid for what it cannot carry, such as a cluster name), it finds them
// by publishing halves (a message stored twice is de-duplicated by its id), replaces each in
// msgs by the dead letter refused(i, err) returns, and publishes that: one such message never
// holds the others back. A dead letter refused for its size too is cut down until it fits (at last to its
// headers alone). Any other error is returned as it is (typically ErrUnavailable: retry with
// the same msgs, which then hold the dead letters already). refused is called once per
// message replaced.
func PublishOrDeadLetter(ctx context.Context, p Publisher, msgs []Message, refused func(i int, err error) Message) error {
	err := p.Publish(ctx, msgs...)
	if !refusedForGood(err) {
		return err
	}
	return publishSplitting(ctx, p, msgs, 0, err, refused)
}

// refusedForGood reports whether err refuses a message that no retry can store.
func refusedForGood(err error) bool {
	return errors.Is(err, ErrTooLarge) || errors.Is(err, ErrInvalid)
}

// publishSplitting publishes msgs, refused as a whole with tooLarge (ErrTooLarge or ErrInvalid).
func publishSplitting(ctx context.Context, p Publisher, msgs []Message, base int, tooLarge error, refused func(int, error) Message) error {
	if len(msgs) > 1 {
		mid := len(msgs) / 2
		for _, part := range []struct {
			m    []Message
			base int
		}{{msgs[:mid], base}, {msgs[mid:], base + mid}} {
			err := p.Publish(ctx, part.m...)
			if refusedForGood(err) {
				err = publishSplitting(ctx, p, part.m, part.base, err, refused)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if len(msgs) == 0 {
		return nil
	}
	m := &msgs[0]
	if m.Stream != DeadLetter {
		*m = refused(base, tooLarge)
	} else if !summarize(m) {
		return tooLarge
	}
	for {
		err := p.Publish(ctx, *m)
		if !errors.Is(err, ErrTooLarge) || !summarize(m) {
			return err
		}
	}
}

// RefusedDeadLetter is the refused function of PublishOrDeadLetter that the inputs share:
// msgs[i], refused for its size, becomes the dead letter "<stage>/too-large/<its id>", refused
// as something the bus cannot carry (ErrInvalid) "<stage>/invalid/<its id>", naming source and
// node. counted, when not nil, is told of each message given up and why (to adjust the
// input's counters).
func RefusedDeadLetter(msgs []Message, stage, source, node string, counted func(m *Message, err error)) func(i int, err error) Message {
	return func(i int, err error) Message {
		m := &msgs[i]
		if counted != nil {
			counted(m, err)
		}
		if errors.Is(err, ErrInvalid) && !errors.Is(err, ErrTooLarge) {
			return NewDeadLetter(m.Cluster, stage, "invalid/"+m.ID, source, err, m.Data, map[string]string{HeaderNode: node})
		}
		return NewDeadLetter(m.Cluster, stage, "too-large/"+m.ID, source, TooLargeCause(len(m.Data), err), m.Data, map[string]string{HeaderNode: node})
	}
}

// TooLargeCause is the cause of a dead letter for an event of n bytes that the bus refused
// with err (which wraps ErrTooLarge).
func TooLargeCause(n int, err error) error {
	return fmt.Errorf("event of %d bytes is larger than the bus accepts: %w", n, err)
}
