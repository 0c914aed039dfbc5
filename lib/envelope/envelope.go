// Package envelope unwraps kube-apiserver audit events from the envelopes that managed
// Kubernetes clouds deliver them in: CloudWatch Logs (EKS), Azure diagnostic records (AKS)
// and Cloud Logging LogEntry (GKE), detected from the content.
//
// Plain audit lines never get here: callers decode with lib/auditevent first and call Unwrap
// only when that fails with an error for which Candidate is true, so detection costs a plain
// line nothing.
package envelope

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/valyala/fastjson"

	"github.com/auditlens/auditlens/lib/auditevent"
)

// Annotation is the audit annotation Unwrap adds to every event it takes out of an envelope:
// "<cloud>/<envelope>", e.g. "eks/cloudwatch-subscription", "aks/diagnostic-records",
// "gke/logentry". Findings carry it as evidence.
const Annotation = auditevent.EnvelopeAnnotation

// ErrNotEnvelope: the input is none of the envelopes this package knows.
var ErrNotEnvelope = errors.New("not an audit event or a known cloud envelope")

// Cloud names.
const (
	EKS = "eks"
	AKS = "aks"
	GKE = "gke"
)

// Origin says where an event came from.
type Origin struct {
	Cloud    string // eks, aks or gke
	Envelope string // the envelope format, outermost layer first, e.g. "firehose/gzip/cloudwatch-subscription"
	// Cluster is the cluster named by the envelope ("" when it names none): the EKS log group
	// /aws/eks/<cluster>/cluster, the AKS resource id .../managedClusters/<cluster> (lower
	// case), the GKE
	// resource.labels.cluster_name.
	Cluster string
}

// ClusterOr is the cluster the envelope names, or def when it names none.
func (o Origin) ClusterOr(def string) string {
	if o.Cluster == "" {
		return def
	}
	return o.Cluster
}

// Value is the annotation value: "<cloud>/<envelope>".
func (o Origin) Value() string { return o.Cloud + "/" + o.Envelope }

// Stats counts what one Unwrap found.
type Stats struct {
	Events  int            // audit events passed to fn
	Skipped int            // records that hold no audit event (other log categories, control messages)
	Reasons map[string]int // Skipped by reason
}

func (s *Stats) skip(reason string) {
	s.Skipped++
	if s.Reasons == nil {
		s.Reasons = map[string]int{}
	}
	s.Reasons[reason]++
}

// Candidate reports whether err, returned by lib/auditevent for some input, leaves the input
// possibly an envelope: it is JSON but not an audit event, not JSON at all (the CloudWatch
// export line form, base64) or not UTF-8 (gzip).
func Candidate(err error) bool {
	return errors.Is(err, auditevent.ErrNotAuditEvent) || errors.Is(err, auditevent.ErrNotJSON) || errors.Is(err, auditevent.ErrInvalidUTF8)
}

// maxDepth bounds nested envelopes (Firehose record -> gzip -> subscription -> event).
const maxDepth = 6

// Decoder unwraps envelopes. It reuses its buffers: not safe for concurrent use.
type Decoder struct {
	// MaxSize caps the size of decompressed or decoded input in bytes (0: 64 MiB).
	MaxSize int

	parsers [maxDepth + 3]fastjson.Parser
	evp     fastjson.Parser
	arena   fastjson.Arena
	out     []byte
	bufs    [maxDepth + 3][]byte
	gz      *gzip.Reader
	limit   *Limit
}

// SetLimit counts what the decoder decodes from now on against l (nil: only MaxSize per
// layer): a decode beyond it fails with an error wrapping ErrLimit or ErrBusy.
func (d *Decoder) SetLimit(l *Limit) { d.limit = l }

// Trim drops buffers larger than keep bytes, so that a pooled decoder does not hold on to
// what one large input made it grow to.
func (d *Decoder) Trim(keep int) {
	for i, b := range d.bufs {
		if cap(b) > keep {
			d.bufs[i] = nil
		}
	}
	if cap(d.out) > keep {
		d.out = nil
	}
}

// NewDecoder returns a decoder capping decompressed input at maxSize bytes (0: 64 MiB).
func NewDecoder(maxSize int) *Decoder { return &Decoder{MaxSize: maxSize} }

func (d *Decoder) maxSize() int {
	if d.MaxSize > 0 {
		return d.MaxSize
	}
	return 64 << 20
}

// Unwrap finds the audit events that data holds inside a cloud envelope and calls fn with
// each, in order: event is one audit.k8s.io Event (or EventList) as JSON with the
// Annotation added, valid only during the call. GKE entries, which hold no audit.k8s.io
// Event, are converted to one (see gke.go for what is mapped).
//
// Records that hold no audit event (other log categories, control messages, klog text) are
// skipped and counted in Stats. Input that is no envelope at all fails with ErrNotEnvelope;
// an error from fn stops the walk and is returned as is.
func (d *Decoder) Unwrap(data []byte, fn func(event []byte, o Origin) error) (Stats, error) {
	var st Stats
	err := d.unwrap(data, 0, "", &st, fn)
	return st, err
}

