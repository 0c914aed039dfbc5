package store

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// Block is findings laid out as the columns of the findings table, ready for one insert
// (Store.WriteBlock). The zero value is an empty block; Reset empties one for reuse, keeping
// its memory.
//
// AppendWire fills it straight from a Finding's protobuf bytes, with no Finding, timestamp,
// evidence or string allocated per finding, and the block holds no pointers per finding
// (each string column is one byte buffer with end offsets), so the garbage collector has
// nothing to trace in it: that is what lets one report process decode and hand over more
// than 100k findings/s.
type Block struct {
	// NotAfter is the last event time (Unix seconds) AppendWire takes; 0 means MaxEventTime.
	// The writer sets it to its clock plus a margin, so a finding dated far ahead (a wrong
	// clock, a forged event) is dead-lettered rather than the cluster's newest event for good.
	NotAfter int64
	// NotBefore is the first event time (Unix seconds) AppendWire takes; 0 means any. The
	// writer sets it to the first second the retention keeps: an older finding would be
	// deleted at once, and its rollup rows, which name its caller, would outlive it.
	NotBefore int64

	n   int
	str [numStrCols]strCol
	sev []int32
	// conf holds the Confidence enum numbers.
	conf []int32
	// times holds each finding's event time in Unix seconds, or noTime.
	times []int64
	// received holds each finding's request_received (Unix seconds, 0 for none).
	received []uint32
	codes    []int32
	keys     []uint32
	// evPath and evValue hold the evidence of every finding in order; finding i's ends at
	// evEnd[i].
	evPath, evValue strCol
	evEnd           []int

	// lastRemoved and lastKey memoise VersionKey: consecutive findings mostly share removed_in.
	lastRemoved string
	lastKey     uint32
}

// noTime marks a finding without event time: it takes the insert time, as WriteFindings
// always did.
const noTime = math.MinInt64

// strCol is a column of strings in one buffer: value i is buf[end[i-1]:end[i]].
type strCol struct {
	buf []byte
	end []int
}

func (c *strCol) append(v []byte) {
	c.buf = append(c.buf, v...)
	c.end = append(c.end, len(c.buf))
}

func (c *strCol) appendString(v string) {
	c.buf = append(c.buf, v...)
	c.end = append(c.end, len(c.buf))
}

func (c *strCol) value(i int) []byte {
	start := 0
	if i > 0 {
		start = c.end[i-1]
	}
	return c.buf[start:c.end[i]:c.end[i]]
}

func (c *strCol) truncate(n int) {
	if n >= len(c.end) {
		return
	}
	c.end = c.end[:n]
	if n == 0 {
		c.buf = c.buf[:0]
	} else {
		c.buf = c.buf[:c.end[n-1]]
	}
}

// The string columns of the findings table that hold a Finding string field as it is.
const (
	colRule = iota
	colCluster
	colAudit
	colVerb
	colURI
	colGroup
	colVersion
	colResource
	colSub
	colNamespace
	colName
	colUser
	colAgent
	colIP
	colDeprecated
	colRemoved
	colReplacement
	colMessage
	colStage
	colNode
	numStrCols
)

// Field numbers of auditlens.v1.Finding (proto/auditlens/v1/finding.proto) that are not
// plain strings.
const (
	fieldSeverity     = 2
	fieldEventTime    = 5
	fieldResponseCode = 17
	fieldEvidence     = 22
	fieldConfidence   = 25
	fieldReceived     = 26
)

// strFields maps a Finding field number to its string column, -1 for the other fields.
var strFields = [...]int8{
	1: colRule, 3: colCluster, 4: colAudit, 6: colVerb, 7: colURI, 8: colGroup, 9: colVersion,
	10: colResource, 11: colSub, 12: colNamespace, 13: colName, 14: colUser, 15: colAgent,
	16: colIP, 18: colDeprecated, 19: colRemoved, 20: colReplacement, 21: colMessage,
	23: colStage, 24: colNode,
	0: -1, 2: -1, 5: -1, 17: -1, 22: -1, 25: -1, 26: -1,
}

// Len is the number of findings in the block.
func (b *Block) Len() int { return b.n }

// Reset empties the block, keeping its memory.
func (b *Block) Reset() { b.truncate(0) }

