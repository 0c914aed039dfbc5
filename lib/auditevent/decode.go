package auditevent

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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

// strField reads a string into dst; null leaves dst unchanged.
func (s *scanner) strField(dst *string, prefix, name string) error {
	switch c := s.peek(); c {
	case '"':
		v, err := s.str()
		if err != nil {
			return err
		}
		*dst = v
		return nil
	case 'n':
		return s.literal("null")
	default:
		if _, err := s.skip(1); err != nil {
			return err
		}
		return typeError(prefix+name, c, "a string")
	}
}

// strSlice reads an array of strings into dst, reusing the backing array in *buf; null
// sets dst to nil and a null element reads as "".
func (s *scanner) strSlice(dst *[]string, buf *[]string, field string) error {
	if null, err := s.isNull(); null || err != nil {
		*dst = nil
		return err
	}
	if c := s.peek(); c != '[' {
		return typeError(field, c, "an array")
	}
	out := (*buf)[:0]
	more, err := s.arrBegin(2)
	for more && err == nil {
		var v string
		if err = s.strField(&v, field, " element"); err != nil {
			break
		}
		out = append(out, v)
		more, err = s.arrNext()
	}
	*buf = out
	if out == nil {
		out = []string{}
	}
	*dst = out
	return err
}

var userFields = []string{"", "username", "uid", "groups"}

func (s *scanner) userInfo(u *UserInfo, groups *[]string, field string) error {
	if c := s.peek(); c != '{' {
		return typeError(field, c, "an object")
	}
	more, err := s.objBegin(2)
	for more && err == nil {
		var k string
		if k, err = s.objKey(); err != nil {
			break
		}
		if err = s.userMember(u, groups, field, k); err != nil {
			break
		}
		more, err = s.objNext()
	}
	return err
}

func (s *scanner) userMember(u *UserInfo, groups *[]string, field, k string) error {
	{
		f := 0
		switch k {
		case "username":
			f = 1
		case "uid":
			f = 2
		case "groups":
			f = 3
		case "extra":
		default:
			f = foldField(k, userFields)
		}
		switch f {
		case 1:
			return s.strField(&u.Username, field, ".username")
		case 2:
			return s.strField(&u.UID, field, ".uid")
		case 3:
			return s.strSlice(&u.Groups, groups, field)
		}
		_, err := s.skip(2)
		return err
	}
}

var refFields = []string{"", "resource", "namespace", "name", "uid", "apiGroup", "apiVersion", "resourceVersion", "subresource"}

func (s *scanner) objectRef(r *ObjectRef) error {
	if c := s.peek(); c != '{' {
		return typeError("objectRef", c, "an object")
	}
	more, err := s.objBegin(2)
	for more && err == nil {
		var k string
		if k, err = s.objKey(); err != nil {
			break
		}
		if err = s.refMember(r, k); err != nil {
			break
		}
		more, err = s.objNext()
	}
	return err
}

func (s *scanner) refMember(r *ObjectRef, k string) error {
	{
		var dst *string
		switch k {
		case "resource":
			dst = &r.Resource
		case "namespace":
			dst = &r.Namespace
		case "name":
			dst = &r.Name
		case "uid":
			dst = &r.UID
		case "apiGroup":
			dst = &r.APIGroup
		case "apiVersion":
			dst = &r.APIVersion
		case "resourceVersion":
			dst = &r.ResourceVersion
		case "subresource":
			dst = &r.Subresource
		default:
			switch foldField(k, refFields) {
			case 1:
				dst = &r.Resource
			case 2:
				dst = &r.Namespace
			case 3:
				dst = &r.Name
			case 4:
				dst = &r.UID
			case 5:
				dst = &r.APIGroup
			case 6:
				dst = &r.APIVersion
			case 7:
				dst = &r.ResourceVersion
			case 8:
				dst = &r.Subresource
			default:
				_, err := s.skip(2)
				return err
			}
		}
		return s.strField(dst, "objectRef.", k)
	}
}

var statusFields = []string{"", "status", "message", "reason", "code"}

func (s *scanner) status(st *Status) error {
	if c := s.peek(); c != '{' {
		return typeError("responseStatus", c, "an object")
	}
	more, err := s.objBegin(2)
	for more && err == nil {
		var k string
		if k, err = s.objKey(); err != nil {
			break
		}
		if err = s.statusMember(st, k); err != nil {
			break
		}
		more, err = s.objNext()
	}
	return err
}

func (s *scanner) statusMember(st *Status, k string) error {
	{
		f := 0
		switch k {
		case "status":
			f = 1
		case "message":
			f = 2
		case "reason":
			f = 3
		case "code":
			f = 4
		case "metadata", "details", "kind", "apiVersion":
		default:
			f = foldField(k, statusFields)
		}
		switch f {
		case 1:
			return s.strField(&st.Status, "responseStatus", ".status")
		case 2:
			return s.strField(&st.Message, "responseStatus", ".message")
		case 3:
			return s.strField(&st.Reason, "responseStatus", ".reason")
		case 4:
			c := s.peek()
			if c == 'n' {
				return s.literal("null")
			}
			if c != '-' && (c < '0' || c > '9') {
				if _, err := s.skip(2); err != nil {
					return err
				}
				return typeError("responseStatus.code", c, "an integer")
			}
			num, err := s.number()
			if err != nil {
				return err
			}
			n, err := strconv.ParseInt(b2s(num), 10, 32)
			if err != nil {
				return fmt.Errorf("%w: responseStatus.code %s is not an int32", ErrNotAuditEvent, num)
			}
			st.Code = int32(n)
			return nil
		}
		_, err := s.skip(2)
		return err
	}
}

// microTime reads a metav1.MicroTime: null is the zero time; a string in the apiserver's
// format (RFC 3339 with exactly six fractional digits) or, more leniently, any RFC 3339 time.
func (s *scanner) microTime(dst *time.Time, field string) error {
	switch c := s.peek(); c {
	case 'n':
		*dst = time.Time{}
		return s.literal("null")
	case '"':
		v, err := s.str()
		if err != nil {
			return err
		}
		t, err := parseTime(v)
		if err != nil {
			return fmt.Errorf("%w: %s %q is not an RFC 3339 time", ErrNotAuditEvent, field, v)
		}
		*dst = t
		return nil
	default:
		if _, err := s.skip(1); err != nil {
			return err
		}
		return typeError(field, c, "a string")
	}
}

// parseTime parses "2006-01-02T15:04:05.000000Z" quickly and other RFC 3339 forms with time.Parse.
func parseTime(v string) (time.Time, error) {
	if len(v) == 27 && v[4] == '-' && v[7] == '-' && v[10] == 'T' && v[13] == ':' && v[16] == ':' && v[19] == '.' && v[26] == 'Z' {
		y, ok1 := digits(v[0:4])
		mo, ok2 := digits(v[5:7])
		d, ok3 := digits(v[8:10])
		h, ok4 := digits(v[11:13])
		mi, ok5 := digits(v[14:16])
		sec, ok6 := digits(v[17:19])
		us, ok7 := digits(v[20:26])
		if ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && mo >= 1 && mo <= 12 && d >= 1 && d <= daysIn(mo, y) && h < 24 && mi < 60 && sec < 60 {
			return time.Date(y, time.Month(mo), d, h, mi, sec, us*1000, time.UTC), nil
		}
	}
	if t, err := time.Parse("2006-01-02T15:04:05.000000Z07:00", v); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339Nano, v)
}

func digits(s string) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func daysIn(m, y int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
