package store

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

var ingested = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func sample() []*auditlensv1.Finding {
	full := &auditlensv1.Finding{RuleId: "removed-api", Severity: auditlensv1.Severity_SEVERITY_CRITICAL,
		Cluster: "prod", AuditId: "5c1d0a7e-3f0b-4a8e-9d51-000000000001",
		EventTime: timestamppb.New(time.Date(2026, 11, 23, 8, 1, 2, 999_999_999, time.UTC)),
		Verb:      "list", RequestUri: "/apis/extensions/v1beta1/ingresses?limit=500", ApiGroup: "extensions",
		ApiVersion: "v1beta1", Resource: "ingresses", Subresource: "status", Namespace: "team-a", Name: "web",
		Username: "system:serviceaccount:team-a:ctl", UserAgent: "ctl/v0.1 <script>", SourceIp: "10.0.0.1",
		ResponseCode: 403, DeprecatedIn: "1.14", RemovedIn: "1.22", Replacement: "networking.k8s.io/v1",
		Message: "migrate: ünïcödé ✓", Stage: "ResponseComplete", Node: "master-1",
		Confidence: auditlensv1.Confidence_CONFIDENCE_MEDIUM, RequestReceived: 1_795_420_862,
		Evidence: []*auditlensv1.Evidence{{Path: "objectRef.apiGroup", Value: "extensions"},
			{Path: "objectRef.apiVersion", Value: "v1beta1"}, {}}}
	return []*auditlensv1.Finding{
		full,
		{RuleId: "psp", Cluster: "prod", AuditId: "a2"}, // no event time, no evidence
		{RuleId: "psp", Cluster: "prod", AuditId: "a3", Severity: 42, Confidence: -7, ResponseCode: -1,
			RemovedIn: "v1.25.3", EventTime: timestamppb.New(time.Unix(0, 5))},
		{RuleId: "legacy-sa-token", Cluster: "staging", AuditId: "a4", RemovedIn: "1.22",
			Evidence: []*auditlensv1.Evidence{{Path: "p", Value: "v"}}},
	}
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rows(b *Block) [][]any {
	out := make([][]any, b.Len())
	for i := range out {
		out[i] = b.row(i, ingested)
	}
	return out
}

func TestAppendWireMatchesAppend(t *testing.T) {
	var typed, wire Block
	for _, f := range sample() {
		typed.Append(f)
		if err := wire.AppendWire(mustMarshal(t, f), "other"); err != nil {
			t.Fatalf("%s: %v", f.AuditId, err)
		}
	}
	if got, want := rows(&wire), rows(&typed); !reflect.DeepEqual(got, want) {
		t.Errorf("decoded from the wire:\n%v\nwant\n%v", got, want)
	}
	r := rows(&wire)
	if r[0][1] != "critical" || r[0][24] != "medium" || r[1][1] != "" || r[2][1] != "42" || r[2][24] != "-7" {
		t.Errorf("enum columns: %q %q %q %q %q", r[0][1], r[0][24], r[1][1], r[2][1], r[2][24])
	}
	if r[0][4] != time.Date(2026, 11, 23, 8, 1, 2, 0, time.UTC) || r[1][4] != ingested || r[2][4] != time.Unix(0, 0).UTC() {
		t.Errorf("event times %v, %v, %v", r[0][4], r[1][4], r[2][4])
	}
	if r[0][19] != uint32(1022) || r[2][19] != uint32(1025) || r[1][19] != uint32(0) || r[3][19] != uint32(1022) {
		t.Errorf("removed_in_key %v %v %v %v", r[0][19], r[1][19], r[2][19], r[3][19])
	}
	if r[0][28] != uint32(1_795_420_862) || r[1][28] != uint32(0) {
		t.Errorf("request_received %v %v", r[0][28], r[1][28])
	}
	if !reflect.DeepEqual(r[0][25], []string{"objectRef.apiGroup", "objectRef.apiVersion", ""}) || len(r[1][25].([]string)) != 0 ||
		!reflect.DeepEqual(r[3][26], []string{"v"}) {
		t.Errorf("evidence %q %q %q", r[0][25], r[1][25], r[3][26])
	}
}

func TestAppendWireEdgeCases(t *testing.T) {
	id := func(b []byte) []byte {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, "psp")
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		return protowire.AppendString(b, "a1")
	}
	str := func(b []byte, num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
	}
	ts := func(sec, nanos int64) []byte {
		var m []byte
		if sec != 0 {
			m = protowire.AppendVarint(protowire.AppendTag(m, 1, protowire.VarintType), uint64(sec))
		}
		if nanos != 0 {
			m = protowire.AppendVarint(protowire.AppendTag(m, 2, protowire.VarintType), uint64(nanos))
		}
		return m
	}
	cases := []struct {
		name  string
		data  []byte
		check func(t *testing.T, r []any)
	}{
		{"the last of a repeated string field wins", str(str(id(nil), 13, "first"), 13, "second"),
			func(t *testing.T, r []any) {
				if r[12] != "second" {
					t.Errorf("name %q", r[12])
				}
			}},
		{"event_time given twice is merged", str(str(id(nil), 5, string(ts(1_700_000_000, 0))), 5, string(ts(0, 5))),
			func(t *testing.T, r []any) {
				if r[4] != time.Unix(1_700_000_000, 0).UTC() {
					t.Errorf("event_time %v", r[4])
				}
			}},
		{"unknown fields of every wire type are skipped", func() []byte {
			b := id(nil)
			b = protowire.AppendVarint(protowire.AppendTag(b, 99, protowire.VarintType), 1<<40)
			b = protowire.AppendFixed32(protowire.AppendTag(b, 100, protowire.Fixed32Type), 7)
			b = protowire.AppendFixed64(protowire.AppendTag(b, 101, protowire.Fixed64Type), 7)
			b = str(b, 102, "\xff not UTF-8 but unknown")
			b = protowire.AppendTag(b, 103, protowire.StartGroupType)
			b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), 3)
			b = protowire.AppendTag(b, 103, protowire.EndGroupType)
			return str(b, 3, "prod")
		}(), func(t *testing.T, r []any) {
			if r[2] != "prod" {
				t.Errorf("cluster %q", r[2])
			}
		}},
		{"a known field with another wire type is skipped", protowire.AppendVarint(protowire.AppendTag(id(nil), 13, protowire.VarintType), 5),
			func(t *testing.T, r []any) {
				if r[12] != "" || r[2] != "fallback" {
					t.Errorf("name %q, cluster %q", r[12], r[2])
				}
			}},
		{"invalid UTF-8 in a string field", str(id(nil), 15, "agent \xff"), nil},
		{"invalid UTF-8 in evidence", str(id(nil), 22, string(str(nil, 2, "\xc3"))), nil},
		{"truncated string", id(nil)[:4], nil},
		{"truncated varint", append(id(nil), 0x88, 0x80), nil},
		{"field number 0", append(id(nil), 0x02, 0x00), nil},
		{"end group without start", protowire.AppendTag(id(nil), 7, protowire.EndGroupType), nil},
		{"group ended by another number", protowire.AppendTag(protowire.AppendTag(id(nil), 7, protowire.StartGroupType), 8, protowire.EndGroupType), nil},
		{"wire type 6", append(id(nil), 0x0e), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b Block
			b.Append(sample()[0])
			before := rows(&b)
			err := b.AppendWire(c.data, "fallback")
			var f auditlensv1.Finding
			perr := proto.Unmarshal(c.data, &f)
			if (err == nil) != (perr == nil) {
				t.Fatalf("AppendWire: %v; proto.Unmarshal: %v", err, perr)
			}
			if err != nil {
				if !reflect.DeepEqual(rows(&b), before) || len(b.evPath.end) != 3 {
					t.Errorf("a rejected finding changed the block")
				}
				return
			}
			c.check(t, rows(&b)[1])
		})
	}
}

