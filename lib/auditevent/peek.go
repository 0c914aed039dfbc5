// Package auditevent reads kube-apiserver audit events (audit.k8s.io/v1 and v1beta1 Event
// and EventList JSON) quickly, without decoding what the caller does not need.
package auditevent

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

// Errors for input that is not an audit event; match with errors.Is.
var (
	ErrNotJSON        = errors.New("not JSON")
	ErrInvalidUTF8    = errors.New("invalid UTF-8")
	ErrTooLarge       = errors.New("event larger than the size cap")
	ErrNotAuditEvent  = errors.New("not an audit event")
	ErrEmptyEventList = errors.New("empty EventList")
)

// parsers are reused across calls: Peek and SplitList copy what they return out of them.
var parsers fastjson.ParserPool

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
func Peek(data []byte, maxSize int) (Ref, error) {
	if maxSize > 0 && len(data) > maxSize {
		return Ref{}, fmt.Errorf("%w (%d > %d bytes)", ErrTooLarge, len(data), maxSize)
	}
	if !utf8.Valid(data) {
		return Ref{}, ErrInvalidUTF8
	}
	p := parsers.Get()
	defer parsers.Put(p)
	v, err := p.ParseBytes(data)
	if err != nil {
		return Ref{}, fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	return refOf(v)
}

func refOf(v *fastjson.Value) (Ref, error) {
	if v.Type() != fastjson.TypeObject {
		return Ref{}, fmt.Errorf("%w: a JSON %s", ErrNotAuditEvent, v.Type())
	}
	kind := string(v.GetStringBytes("kind"))
	if kind != "" && kind != "Event" {
		return Ref{}, fmt.Errorf("%w: kind %q", ErrNotAuditEvent, kind)
	}
	r := Ref{
		APIVersion: string(v.GetStringBytes("apiVersion")),
		AuditID:    string(v.GetStringBytes("auditID")),
		Stage:      string(v.GetStringBytes("stage")),
	}
	if r.AuditID == "" || r.Stage == "" {
		return Ref{}, fmt.Errorf("%w: no auditID or stage", ErrNotAuditEvent)
	}
	return r, nil
}

// Item is one event of an EventList, raw, with its identity.
type Item struct {
	Ref
	Raw []byte
}

// SplitList splits an EventList (the webhook's batch format) or a single Event into its
// events. Each item's Raw is a fresh copy. An item that is not an audit event fails the
// whole list: the webhook answers 400 and the apiserver logs it.
func SplitList(data []byte, maxEventSize int) ([]Item, error) {
	if !utf8.Valid(data) {
		return nil, ErrInvalidUTF8
	}
	p := parsers.Get()
	defer parsers.Put(p)
	v, err := p.ParseBytes(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	if v.Type() != fastjson.TypeObject {
		return nil, fmt.Errorf("%w: a JSON %s", ErrNotAuditEvent, v.Type())
	}
	if string(v.GetStringBytes("kind")) != "EventList" {
		r, err := refOf(v)
		if err != nil {
			return nil, err
		}
		return []Item{{Ref: r, Raw: append([]byte(nil), data...)}}, nil
	}
	items := v.GetArray("items")
	out := make([]Item, 0, len(items))
	for i, it := range items {
		r, err := refOf(it)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		raw := it.MarshalTo(nil)
		if maxEventSize > 0 && len(raw) > maxEventSize {
			return nil, fmt.Errorf("item %d: %w (%d > %d bytes)", i, ErrTooLarge, len(raw), maxEventSize)
		}
		out = append(out, Item{Ref: r, Raw: raw})
	}
	return out, nil
}