// truncate drops the findings from the n-th on.
func (b *Block) truncate(n int) {
	if n >= b.n {
		return
	}
	for i := range b.str {
		b.str[i].truncate(n)
	}
	b.sev, b.conf, b.times, b.codes, b.keys = b.sev[:n], b.conf[:n], b.times[:n], b.codes[:n], b.keys[:n]
	b.received = b.received[:n]
	ev := 0
	if n > 0 {
		ev = b.evEnd[n-1]
	}
	b.evEnd = b.evEnd[:n]
	b.evPath.truncate(ev)
	b.evValue.truncate(ev)
	b.n = n
}

// Append adds f as it is (no identity check, strings need not be UTF-8).
func (b *Block) Append(f *auditlensv1.Finding) {
	s := &b.str
	s[colRule].appendString(f.GetRuleId())
	s[colCluster].appendString(f.GetCluster())
	s[colAudit].appendString(f.GetAuditId())
	s[colVerb].appendString(f.GetVerb())
	s[colURI].appendString(f.GetRequestUri())
	s[colGroup].appendString(f.GetApiGroup())
	s[colVersion].appendString(f.GetApiVersion())
	s[colResource].appendString(f.GetResource())
	s[colSub].appendString(f.GetSubresource())
	s[colNamespace].appendString(f.GetNamespace())
	s[colName].appendString(f.GetName())
	s[colUser].appendString(f.GetUsername())
	s[colAgent].appendString(f.GetUserAgent())
	s[colIP].appendString(f.GetSourceIp())
	s[colDeprecated].appendString(f.GetDeprecatedIn())
	s[colRemoved].appendString(f.GetRemovedIn())
	s[colReplacement].appendString(f.GetReplacement())
	s[colMessage].appendString(f.GetMessage())
	s[colStage].appendString(f.GetStage())
	s[colNode].appendString(f.GetNode())
	for _, e := range f.GetEvidence() {
		b.evPath.appendString(e.GetPath())
		b.evValue.appendString(e.GetValue())
	}
	var secs int64
	var nanos int32
	if ts := f.GetEventTime(); ts != nil {
		secs, nanos = ts.GetSeconds(), ts.GetNanos()
	}
	b.finish(int32(f.GetSeverity()), int32(f.GetConfidence()), f.GetResponseCode(), secs, nanos,
		uint32(min(max(f.GetRequestReceived(), 0), MaxEventTime)), f.GetRemovedIn())
}

// finish adds the columns of the finding whose strings and evidence were just appended.
func (b *Block) finish(sev, conf, code int32, secs int64, nanos int32, received uint32, removed string) {
	b.sev = append(b.sev, sev)
	b.received = append(b.received, received)
	b.conf = append(b.conf, conf)
	b.codes = append(b.codes, code)
	t := int64(noTime)
	if secs != 0 || nanos != 0 {
		t = time.Unix(secs, int64(nanos)).Truncate(time.Second).Unix()
	}
	b.times = append(b.times, t)
	if removed != b.lastRemoved || b.n == 0 {
		b.lastRemoved, b.lastKey = removed, VersionKey(removed)
	}
	b.keys = append(b.keys, b.lastKey)
	b.evEnd = append(b.evEnd, len(b.evPath.end))
	b.n++
}

// ErrNoIdentity is returned by AppendWire for a finding without cluster, audit_id or rule_id.
var ErrNoIdentity = errors.New("finding without cluster, audit_id or rule_id")

// ErrEventTime is returned by AppendWire for a finding whose event time the store cannot
// keep as it is (before 1970, past DateTime's 2106) or that lies after the block's NotAfter:
// stored, it would make a chDB INSERT fail for the whole batch, be wrapped on old servers, or
// stand as the cluster's newest event for good.
var ErrEventTime = errors.New("event time out of range")

// ErrExpired is what an ExpiredError is (errors.Is).
var ErrExpired = errors.New("older than the retention")