// request_received is part of a finding's identity and a DateTime's second: before 1970 or
// past 2106 it is refused like an event time out of range, not wrapped.
func TestAppendWireRequestReceivedInRange(t *testing.T) {
	for _, v := range []int64{-1, MaxEventTime + 1, -1 << 62} {
		var b Block
		f := &auditlensv1.Finding{RuleId: "psp", Cluster: "prod", AuditId: "a1", RequestReceived: v}
		if err := b.AppendWire(mustMarshal(t, f), ""); !errors.Is(err, ErrEventTime) || b.Len() != 0 {
			t.Errorf("request_received %d: %v (%d findings), want ErrEventTime", v, err, b.Len())
		}
	}
	var b Block
	f := &auditlensv1.Finding{RuleId: "psp", Cluster: "prod", AuditId: "a1", RequestReceived: MaxEventTime}
	if err := b.AppendWire(mustMarshal(t, f), ""); err != nil || rows(&b)[0][28] != uint32(MaxEventTime) {
		t.Errorf("request_received at the last second: %v", err)
	}
}

func TestAppendWireNeedsIdentity(t *testing.T) {
	var b Block
	for _, f := range []*auditlensv1.Finding{
		{Cluster: "prod", AuditId: "a1", Evidence: []*auditlensv1.Evidence{{Path: "p"}}},
		{RuleId: "psp", Cluster: "prod"},
		{RuleId: "psp", AuditId: "a1"},
	} {
		if err := b.AppendWire(mustMarshal(t, f), ""); !errors.Is(err, ErrNoIdentity) {
			t.Errorf("%v: %v, want ErrNoIdentity", f, err)
		}
	}
	if b.Len() != 0 || len(b.evPath.end) != 0 || len(b.evPath.buf) != 0 {
		t.Errorf("block holds %d findings, %d evidence", b.Len(), len(b.evPath.end))
	}
	if err := b.AppendWire(mustMarshal(t, &auditlensv1.Finding{RuleId: "psp", AuditId: "a1"}), "prod"); err != nil || string(b.str[colCluster].value(0)) != "prod" {
		t.Errorf("fallback cluster: %v %q", err, b.str[colCluster].buf)
	}
}

