package auditlensv1_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

func TestFindingBatchMessageTypeIsItsProtobufName(t *testing.T) {
	got := string((&auditlensv1.FindingBatch{}).ProtoReflect().Descriptor().FullName())
	if got != auditlensv1.FindingBatchMessageType {
		t.Errorf("FindingBatch is %q, FindingBatchMessageType says %q", got, auditlensv1.FindingBatchMessageType)
	}
}

func TestHeartbeatMessageTypeIsItsProtobufName(t *testing.T) {
	got := string((&auditlensv1.Heartbeat{}).ProtoReflect().Descriptor().FullName())
	if got != auditlensv1.HeartbeatMessageType {
		t.Errorf("Heartbeat is %q, HeartbeatMessageType says %q", got, auditlensv1.HeartbeatMessageType)
	}
}

// TestFindingBatchIsConcatenatedFindings pins the wire format producers may build by hand:
// a FindingBatch is each Finding's bytes as field 1, one after the other.
func TestFindingBatchIsConcatenatedFindings(t *testing.T) {
	fs := []*auditlensv1.Finding{
		{RuleId: "psp", Cluster: "prod", AuditId: "a1", Severity: auditlensv1.Severity_SEVERITY_CRITICAL},
		{RuleId: "removed-api", Cluster: "prod", AuditId: "a2", RemovedIn: "1.22",
			Evidence: []*auditlensv1.Evidence{{Path: "objectRef.apiVersion", Value: "v1beta1"}}},
	}
	var byHand []byte
	for _, f := range fs {
		b, err := proto.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		byHand = protowire.AppendTag(byHand, 1, protowire.BytesType)
		byHand = protowire.AppendBytes(byHand, b)
	}
	want, err := proto.Marshal(&auditlensv1.FindingBatch{Findings: fs})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(byHand, want) {
		t.Errorf("hand-built batch differs from proto.Marshal:\n%x\n%x", byHand, want)
	}
	var back auditlensv1.FindingBatch
	if err := proto.Unmarshal(byHand, &back); err != nil || len(back.Findings) != 2 || !proto.Equal(back.Findings[1], fs[1]) {
		t.Errorf("decode: %v, %d findings", err, len(back.Findings))
	}
}

func TestEventBatchMessageTypeIsItsProtobufName(t *testing.T) {
	got := string((&auditlensv1.EventBatch{}).ProtoReflect().Descriptor().FullName())
	if got != auditlensv1.EventBatchMessageType {
		t.Errorf("EventBatch is %q, EventBatchMessageType says %q", got, auditlensv1.EventBatchMessageType)
	}
}
