// Package auditevent reads kube-apiserver audit events (audit.k8s.io/v1 and v1beta1 Event
// and EventList JSON) quickly, without decoding what the caller does not need.
package auditevent

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/auditlens/auditlens/lib/reason"
)

// Errors for input that is not an audit event; match with errors.Is. Each carries its label
// of the reason vocabulary (reason.Of).
var (
	ErrNotJSON        = reason.New("not JSON", reason.NotJSON)
	ErrInvalidUTF8    = reason.New("invalid UTF-8", reason.InvalidUTF8)
	ErrTooLarge       = reason.New("event larger than the size cap", reason.TooLarge)
	ErrNotAuditEvent  = reason.New("not an audit event", reason.NotAuditEvent)
	ErrEmptyEventList = reason.New("empty EventList", reason.NotAuditEvent)
)

// Ref identifies one audit event: what ingest needs to name and de-duplicate a message.
type Ref struct {
	APIVersion string // "audit.k8s.io/v1", "audit.k8s.io/v1beta1", or "" inside an EventList
	AuditID    string
	Stage      string // RequestReceived, ResponseStarted, ResponseComplete, Panic
}

// Key is the idempotency key of the event within a cluster: "<auditID>/<stage>".
func (r Ref) Key() string { return r.AuditID + "/" + r.Stage }

// Peek checks that data is one audit Event object no larger than maxSize bytes (0: no cap)
// and returns its identity. Items of an EventList may lack kind and apiVersion.
//
// Peek reads member names as the Decoder does (encoding/json's rules: case-insensitive match,
// the last duplicate wins) but passes over every member except kind, apiVersion, auditID and
// stage without decoding it, so it agrees with what classify decodes later at a fraction of
// the cost.
func Peek(data []byte, maxSize int) (Ref, error) {
	if maxSize > 0 && len(data) > maxSize {
		return Ref{}, fmt.Errorf("%w (%d > %d bytes)", ErrTooLarge, len(data), maxSize)
	}
	if !utf8.Valid(data) {
		return Ref{}, ErrInvalidUTF8
	}
	var arena []byte
	h, err := peekObject(data, false, &arena)
	if err != nil {
		return Ref{}, err
	}
	return h.ref()
}

// head is what Peek reads of an event (or, with items, of an EventList). Its strings point
// into the input or the arena.
type head struct {
	kind, apiVersion, auditID, stage string
	items                            []byte // an EventList's items array, raw
}

// ref validates h as an event and returns its identity, copied out of the input.
func (h *head) ref() (Ref, error) {
	if err := validateHead(h.kind, h.apiVersion, h.auditID, h.stage); err != nil {
		return Ref{}, err
	}
	return Ref{APIVersion: intern(h.apiVersion), AuditID: strings.Clone(h.auditID), Stage: intern(h.stage)}, nil
}

// intern returns the common values of apiVersion and stage without allocating.
func intern(s string) string {
	for _, c := range [...]string{"audit.k8s.io/v1", "audit.k8s.io/v1beta1", "RequestReceived", "ResponseStarted", "ResponseComplete", "Panic"} {
		if s == c {
			return c
		}
	}
	return strings.Clone(s)
}

// peekObject walks one JSON object (with top, possibly an EventList), reading the members
// that identify an event and checking the syntax of the others.
func peekObject(data []byte, top bool, arena *[]byte) (head, error) {
	var h head
	s := scanner{b: data, arena: arena}
	if err := s.objectStart(); err != nil {
		return h, err
	}
	more, err := s.objBegin(1)
	for more && err == nil {
		var k string
		if k, err = s.objKey(); err != nil {
			break
		}
		switch eventField(k, top) {
		case fKind:
			err = s.strField(&h.kind, "", "kind")
		case fAPIVersion:
			err = s.strField(&h.apiVersion, "", "apiVersion")
		case fAuditID:
			err = s.strField(&h.auditID, "", "auditID")
		case fStage:
			err = s.strField(&h.stage, "", "stage")
		case fItems:
			var raw []byte
			if raw, err = s.skip(1); err == nil {
				if string(raw) == "null" {
					raw = nil
				}
				h.items = raw
			}
		default:
			_, err = s.skip(1)
		}
		if err == nil {
			more, err = s.objNext()
		}
	}
	if err != nil {
		return h, err
	}
	if s.peek() != 0 {
		return h, s.errorf("data after the object")
	}
	return h, nil
}

// Item is one event of an EventList, raw, with its identity.
type Item struct {
	Ref
	Raw []byte
}

// SplitList splits an EventList (the webhook's batch format) or a single Event into its
// events. Each item's Raw is a fresh copy. An item that is not an audit event fails the
// whole list: the webhook answers 400 and the apiserver logs it. An EventList without items
// is no error: there is nothing in it.
func SplitList(data []byte, maxEventSize int) ([]Item, error) {
	return splitList(data, maxEventSize, true)
}

// SplitListShared is SplitList without the copies: each item's Raw points into data, which
// must then stay unchanged while the items are used. The webhook holds a request body until
// its events are published, so a copy would only double its memory.
func SplitListShared(data []byte, maxEventSize int) ([]Item, error) {
	return splitList(data, maxEventSize, false)
}

func splitList(data []byte, maxEventSize int, clone bool) ([]Item, error) {
	keep := func(b []byte) []byte {
		if clone {
			return bytes.Clone(b)
		}
		return b[:len(b):len(b)]
	}
	if !utf8.Valid(data) {
		return nil, ErrInvalidUTF8
	}
	var arena []byte
	h, err := peekObject(data, true, &arena)
	if err != nil {
		return nil, err
	}
	if h.kind != "EventList" {
		if maxEventSize > 0 && len(data) > maxEventSize {
			return nil, fmt.Errorf("%w (%d > %d bytes)", ErrTooLarge, len(data), maxEventSize)
		}
		r, err := h.ref()
		if err != nil {
			return nil, err
		}
		return []Item{{Ref: r, Raw: keep(data)}}, nil
	}
	if h.apiVersion != "" && !strings.HasPrefix(h.apiVersion, "audit.k8s.io/") {
		return nil, fmt.Errorf("%w: EventList of apiVersion %q", ErrNotAuditEvent, h.apiVersion)
	}
	if h.items == nil {
		return nil, nil // nothing to do
	}
	var out []Item
	s := scanner{b: h.items, arena: &arena}
	if c := s.peek(); c != '[' {
		return nil, typeError("items", c, "an array")
	}
	more, err := s.arrBegin(1)
	for i := 0; more && err == nil; i++ {
		var raw []byte
		if raw, err = s.skip(1); err != nil {
			break
		}
		if maxEventSize > 0 && len(raw) > maxEventSize {
			return nil, fmt.Errorf("item %d: %w (%d > %d bytes)", i, ErrTooLarge, len(raw), maxEventSize)
		}
		it, perr := peekObject(raw, false, &arena)
		if perr != nil {
			return nil, fmt.Errorf("item %d: %w", i, perr)
		}
		r, rerr := it.ref()
		if rerr != nil {
			return nil, fmt.Errorf("item %d: %w", i, rerr)
		}
		out = append(out, Item{Ref: r, Raw: keep(raw)})
		more, err = s.arrNext()
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