func TestAppendBatch(t *testing.T) {
	fs := sample()
	entry := func(b, f []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, 1, protowire.BytesType), f)
	}
	var data []byte
	data = entry(data, mustMarshal(t, fs[0]))
	data = entry(data, mustMarshal(t, &auditlensv1.Finding{RuleId: "psp"}))              // no identity
	data = protowire.AppendVarint(protowire.AppendTag(data, 9, protowire.VarintType), 1) // unknown field
	data = entry(data, []byte{0x0a, 0x10, 'x'})                                          // truncated finding
	data = entry(data, mustMarshal(t, fs[1]))

	var b, want Block
	b.Append(fs[2]) // findings already in the block stay
	want.Append(fs[2])
	want.Append(fs[0])
	want.Append(fs[1])
	var rejected []int
	n, err := b.AppendBatch(data, "prod", func(i int, f []byte, err error) error {
		rejected = append(rejected, i)
		return nil
	})
	if err != nil || n != 2 || !reflect.DeepEqual(rejected, []int{1, 2}) {
		t.Fatalf("AppendBatch: %d findings, %v; rejected %v", n, err, rejected)
	}
	if !reflect.DeepEqual(rows(&b), rows(&want)) {
		t.Errorf("block:\n%v\nwant\n%v", rows(&b), rows(&want))
	}
	for name, bad := range map[string][]byte{
		"truncated batch":  data[:len(data)-3],
		"not protobuf":     []byte("\xff\xff\xff\xff"),
		"reject refuses":   entry(mustMarshal(t, &auditlensv1.FindingBatch{Findings: fs}), []byte{0xff}),
		"wire type 7 late": append(entry(nil, mustMarshal(t, fs[0])), 0x0f),
	} {
		before := rows(&b)
		errStop := errors.New("stop")
		if _, err := b.AppendBatch(bad, "prod", func(int, []byte, error) error { return errStop }); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if !reflect.DeepEqual(rows(&b), before) || len(b.evPath.end) != b.evEnd[b.Len()-1] {
			t.Errorf("%s: the block changed", name)
		}
	}
}

func TestBlockReuse(t *testing.T) {
	var b, fresh Block
	fs := sample()
	for _, f := range fs {
		b.Append(f)
	}
	b.truncate(2)
	b.Append(fs[3])
	fresh.Append(fs[0])
	fresh.Append(fs[1])
	fresh.Append(fs[3])
	if !reflect.DeepEqual(rows(&b), rows(&fresh)) {
		t.Errorf("after truncate:\n%v\nwant\n%v", rows(&b), rows(&fresh))
	}
	b.Reset()
	if b.Len() != 0 || len(b.evPath.end) != 0 || len(b.evEnd) != 0 || len(b.str[colAudit].buf) != 0 {
		t.Fatalf("after Reset: %d findings, %d evidence", b.Len(), len(b.evPath.end))
	}
	b.Append(fs[2])
	fresh.Reset()
	fresh.Append(fs[2])
	if !reflect.DeepEqual(rows(&b), rows(&fresh)) {
		t.Errorf("after Reset:\n%v\nwant\n%v", rows(&b), rows(&fresh))
	}
}

// FuzzAppendWire: AppendWire accepts exactly what proto.Unmarshal accepts (plus the identity
// check), and what it accepts becomes the same row as the decoded Finding.
func FuzzAppendWire(f *testing.F) {
	for _, fd := range sample() {
		f.Add(mustMarshal(f, fd))
	}
	f.Add([]byte{0x0a, 0x01, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Block
		err := b.AppendWire(data, "fallback")
		var fd auditlensv1.Finding
		if perr := proto.Unmarshal(data, &fd); perr != nil {
			if err == nil {
				t.Fatalf("AppendWire accepted what proto.Unmarshal rejects: %v", perr)
			}
			return
		}
		if fd.Cluster == "" {
			fd.Cluster = "fallback"
		}
		if fd.RuleId == "" || fd.AuditId == "" {
			if !errors.Is(err, ErrNoIdentity) {
				t.Fatalf("finding without identity: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("AppendWire rejected a finding proto.Unmarshal accepts: %v", err)
		}
		var want Block
		want.Append(&fd)
		if !reflect.DeepEqual(rows(&b), rows(&want)) {
			t.Fatalf("row from the wire:\n%v\nfrom the Finding:\n%v", rows(&b), rows(&want))
		}
	})
}

// BenchmarkAppendWire: decoding findings from protobuf into a block, from the wire
// (AppendWire) and, in the same run, through proto.Unmarshal and Append (the baseline).
//
//	go test -run '^$' -bench AppendWire ./store/
func BenchmarkAppendWire(b *testing.B) {
	data := mustMarshal(b, sample()[0])
	const perBlock = 10000
	b.Run("wire", func(b *testing.B) {
		var blk Block
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if blk.Len() == perBlock {
				blk.Reset()
			}
			if err := blk.AppendWire(data, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto.Unmarshal+Append", func(b *testing.B) {
		var blk Block
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if blk.Len() == perBlock {
				blk.Reset()
			}
			var f auditlensv1.Finding
			if err := proto.Unmarshal(data, &f); err != nil {
				b.Fatal(err)
			}
			blk.Append(&f)
		}
	})
}