func (d *Decoder) unwrap(data []byte, depth int, via string, st *Stats, fn func([]byte, Origin) error) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: envelopes nested deeper than %d", ErrNotEnvelope, maxDepth)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return fmt.Errorf("%w: empty", ErrNotEnvelope)
	}
	switch c := data[0]; {
	case c == 0x1f && len(data) > 1 && data[1] == 0x8b:
		raw, err := d.gunzip(data, depth)
		if err != nil {
			return err
		}
		return d.values(raw, depth+1, join(via, "gzip"), st, fn)
	case c == 'H' && bytes.HasPrefix(data, []byte("H4sI")): // base64 of a gzip header
		raw, err := d.unbase64(data, depth)
		if err != nil {
			return err
		}
		return d.unwrap(raw, depth+1, join(via, "base64"), st, fn)
	case c >= '0' && c <= '9':
		return d.exportLine(data, depth, via, st, fn)
	case (c == '[' || c == '{') && concatenated(data):
		// Values back to back on one line: a Firehose object in S3, gunzipped.
		return d.values(data, depth, via, st, fn)
	case c == '[':
		v, err := d.parsers[depth].ParseBytes(data)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrNotEnvelope, err)
		}
		for _, x := range v.GetArray() {
			if err := d.value(x, depth, via, st, fn); err != nil {
				return err
			}
		}
		return nil
	case c == '{':
		v, err := d.parsers[depth].ParseBytes(data)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrNotEnvelope, err)
		}
		return d.value(v, depth, via, st, fn)
	}
	return ErrNotEnvelope
}

// values walks JSON values written back to back (Firehose concatenates records in the S3
// objects it writes; a gzip stream may hold several).
func (d *Decoder) values(data []byte, depth int, via string, st *Stats, fn func([]byte, Origin) error) error {
	for {
		data = bytes.TrimSpace(data)
		if len(data) == 0 {
			return nil
		}
		end := valueEnd(data)
		if end <= 0 || end == len(data) {
			return d.unwrap(data, depth, via, st, fn)
		}
		if err := d.unwrap(data[:end], depth, via, st, fn); err != nil {
			return err
		}
		data = data[end:]
	}
}

// concatenated reports whether data holds more than one JSON value.
func concatenated(data []byte) bool {
	end := valueEnd(data)
	return end > 0 && end < len(data)
}

