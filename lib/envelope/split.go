package envelope

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/auditlens/auditlens/lib/auditevent"
)

// Decode reads data as dec does (one audit Event or EventList) and, only when that fails
// with an error for which Candidate is true, as an envelope whose events it decodes with dec
// and passes to fn. A plain audit line costs what dec.Decode costs.
//
// A bad event inside an envelope does not stop the others: the returned error joins one
// error per bad event (errors.Join), as dec.Decode does for the items of an EventList. Input
// that is neither an audit event nor an envelope returns dec's error.
func (d *Decoder) Decode(dec *auditevent.Decoder, data []byte, fn func(*auditevent.Event) error) (Stats, error) {
	err := dec.Decode(data, fn)
	if err == nil || !Candidate(err) || isList(err) {
		return Stats{}, err
	}
	var errs []error
	n := 0
	st, uerr := d.Unwrap(data, func(ev []byte, o Origin) error {
		n++
		if err := dec.Decode(ev, fn); err != nil {
			errs = append(errs, fmt.Errorf("%s event %d: %w", o.Value(), n, err))
		}
		return nil
	})
	if errors.Is(uerr, ErrNotEnvelope) && st.Events == 0 && st.Skipped == 0 {
		return st, err
	}
	if uerr != nil {
		errs = append(errs, uerr)
	}
	return st, errors.Join(errs...)
}

// isList reports whether err joins item errors of an EventList (its good items were passed).
func isList(err error) bool {
	_, ok := err.(interface{ Unwrap() []error })
	return ok
}

// Item is one audit event taken out of an envelope: a fresh copy with its identity, or, with
// Err set, the bad event's text and why it is bad.
type Item struct {
	auditevent.Item
	Origin Origin
	Err    error
}

// Split unwraps data (see Unwrap) into the events it holds, each checked with
// auditevent.SplitList (an EventList inside an envelope gives its items) and copied: what
// ingest publishes. A bad event is returned with Err set, the others are still returned.
func (d *Decoder) Split(data []byte, maxEventSize int) ([]Item, Stats, error) {
	var out []Item
	st, err := d.Unwrap(data, func(ev []byte, o Origin) error {
		items, err := auditevent.SplitList(ev, maxEventSize)
		if err != nil {
			out = append(out, Item{Item: auditevent.Item{Raw: bytes.Clone(ev)}, Origin: o, Err: fmt.Errorf("%s event: %w", o.Value(), err)})
			return nil
		}
		for _, it := range items {
			out = append(out, Item{Item: it, Origin: o})
		}
		return nil
	})
	if err != nil {
		return nil, st, err
	}
	return out, st, nil
}

// SplitAny is what a message-based source reads: data is an audit Event or EventList
// (auditevent.SplitList), or else, when that fails with an error for which Candidate is
// true, a cloud envelope (Split). Input that is neither returns the audit decoder's error;
// an envelope that decodes to more than the decoder's Limit allows, ErrLimit or ErrBusy.
func (d *Decoder) SplitAny(data []byte, maxEventSize int) ([]Item, Stats, error) {
	items, err := auditevent.SplitList(data, maxEventSize)
	if err == nil {
		out := make([]Item, len(items))
		for i, it := range items {
			out[i] = Item{Item: it}
		}
		return out, Stats{Events: len(items)}, nil
	}
	if !Candidate(err) {
		return nil, Stats{}, err
	}
	out, st, uerr := d.Split(data, maxEventSize)
	if errors.Is(uerr, ErrLimit) || errors.Is(uerr, ErrBusy) {
		return nil, st, uerr // an envelope, over its limit: say so rather than "not JSON"
	}
	if uerr != nil {
		return nil, st, err
	}
	return out, st, nil
}