// ExpiredError is returned by AppendWire for a finding older than the block's NotBefore: past
// the retention when it arrives.
type ExpiredError struct {
	// At is the finding's event time; KeptFrom the block's NotBefore.
	At, KeptFrom time.Time
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("%v: %s (kept from %s)", ErrExpired, e.At.UTC().Format(time.RFC3339), e.KeptFrom.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrExpired) hold.
func (e *ExpiredError) Is(target error) bool { return target == ErrExpired }

// MaxEventTime is the last second a DateTime column holds (2106-02-07T06:28:15Z).
const MaxEventTime = math.MaxUint32

// AppendWire decodes one auditlens.v1.Finding in protobuf wire format and adds it. A finding
// without a cluster takes cluster. It accepts and rejects what proto.Unmarshal does (unknown
// fields skipped, strings must be UTF-8, a singular field given twice keeps the last value,
// a message field given twice is merged) and also rejects a finding without identity
// (ErrNoIdentity). On error the block is unchanged. The block keeps no reference to data.
func (b *Block) AppendWire(data []byte, cluster string) error {
	var w wireFinding
	evStart := len(b.evPath.end)
	err := b.decode(&w, data)
	if err == nil && len(w.str[colCluster]) == 0 {
		w.str[colCluster] = []byte(cluster)
	}
	if err == nil && (len(w.str[colCluster]) == 0 || len(w.str[colAudit]) == 0 || len(w.str[colRule]) == 0) {
		err = ErrNoIdentity
	}
	if err == nil && (w.seconds != 0 || w.nanos != 0) && (w.seconds < 0 || w.seconds > b.notAfter()) {
		err = fmt.Errorf("%w: %s (kept: 1970-01-01 to %s)", ErrEventTime,
			time.Unix(w.seconds, int64(w.nanos)).UTC().Format(time.RFC3339), time.Unix(b.notAfter(), 0).UTC().Format(time.RFC3339))
	}
	if err == nil && (w.received < 0 || w.received > MaxEventTime) {
		err = fmt.Errorf("%w: request_received %d (kept: 0 to %d)", ErrEventTime, w.received, int64(MaxEventTime))
	}
	if err == nil && (w.seconds != 0 || w.nanos != 0) && w.seconds < b.NotBefore {
		err = &ExpiredError{At: time.Unix(w.seconds, int64(w.nanos)), KeptFrom: time.Unix(b.NotBefore, 0)}
	}
	if err != nil {
		b.evPath.truncate(evStart)
		b.evValue.truncate(evStart)
		return err
	}
	for i := range b.str {
		b.str[i].append(w.str[i])
	}
	removed := b.lastRemoved
	if string(w.str[colRemoved]) != removed || b.n == 0 {
		removed = string(w.str[colRemoved])
	}
	b.finish(w.sev, w.conf, w.code, w.seconds, w.nanos, uint32(w.received), removed)
	return nil
}

// notAfter is the last event time AppendWire takes, in Unix seconds.
func (b *Block) notAfter() int64 { return LastKept(b.NotAfter) }

// LastKept is the last event time (Unix seconds) the store keeps when nothing after notAfter
// is wanted (0: no such bound): notAfter, never past MaxEventTime. The writer bounds the
// minutes of heartbeats with it too.
func LastKept(notAfter int64) int64 {
	if notAfter != 0 {
		return min(notAfter, MaxEventTime)
	}
	return MaxEventTime
}

// wireFinding is one decoded finding before it is added to the columns; its strings are
// slices of the data it was decoded from.
type wireFinding struct {
	str             [numStrCols][]byte
	sev, conf, code int32
	seconds         int64
	nanos           int32
	received        int64
}

// decode reads data into w, appending evidence to the block's evidence columns.
func (b *Block) decode(w *wireFinding, data []byte) error {
	r := wireReader{s: data}
	for !r.done() {
		num, typ, err := r.tag()
		if err != nil {
			return err
		}
		switch {
		case typ == protowire.BytesType && int(num) < len(strFields) && strFields[num] >= 0:
			v, err := r.bytes()
			if err != nil {
				return err
			}
			if !utf8.Valid(v) {
				return fmt.Errorf("field %d: invalid UTF-8", num)
			}
			w.str[strFields[num]] = v
		case typ == protowire.VarintType && (num == fieldSeverity || num == fieldConfidence || num == fieldResponseCode || num == fieldReceived):
			v, err := r.varint()
			if err != nil {
				return err
			}
			switch num {
			case fieldSeverity:
				w.sev = int32(v)
			case fieldConfidence:
				w.conf = int32(v)
			case fieldReceived:
				w.received = int64(v)
			default:
				w.code = int32(v)
			}
		case typ == protowire.BytesType && num == fieldEventTime:
			v, err := r.bytes()
			if err != nil {
				return err
			}
			if err := decodeTimestamp(w, v); err != nil {
				return err
			}
		case typ == protowire.BytesType && num == fieldEvidence:
			v, err := r.bytes()
			if err != nil {
				return err
			}
			path, value, err := decodeEvidence(v)
			if err != nil {
				return err
			}
			b.evPath.append(path)
			b.evValue.append(value)
		default:
			if err := r.skip(num, typ); err != nil {
				return err
			}
		}
	}
	return nil
}

// decodeTimestamp merges a google.protobuf.Timestamp into w, as proto.Unmarshal merges a
// message field that occurs more than once.
func decodeTimestamp(w *wireFinding, data []byte) error {
	r := wireReader{s: data}
	for !r.done() {
		num, typ, err := r.tag()
		if err != nil {
			return err
		}
		if typ == protowire.VarintType && (num == 1 || num == 2) {
			v, err := r.varint()
			if err != nil {
				return err
			}
			if num == 1 {
				w.seconds = int64(v)
			} else {
				w.nanos = int32(v)
			}
			continue
		}
		if err := r.skip(num, typ); err != nil {
			return err
		}
	}
	return nil
}

// decodeEvidence reads an auditlens.v1.Evidence.
func decodeEvidence(data []byte) (path, value []byte, err error) {
	r := wireReader{s: data}
	for !r.done() {
		num, typ, err := r.tag()
		if err != nil {
			return nil, nil, err
		}
		if typ == protowire.BytesType && (num == 1 || num == 2) {
			v, err := r.bytes()
			if err != nil {
				return nil, nil, err
			}
			if !utf8.Valid(v) {
				return nil, nil, fmt.Errorf("evidence field %d: invalid UTF-8", num)
			}
			if num == 1 {
				path = v
			} else {
				value = v
			}
			continue
		}
		if err := r.skip(num, typ); err != nil {
			return nil, nil, err
		}
	}
	return path, value, nil
}

// AppendBatch decodes an auditlens.v1.FindingBatch and adds its findings; it returns how
// many it added. A finding that AppendWire rejects is handed to reject (its index in the
// batch, its bytes, why) and skipped. When the batch itself is malformed, or reject returns
// an error, the block is left as it was and the error is returned.
func (b *Block) AppendBatch(data []byte, cluster string, reject func(i int, finding []byte, err error) error) (int, error) {
	start := b.n
	r := wireReader{s: data}
	for i := 0; !r.done(); {
		num, typ, err := r.tag()
		if err == nil && (num != 1 || typ != protowire.BytesType) {
			err = r.skip(num, typ)
			if err == nil {
				continue
			}
		}
		var f []byte
		if err == nil {
			f, err = r.bytes()
		}
		if err == nil {
			if ferr := b.AppendWire(f, cluster); ferr != nil {
				err = reject(i, f, ferr)
			}
			i++
		}
		if err != nil {
			b.truncate(start)
			return 0, err
		}
	}
	return b.n - start, nil
}

// severityName is the severity column value: the enum name without its prefix, lower case,
// "" for SEVERITY_UNSPECIFIED, the number for values this build does not know.
func severityName(v int32) string { return enumColumn(v, severityNames) }

func confidenceName(v int32) string { return enumColumn(v, confidenceNames) }

var (
	severityNames   = enumNames(auditlensv1.Severity_name, "SEVERITY_")
	confidenceNames = enumNames(auditlensv1.Confidence_name, "CONFIDENCE_")
)

func enumNames(names map[int32]string, prefix string) map[int32]string {
	out := make(map[int32]string, len(names))
	for v, n := range names {
		out[v] = enumName(n, prefix)
	}
	return out
}

func enumColumn(v int32, names map[int32]string) string {
	if n, ok := names[v]; ok {
		return n
	}
	return strings.ToLower(strconv.Itoa(int(v)))
}

// row is finding i as a row of FindingColumns (for engines that take rows).
func (b *Block) row(i int, ingested time.Time) []any {
	s := func(col int) string { return string(b.str[col].value(i)) }
	t := ingested
	if b.times[i] != noTime {
		t = time.Unix(b.times[i], 0).UTC()
	}
	start := 0
	if i > 0 {
		start = b.evEnd[i-1]
	}
	paths := make([]string, 0, b.evEnd[i]-start)
	values := make([]string, 0, b.evEnd[i]-start)
	for j := start; j < b.evEnd[i]; j++ {
		paths = append(paths, string(b.evPath.value(j)))
		values = append(values, string(b.evValue.value(j)))
	}
	return []any{s(colRule), severityName(b.sev[i]), s(colCluster), s(colAudit), t, s(colVerb), s(colURI),
		s(colGroup), s(colVersion), s(colResource), s(colSub), s(colNamespace), s(colName), s(colUser),
		s(colAgent), s(colIP), b.codes[i], s(colDeprecated), s(colRemoved), b.keys[i], s(colReplacement),
		s(colMessage), s(colStage), s(colNode), confidenceName(b.conf[i]), paths, values, ingested, b.received[i]}
}