// valueEnd returns the length of the JSON object or array that data starts with, or 0 when
// data starts with neither or does not close it.
func valueEnd(data []byte) int {
	if len(data) == 0 || (data[0] != '{' && data[0] != '[') {
		return 0
	}
	depth, inStr := 0, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inStr {
			switch c {
			case '\\':
				i++
			case '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return 0
}

func (d *Decoder) gunzip(data []byte, depth int) ([]byte, error) {
	var err error
	if d.gz == nil {
		d.gz, err = gzip.NewReader(bytes.NewReader(data))
	} else {
		err = d.gz.Reset(bytes.NewReader(data))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: gzip: %w", ErrNotEnvelope, err)
	}
	room := int64(d.maxSize())
	limited := false
	if d.limit != nil {
		if r := d.limit.room(); r < room {
			room, limited = r, true
		}
	}
	buf := bytes.NewBuffer(d.bufs[depth][:0])
	n, err := io.Copy(buf, io.LimitReader(d.gz, room+1))
	d.bufs[depth] = buf.Bytes()
	if err != nil {
		return nil, fmt.Errorf("%w: gzip: %w", ErrNotEnvelope, err)
	}
	if n > room {
		if limited {
			return nil, d.limit.exceeded(n)
		}
		return nil, fmt.Errorf("%w: decompressed envelope larger than %d bytes", auditevent.ErrTooLarge, d.maxSize())
	}
	if d.limit != nil {
		if err := d.limit.take(n); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

func (d *Decoder) unbase64(data []byte, depth int) ([]byte, error) {
	n := base64.StdEncoding.DecodedLen(len(data))
	if n > d.maxSize() {
		return nil, fmt.Errorf("%w: base64 envelope larger than %d bytes", auditevent.ErrTooLarge, d.maxSize())
	}
	if d.limit != nil {
		if err := d.limit.take(int64(n)); err != nil {
			return nil, err
		}
	}
	buf := d.bufs[depth]
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	m, err := base64.StdEncoding.Decode(buf, data)
	d.bufs[depth] = buf
	if err != nil {
		return nil, fmt.Errorf("%w: base64: %w", ErrNotEnvelope, err)
	}
	return buf[:m], nil
}

// exportLine reads "<timestamp> <event JSON>", a line of a CloudWatch Logs export to S3.
func (d *Decoder) exportLine(data []byte, depth int, via string, st *Stats, fn func([]byte, Origin) error) error {
	ts, rest, ok := bytes.Cut(data, []byte{' '})
	if !ok || len(ts) < 10 || !isTimestamp(ts) {
		return ErrNotEnvelope
	}
	rest = bytes.TrimSpace(rest)
	if len(rest) == 0 || rest[0] != '{' {
		return ErrNotEnvelope // a text log line, not an export of audit events
	}
	return d.event(rest, depth, Origin{Cloud: EKS, Envelope: join(via, "cloudwatch-export")}, st, fn)
}

// isTimestamp accepts RFC 3339 times and epoch numbers.
func isTimestamp(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c == '-' || c == ':' || c == 'T' || c == 'Z' || c == '.' || c == '+') {
			return false
		}
	}
	return true
}

// value dispatches one parsed JSON value on its members.
func (d *Decoder) value(v *fastjson.Value, depth int, via string, st *Stats, fn func([]byte, Origin) error) error {
	switch v.Type() {
	case fastjson.TypeArray:
		for _, x := range v.GetArray() {
			if err := d.value(x, depth, via, st, fn); err != nil {
				return err
			}
		}
		return nil
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		return d.unwrap(b, depth+1, via, st, fn)
	case fastjson.TypeObject:
	default:
		return ErrNotEnvelope
	}
	switch {
	case v.Exists("messageType") && v.Exists("logEvents"):
		return d.subscription(v, depth, via, st, fn)
	case v.Exists("protoPayload"):
		return d.logEntry(v, depth, via, st, fn)
	case v.Exists("category") && v.Exists("properties"):
		return d.azureRecord(v, depth, join(via, "diagnostic-record"), st, fn)
	case v.Exists("records"), v.Exists("Records"):
		recs := v.GetArray("records")
		if recs == nil {
			recs = v.GetArray("Records")
		}
		for _, r := range recs {
			if err := d.record(r, depth, via, st, fn); err != nil {
				return err
			}
		}
		return nil
	case v.Exists("awslogs", "data"): // Lambda
		return d.unwrap(v.GetStringBytes("awslogs", "data"), depth+1, join(via, "lambda"), st, fn)
	case v.Exists("message", "data"): // Pub/Sub push body
		return d.unwrap(v.GetStringBytes("message", "data"), depth+1, join(via, "pubsub-push"), st, fn)
	case v.Exists("events") && v.Get("events").Type() == fastjson.TypeArray: // aws logs filter-log-events
		o := Origin{Cloud: EKS, Envelope: join(via, "filter-log-events")}
		for _, e := range v.GetArray("events") {
			if err := d.logEvent(e, string(e.GetStringBytes("logStreamName")), depth, o, st, fn); err != nil {
				return err
			}
		}
		return nil
	case v.Exists("timestamp") && v.Exists("message"): // one CloudWatch log event
		return d.logEvent(v, string(v.GetStringBytes("logStream")), depth, Origin{Cloud: EKS, Envelope: join(via, "cloudwatch-logevent")}, st, fn)
	}
	return ErrNotEnvelope
}

// record is one element of a records array: an Azure diagnostic record, a Firehose HTTP
// endpoint record ({"data": base64}) or a Kinesis record ({"Data"} or {"kinesis":{"data"}}).
func (d *Decoder) record(r *fastjson.Value, depth int, via string, st *Stats, fn func([]byte, Origin) error) error {
	switch {
	case r.Exists("category"):
		return d.azureRecord(r, depth, join(via, "diagnostic-records"), st, fn)
	case r.Exists("data"):
		return d.dataRecord(r.GetStringBytes("data"), depth, join(via, "firehose"), st, fn)
	case r.Exists("Data"):
		return d.dataRecord(r.GetStringBytes("Data"), depth, join(via, "kinesis"), st, fn)
	case r.Exists("kinesis", "data"):
		return d.dataRecord(r.GetStringBytes("kinesis", "data"), depth, join(via, "kinesis"), st, fn)
	}
	st.skip("record of an unknown shape")
	return nil
}

// dataRecord decodes a base64 record; an empty one is allowed (Firehose) and holds nothing.
func (d *Decoder) dataRecord(b []byte, depth int, via string, st *Stats, fn func([]byte, Origin) error) error {
	if len(b) == 0 {
		return nil
	}
	raw, err := d.unbase64(b, depth+1)
	if err != nil {
		return err
	}
	// The decoded bytes live in bufs[depth+1]; unwrap them one level further down.
	return d.unwrap(raw, depth+2, via, st, fn)
}

// subscription reads a CloudWatch Logs subscription payload.
func (d *Decoder) subscription(v *fastjson.Value, depth int, via string, st *Stats, fn func([]byte, Origin) error) error {
	if mt := string(v.GetStringBytes("messageType")); mt != "DATA_MESSAGE" {
		st.skip("cloudwatch " + strings.ToLower(mt))
		return nil
	}
	o := Origin{Cloud: EKS, Envelope: join(via, "cloudwatch-subscription"), Cluster: EKSCluster(string(v.GetStringBytes("logGroup")))}
	stream := string(v.GetStringBytes("logStream"))
	for _, e := range v.GetArray("logEvents") {
		if err := d.logEvent(e, stream, depth, o, st, fn); err != nil {
			return err
		}
	}
	return nil
}

// logEvent reads one CloudWatch log event: message is the audit event as a string (or, as
// some forwarders re-emit it, as an object). Events of other streams of the cluster's log
// group (authenticator, scheduler, ...) are skipped.
func (d *Decoder) logEvent(e *fastjson.Value, stream string, depth int, o Origin, st *Stats, fn func([]byte, Origin) error) error {
	if stream != "" && !strings.HasPrefix(stream, "kube-apiserver-audit") {
		st.skip("cloudwatch stream other than kube-apiserver-audit")
		return nil
	}
	m := e.Get("message")
	switch {
	case m == nil:
		st.skip("cloudwatch log event without a message")
		return nil
	case m.Type() == fastjson.TypeObject:
		d.out = m.MarshalTo(d.out[:0])
		return d.event(d.out, depth, o, st, fn)
	case m.Type() == fastjson.TypeString:
		b, _ := m.StringBytes()
		if b = bytes.TrimSpace(b); len(b) == 0 || b[0] != '{' {
			st.skip("cloudwatch message that is not JSON")
			return nil
		}
		return d.event(b, depth, o, st, fn)
	}
	st.skip("cloudwatch message that is not JSON")
	return nil
}

// EKSCluster is <cluster> of the EKS log group /aws/eks/<cluster>/cluster, or "".
func EKSCluster(group string) string {
	rest, ok := strings.CutPrefix(group, "/aws/eks/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}

// azureRecord reads one Azure diagnostic record: properties.log holds the audit event as a
// string (or, tolerated, an object) for the categories kube-audit and kube-audit-admin.
func (d *Decoder) azureRecord(r *fastjson.Value, depth int, via string, st *Stats, fn func([]byte, Origin) error) error {
	cat := string(r.GetStringBytes("category"))
	if cat != "kube-audit" && cat != "kube-audit-admin" {
		st.skip("azure category " + cat)
		return nil
	}
	o := Origin{Cloud: AKS, Envelope: via, Cluster: aksCluster(string(r.GetStringBytes("resourceId")))}
	l := r.Get("properties", "log")
	switch {
	case l == nil:
		st.skip("azure record without properties.log")
		return nil
	case l.Type() == fastjson.TypeObject:
		d.out = l.MarshalTo(d.out[:0])
		return d.event(d.out, depth, o, st, fn)
	case l.Type() == fastjson.TypeString:
		b, _ := l.StringBytes()
		if b = bytes.TrimSpace(b); len(b) == 0 || b[0] != '{' {
			st.skip("azure properties.log that is not JSON")
			return nil
		}
		return d.event(b, depth, o, st, fn)
	}
	st.skip("azure properties.log that is not JSON")
	return nil
}

// aksCluster returns the last segment of a resource id .../managedClusters/<cluster>.
func aksCluster(id string) string {
	i := strings.LastIndex(strings.ToLower(id), "/managedclusters/")
	if i < 0 {
		return ""
	}
	name, _, _ := strings.Cut(id[i+len("/managedclusters/"):], "/")
	return strings.ToLower(name) // Azure upper-cases resource ids; AKS names are case-insensitive
}

// event adds the origin annotation to the audit event ev and passes it to fn. An event that
// is not a JSON object is passed as is: the caller's decoder reports it.
func (d *Decoder) event(ev []byte, depth int, o Origin, st *Stats, fn func([]byte, Origin) error) error {
	st.Events++
	v, err := d.evp.ParseBytes(ev)
	if err != nil || v.Type() != fastjson.TypeObject {
		return fn(ev, o)
	}
	d.arena.Reset()
	ann := v.Get("annotations")
	if ann == nil || ann.Type() != fastjson.TypeObject {
		ann = d.arena.NewObject()
		v.Set("annotations", ann)
	}
	ann.Set(Annotation, d.arena.NewString(o.Value()))
	d.out = v.MarshalTo(d.out[:0])
	return fn(d.out, o)
}

func join(via, layer string) string {
	if via == "" {
		return layer
	}
	return via + "/" + layer
}
