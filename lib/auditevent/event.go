package auditevent

import (
	"time"

	"github.com/valyala/fastjson"
)

// Event is what auditlens reads from one audit.k8s.io/v1 (or v1beta1) Event: the fields of
// k8s.io/apiserver/pkg/apis/audit/v1.Event that rules and findings use, decoded with that
// type's encoding/json semantics (keys matched case-insensitively, the last duplicate wins,
// null leaves a string unchanged and clears a pointer, slice or map).
//
// An Event and every string and slice in it belong to the Decoder that returned it: they are
// valid until its next Decode call and while the input bytes are unchanged. Copy what you keep.
type Event struct {
	APIVersion string // "audit.k8s.io/v1", "audit.k8s.io/v1beta1", or "" (EventList items)
	Kind       string // "Event" or ""

	Level      string // None, Metadata, Request, RequestResponse
	AuditID    string
	Stage      string // RequestReceived, ResponseStarted, ResponseComplete, Panic
	RequestURI string
	Verb       string

	User             UserInfo
	ImpersonatedUser *UserInfo
	SourceIPs        []string
	UserAgent        string
	ObjectRef        *ObjectRef
	ResponseStatus   *Status

	RequestReceivedTimestamp time.Time
	StageTimestamp           time.Time
	// Timestamp is the v1beta1-only "timestamp" field (zero when absent or unreadable).
	Timestamp time.Time

	// Annotations in document order; a repeated key's last value wins (see Annotation).
	Annotations []Annotation

	// RequestObjectRaw and ResponseObjectRaw are the exact JSON text of requestObject and
	// responseObject, nil when absent or null. RequestObject and ResponseObject parse them.
	RequestObjectRaw  []byte
	ResponseObjectRaw []byte

	d                      *Decoder
	reqParsed, respParsed  bool
	reqObject, respObjects *fastjson.Value
}

// UserInfo is the authenticated (or impersonated) user of a request.
type UserInfo struct {
	Username string
	UID      string
	Groups   []string
}

// ObjectRef is the object a request is about.
type ObjectRef struct {
	Resource        string
	Namespace       string
	Name            string
	UID             string
	APIGroup        string
	APIVersion      string
	ResourceVersion string
	Subresource     string
}

// Status is the part of the response status auditlens reads.
type Status struct {
	Status  string
	Message string
	Reason  string
	Code    int32
	// Details is the exact JSON text of responseStatus.details (an eviction's refusal names
	// its PodDisruptionBudget there), nil when absent; like RequestObjectRaw it points into
	// the decoded line and lives as long as the event.
	Details []byte
}

// Annotation is one audit annotation.
type Annotation struct{ Key, Value string }

// Annotation returns the value of the audit annotation key and whether it is present.
func (e *Event) Annotation(key string) (string, bool) {
	for i := len(e.Annotations) - 1; i >= 0; i-- {
		if e.Annotations[i].Key == key {
			return e.Annotations[i].Value, true
		}
	}
	return "", false
}

// EventTime is when the request was received: requestReceivedTimestamp, else stageTimestamp,
// else the v1beta1 timestamp.
func (e *Event) EventTime() time.Time {
	switch {
	case !e.RequestReceivedTimestamp.IsZero():
		return e.RequestReceivedTimestamp
	case !e.StageTimestamp.IsZero():
		return e.StageTimestamp
	}
	return e.Timestamp
}

// RequestObject parses requestObject on first use; nil when absent, null or unparseable.
func (e *Event) RequestObject() *fastjson.Value {
	if !e.reqParsed {
		e.reqParsed = true
		e.reqObject = e.d.parseBody(&e.d.reqParser, e.RequestObjectRaw)
	}
	return e.reqObject
}

// ResponseObject parses responseObject on first use; nil when absent, null or unparseable.
func (e *Event) ResponseObject() *fastjson.Value {
	if !e.respParsed {
		e.respParsed = true
		e.respObjects = e.d.parseBody(&e.d.respParser, e.ResponseObjectRaw)
	}
	return e.respObjects
}

func (d *Decoder) parseBody(p *fastjson.Parser, raw []byte) *fastjson.Value {
	if raw == nil {
		return nil
	}
	v, err := p.ParseBytes(raw)
	if err != nil {
		return nil
	}
	return v
}
