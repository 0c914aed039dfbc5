package envelope

import (
	"errors"
	"flag"
	"fmt"
	"sync"

	"github.com/auditlens/auditlens/lib/auditevent"
)

// A few kilobytes of gzip decompress to many megabytes: what a source decodes is bounded per
// request or message (Limit.Max) and, over all the requests and messages in flight, by a
// Budget shared by the sources. A decoder given a Limit (SetLimit) counts every byte it
// decompresses or decodes from base64, at every layer, against both.

// ErrLimit wraps the error of a request or message whose envelopes decode to more than its
// Limit.Max: retrying cannot help.
var ErrLimit = fmt.Errorf("decoded envelopes larger than the limit: %w", auditevent.ErrTooLarge)

// ErrBusy wraps the error of a decode that would take the decoded bytes in flight past their
// Budget: retry once others are done.
var ErrBusy = errors.New("decoded envelopes in flight at their limit")

// Limits configures the bounds of the managed sources' decoding.
type Limits struct {
	// MaxDecoded caps the bytes one Firehose request, Pub/Sub message, Kafka record or
	// CloudWatch event decodes to (every layer, every record of a request).
	MaxDecoded int64
	// MaxInflight caps the decoded bytes (and Firehose request bodies) held at once by all
	// managed sources together; beyond it a source waits, nacks or answers a retryable error.
	MaxInflight int64
}

// DefaultLimits are the defaults: 128 MiB per request or message, 256 MiB in flight.
func DefaultLimits() Limits { return Limits{MaxDecoded: 128 << 20, MaxInflight: 256 << 20} }

// RegisterFlags adds --managed-max-decoded-bytes and --managed-max-inflight-bytes to fs.
func (l *Limits) RegisterFlags(fs *flag.FlagSet) {
	fs.Int64Var(&l.MaxDecoded, "managed-max-decoded-bytes", l.MaxDecoded, "most `bytes` one Firehose request, Pub/Sub message, Kafka record or CloudWatch event may decode to (gzip, base64, every layer; more: the request is refused with 413, a message or record dead-lettered)")
	fs.Int64Var(&l.MaxInflight, "managed-max-inflight-bytes", l.MaxInflight, "most `bytes` of decoded envelopes and Firehose bodies the managed sources hold at once (more: Firehose is answered 503, Pub/Sub messages nacked, Kafka and CloudWatch wait)")
}

// Validate checks the limits.
func (l Limits) Validate() error {
	if l.MaxDecoded <= 0 {
		return fmt.Errorf("--managed-max-decoded-bytes %d: must be positive", l.MaxDecoded)
	}
	if l.MaxInflight < l.MaxDecoded {
		return fmt.Errorf("--managed-max-inflight-bytes %d: must be at least --managed-max-decoded-bytes (%d), or the largest message could never be decoded", l.MaxInflight, l.MaxDecoded)
	}
	return nil
}

// Budget is the bytes that the requests and messages in flight may hold at once. It is safe
// for concurrent use.
type Budget struct {
	mu        sync.Mutex
	max, used int64
}

// NewBudget returns a budget of max bytes.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// TryTake takes n bytes, or reports that they are not free now.
func (b *Budget) TryTake(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

// Give gives back n bytes taken.
func (b *Budget) Give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// InUse is the bytes taken now.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

func (b *Budget) free() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.max - b.used
}

// Limit bounds what one request or message decodes: at most Max bytes (0: no bound) between
// two Resets, each taken from Budget (nil: none) until Release. Not safe for concurrent use.
type Limit struct {
	Max    int64
	Budget *Budget

	used  int64 // decoded since the last Reset
	taken int64 // taken from Budget, not yet given back
	total int64 // decoded since the Limit was made
}

// Reset starts counting Max again (the next record of a source that bounds each record); what
// was taken from the budget stays taken.
func (l *Limit) Reset() { l.used = 0 }

// Release gives back to the budget what was taken.
func (l *Limit) Release() {
	if l.Budget != nil && l.taken > 0 {
		l.Budget.Give(l.taken)
	}
	l.taken = 0
}

// Used is the bytes decoded since the last Reset.
func (l *Limit) Used() int64 { return l.used }

// Decoded is the bytes decoded in all, Resets included.
func (l *Limit) Decoded() int64 { return l.total }

// room is the most a decode may produce now.
func (l *Limit) room() int64 {
	r := int64(1<<62 - 1)
	if l.Max > 0 {
		r = l.Max - l.used
	}
	if l.Budget != nil {
		r = min(r, l.Budget.free())
	}
	return max(r, 0)
}

// take counts n decoded bytes.
func (l *Limit) take(n int64) error {
	if l.Max > 0 && l.used+n > l.Max {
		return l.exceeded(n)
	}
	if l.Budget != nil {
		if !l.Budget.TryTake(n) {
			return fmt.Errorf("%w: %d more bytes", ErrBusy, n)
		}
		l.taken += n
	}
	l.used += n
	l.total += n
	return nil
}

// exceeded is the error of a decode of more than n bytes that room did not allow.
func (l *Limit) exceeded(n int64) error {
	if l.Max > 0 && l.used+n > l.Max {
		return fmt.Errorf("%w: more than %d bytes", ErrLimit, l.Max)
	}
	return fmt.Errorf("%w: %d more bytes", ErrBusy, n)
}
