package auditevent

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

// Decoder reads audit events quickly. It is not safe for concurrent use; each goroutine
// keeps its own.
type Decoder struct {
	// MaxSize caps the size of one input in bytes (0: no cap).
	MaxSize int

	ev         Event
	imp        UserInfo
	ref        ObjectRef
	status     Status
	arena      []byte
	items      []byte
	reqParser  fastjson.Parser
	respParser fastjson.Parser
}

// NewDecoder returns a decoder rejecting inputs larger than maxSize bytes (0: no cap).
func NewDecoder(maxSize int) *Decoder { return &Decoder{MaxSize: maxSize} }

// Decode reads data, one audit Event or one EventList (the webhook's batch format, whose
// items may lack kind and apiVersion), and calls fn with each event in order. The *Event
// passed to fn is reused: it is valid only during the call.
//
// Input that is not one JSON object, larger than MaxSize, not valid UTF-8 or not an audit
// event fails as a whole with an error matching ErrNotJSON, ErrTooLarge, ErrInvalidUTF8 or
// ErrNotAuditEvent. A bad item of an EventList is skipped, the others are still passed to
// fn, and the returned error joins one "item N: ..." error per bad item. An error from fn
// stops the walk and is returned as is.
func (d *Decoder) Decode(data []byte, fn func(*Event) error) error {
	if err := d.check(data); err != nil {
		return err
	}
	d.arena = d.arena[:0]
	d.items = nil
	if err := d.decodeObject(data, true); err != nil {
		return err
	}
	if d.ev.Kind != "EventList" {
		if err := d.ev.validate(); err != nil {
			return err
		}
		return fn(&d.ev)
	}
	if !strings.HasPrefix(d.ev.APIVersion, "audit.k8s.io/") && d.ev.APIVersion != "" {
		return fmt.Errorf("%w: EventList of apiVersion %q", ErrNotAuditEvent, d.ev.APIVersion)
	}
	items := d.items
	if items == nil {
		return ErrEmptyEventList
	}
	var raws [][]byte
	s := scanner{b: items, arena: &d.arena}
	more, err := s.arrBegin(1)
	for more && err == nil {
		var raw []byte
		if raw, err = s.skip(1); err == nil {
			raws = append(raws, raw)
			more, err = s.arrNext()
		}
	}
	if err != nil {
		return err
	}
	if len(raws) == 0 {
		return ErrEmptyEventList
	}
	var errs []error
	for i, raw := range raws {
		err := d.decodeObject(raw, false)
		if err == nil {
			err = d.ev.validate()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("item %d: %w", i, err))
			continue
		}
		if err := fn(&d.ev); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// DecodeEvent reads exactly one audit Event (not an EventList). The result is valid until
// the next call on d.
func (d *Decoder) DecodeEvent(data []byte) (*Event, error) {
	if err := d.check(data); err != nil {
		return nil, err
	}
	d.arena = d.arena[:0]
	if err := d.decodeObject(data, false); err != nil {
		return nil, err
	}
	if err := d.ev.validate(); err != nil {
		return nil, err
	}
	return &d.ev, nil
}

func (d *Decoder) check(data []byte) error {
	if d.MaxSize > 0 && len(data) > d.MaxSize {
		return fmt.Errorf("%w (%d > %d bytes)", ErrTooLarge, len(data), d.MaxSize)
	}
	if !utf8.Valid(data) {
		return ErrInvalidUTF8
	}
	return nil
}

func (e *Event) validate() error { return validateHead(e.Kind, e.APIVersion, e.AuditID, e.Stage) }

// validateHead checks the members that make an object an audit event.
func validateHead(kind, apiVersion, auditID, stage string) error {
	if kind != "" && kind != "Event" {
		return fmt.Errorf("%w: kind %q", ErrNotAuditEvent, kind)
	}
	if apiVersion != "" && !strings.HasPrefix(apiVersion, "audit.k8s.io/") {
		return fmt.Errorf("%w: apiVersion %q", ErrNotAuditEvent, apiVersion)
	}
	if auditID == "" || stage == "" {
		return fmt.Errorf("%w: no auditID or stage", ErrNotAuditEvent)
	}
	return nil
}

// Top-level fields of auditv1.Event (plus the EventList's items and v1beta1's timestamp).
const (
	fNone = iota
	fKind
	fAPIVersion
	fLevel
	fAuditID
	fStage
	fRequestURI
	fVerb
	fUser
	fImpersonatedUser
	fSourceIPs
	fUserAgent
	fObjectRef
	fResponseStatus
	fRequestObject
	fResponseObject
	fRequestReceivedTimestamp
	fStageTimestamp
	fAnnotations
	fItems
	fTimestamp
)

var eventFields = []string{
	fKind: "kind", fAPIVersion: "apiVersion", fLevel: "level", fAuditID: "auditID",
	fStage: "stage", fRequestURI: "requestURI", fVerb: "verb", fUser: "user",
	fImpersonatedUser: "impersonatedUser", fSourceIPs: "sourceIPs", fUserAgent: "userAgent",
	fObjectRef: "objectRef", fResponseStatus: "responseStatus", fRequestObject: "requestObject",
	fResponseObject: "responseObject", fRequestReceivedTimestamp: "requestReceivedTimestamp",
	fStageTimestamp: "stageTimestamp", fAnnotations: "annotations",
}

func eventField(k string, top bool) int {
	switch k {
	case "kind":
		return fKind
	case "apiVersion":
		return fAPIVersion
	case "level":
		return fLevel
	case "auditID":
		return fAuditID
	case "stage":
		return fStage
	case "requestURI":
		return fRequestURI
	case "verb":
		return fVerb
	case "user":
		return fUser
	case "impersonatedUser":
		return fImpersonatedUser
	case "sourceIPs":
		return fSourceIPs
	case "userAgent":
		return fUserAgent
	case "objectRef":
		return fObjectRef
	case "responseStatus":
		return fResponseStatus
	case "requestObject":
		return fRequestObject
	case "responseObject":
		return fResponseObject
	case "requestReceivedTimestamp":
		return fRequestReceivedTimestamp
	case "stageTimestamp":
		return fStageTimestamp
	case "annotations":
		return fAnnotations
	case "timestamp":
		return fTimestamp
	case "items":
		if top {
			return fItems
		}
	}
	return foldField(k, eventFields)
}

// foldField finds k among names case-insensitively, as encoding/json does when no field
// matches exactly.
func foldField(k string, names []string) int {
	for i, n := range names {
		if n != "" && len(k) >= len(n) && len(k) <= 3*len(n) && strings.EqualFold(n, k) {
			return i
		}
	}
	return fNone
}

// decodeObject decodes one event object into d.ev. top allows an EventList's items.
func (d *Decoder) decodeObject(data []byte, top bool) error {
	ev := &d.ev
	groups, ips, ann := ev.User.Groups[:0], ev.SourceIPs[:0], ev.Annotations[:0]
	impGroups := d.imp.Groups[:0]
	*ev = Event{d: d}
	d.imp = UserInfo{Groups: impGroups}
	s := scanner{b: data, arena: &d.arena}
	if err := s.objectStart(); err != nil {
		return err
	}
	sc := scratch{groups: groups, ips: ips, ann: ann, impGroups: impGroups}
	more, err := s.objBegin(1)
	for more && err == nil {
		var k string
		if k, err = s.objKey(); err != nil {
			break
		}
		if err = d.eventMember(&s, eventField(k, top), &sc); err != nil {
			break
		}
		more, err = s.objNext()
	}
	if err != nil {
		return err
	}
	if s.peek() != 0 {
		return s.errorf("data after the object")
	}
	return nil
}

// scratch holds reusable backing arrays for the slices of one decode.
type scratch struct {
	groups, ips, impGroups []string
	ann                    []Annotation
}

func typeError(field string, c byte, want string) error {
	return fmt.Errorf("%w: %s is a JSON %s, want %s", ErrNotAuditEvent, field, kindName(c), want)
}

func (d *Decoder) eventMember(s *scanner, f int, sc *scratch) error {
	ev := &d.ev
	switch f {
	case fKind:
		return s.strField(&ev.Kind, "", "kind")
	case fAPIVersion:
		return s.strField(&ev.APIVersion, "", "apiVersion")
	case fLevel:
		return s.strField(&ev.Level, "", "level")
	case fAuditID:
		return s.strField(&ev.AuditID, "", "auditID")
	case fStage:
		return s.strField(&ev.Stage, "", "stage")
	case fRequestURI:
		return s.strField(&ev.RequestURI, "", "requestURI")
	case fVerb:
		return s.strField(&ev.Verb, "", "verb")
	case fUserAgent:
		return s.strField(&ev.UserAgent, "", "userAgent")
	case fUser:
		if null, err := s.isNull(); null || err != nil {
			return err
		}
		return s.userInfo(&ev.User, &sc.groups, "user")
	case fImpersonatedUser:
		if null, err := s.isNull(); null || err != nil {
			ev.ImpersonatedUser = nil
			return err
		}
		if ev.ImpersonatedUser == nil {
			d.imp = UserInfo{}
			ev.ImpersonatedUser = &d.imp
		}
		return s.userInfo(ev.ImpersonatedUser, &sc.impGroups, "impersonatedUser")
	case fSourceIPs:
		return s.strSlice(&ev.SourceIPs, &sc.ips, "sourceIPs")
	case fObjectRef:
		if null, err := s.isNull(); null || err != nil {
			ev.ObjectRef = nil
			return err
		}
		if ev.ObjectRef == nil {
			d.ref = ObjectRef{}
			ev.ObjectRef = &d.ref
		}
		return s.objectRef(ev.ObjectRef)
	case fResponseStatus:
		if null, err := s.isNull(); null || err != nil {
			ev.ResponseStatus = nil
			return err
		}
		if ev.ResponseStatus == nil {
			d.status = Status{}
			ev.ResponseStatus = &d.status
		}
		return s.status(ev.ResponseStatus)
	case fRequestObject, fResponseObject, fItems:
		raw, err := s.skip(1)
		if err != nil {
			return err
		}
		if string(raw) == "null" {
			raw = nil
		}
		switch f {
		case fRequestObject:
			ev.RequestObjectRaw = raw
		case fResponseObject:
			ev.ResponseObjectRaw = raw
		default:
			d.items = raw
		}
		return nil
	case fRequestReceivedTimestamp:
		return s.microTime(&ev.RequestReceivedTimestamp, "requestReceivedTimestamp")
	case fStageTimestamp:
		return s.microTime(&ev.StageTimestamp, "stageTimestamp")
	case fTimestamp:
		// Not in auditv1.Event: read when well-formed, never an error.
		if s.peek() == '"' {
			v, err := s.str()
			if err == nil {
				ev.Timestamp, _ = parseTime(v)
			}
			return err
		}
		_, err := s.skip(1)
		return err
	case fAnnotations:
		if null, err := s.isNull(); null || err != nil {
			ev.Annotations = nil
			return err
		}
		if c := s.peek(); c != '{' {
			return typeError("annotations", c, "an object")
		}
		if ev.Annotations == nil {
			ev.Annotations = sc.ann[:0]
		}
		more, err := s.objBegin(2)
		for more && err == nil {
			var k, v string
			if k, err = s.objKey(); err != nil {
				break
			}
			if err = s.strField(&v, "annotations", " value"); err != nil {
				break
			}
			ev.Annotations = append(ev.Annotations, Annotation{k, v})
			sc.ann = ev.Annotations
			more, err = s.objNext()
		}
		return err
	}
	_, err := s.skip(1)
	return err
}
