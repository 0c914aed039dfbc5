// Package envelopetest builds the EKS envelopes of the CloudWatch Logs documentation around
// real audit events: no genuine EKS envelope is public, so tests wrap genuine events in the
// documented shapes (shared/testdata/managed/README.md, "Delivery formats").
package envelopetest

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Cluster is the cluster named by the built log group /aws/eks/<Cluster>/cluster.
const Cluster = "built-eks"

// LogGroup is the built log group.
const LogGroup = "/aws/eks/" + Cluster + "/cluster"

// Shape is one built envelope file.
type Shape struct {
	Name     string // file name: what it stands for
	Envelope string // the Origin.Envelope the decoder must report
	Data     []byte // the file's content
	Skipped  int    // records in it that hold no audit event
}

// when is the (built) time of every CloudWatch event.
var when = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func logEvents(events [][]byte) []map[string]any {
	var out []map[string]any
	for i, ev := range events {
		out = append(out, map[string]any{
			"id":        fmt.Sprintf("37%050d%04d", 0, i),
			"timestamp": when.UnixMilli() + int64(i),
			"message":   string(ev),
		})
	}
	return out
}

// Subscription returns the decoded CloudWatch Logs subscription payload of events.
func Subscription(events [][]byte) []byte { return SubscriptionOf(Cluster, events) }

// SubscriptionOf is Subscription from the log group of cluster, /aws/eks/<cluster>/cluster.
func SubscriptionOf(cluster string, events [][]byte) []byte {
	return mustJSON(map[string]any{
		"owner": "123456789012", "logGroup": "/aws/eks/" + cluster + "/cluster", "logStream": "kube-apiserver-audit-0123456789abcdef0123456789abcdef",
		"subscriptionFilters": []string{"auditlens"}, "messageType": "DATA_MESSAGE", "logEvents": logEvents(events),
	})
}

// Control is the subscription's CONTROL_MESSAGE (no audit event).
func Control() []byte {
	return mustJSON(map[string]any{
		"owner": "CloudwatchLogs", "logGroup": "", "logStream": "", "subscriptionFilters": []string{},
		"messageType": "CONTROL_MESSAGE",
		"logEvents":   []map[string]any{{"id": "", "timestamp": when.UnixMilli(), "message": "CWL CONTROL MESSAGE: Checking health of destination Firehose."}},
	})
}

// Authenticator is a subscription payload of the cluster's authenticator stream (no audit event).
func Authenticator() []byte {
	return mustJSON(map[string]any{
		"owner": "123456789012", "logGroup": LogGroup, "logStream": "authenticator-0123456789abcdef0123456789abcdef",
		"subscriptionFilters": []string{"auditlens"}, "messageType": "DATA_MESSAGE",
		"logEvents": []map[string]any{{"id": "1", "timestamp": when.UnixMilli(), "message": `time="2026-11-30T12:00:00Z" level=info msg="access granted"`}},
	})
}

// Padded is a subscription payload of size bytes or a little more: one audit event whose
// padding, a run of one letter, gzip shrinks about a thousandfold (a decompression bomb).
func Padded(size int) []byte {
	ev := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"padded","stage":"ResponseComplete","verb":"get","requestURI":"/","padding":"` +
		strings.Repeat("x", max(size-600, 0)) + `"}`
	return Subscription([][]byte{[]byte(ev)})
}

// Gzip compresses b as CloudWatch Logs does for its subscriptions.
func Gzip(b []byte) []byte {
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, 6)
	_, _ = w.Write(b) // into memory: cannot fail
	_ = w.Close()
	return buf.Bytes()
}

// FirehoseBody is the Firehose HTTP endpoint request body for records (each base64 as sent).
func FirehoseBody(requestID string, records ...[]byte) []byte {
	var recs []map[string]string
	for _, r := range records {
		recs = append(recs, map[string]string{"data": base64.StdEncoding.EncodeToString(r)})
	}
	return mustJSON(map[string]any{"requestId": requestID, "timestamp": when.UnixMilli(), "records": recs})
}

// Shapes returns every built EKS envelope of events (genuine audit events, one JSON each).
func Shapes(events [][]byte) []Shape {
	sub := Subscription(events)
	var export strings.Builder
	for _, ev := range events {
		export.WriteString(when.Format(time.RFC3339Nano) + " " + string(ev) + "\n")
	}
	fle := logEvents(events)
	for _, e := range fle {
		e["logStreamName"] = "kube-apiserver-audit-0123456789abcdef0123456789abcdef"
		e["ingestionTime"] = when.UnixMilli() + 500
		e["eventId"] = e["id"]
		delete(e, "id")
	}
	filter, _ := json.MarshalIndent(map[string]any{"events": fle, "searchedLogStreams": []any{}}, "", "    ")
	return []Shape{
		{Name: "subscription.jsonl", Envelope: "cloudwatch-subscription", Data: join(sub, Control(), Authenticator()), Skipped: 2},
		{Name: "subscription-firehose-s3.gz", Envelope: "gzip/cloudwatch-subscription", Data: append(Gzip(sub), Gzip(Control())...), Skipped: 1},
		{Name: "kinesis-data.b64", Envelope: "base64/gzip/cloudwatch-subscription", Data: []byte(base64.StdEncoding.EncodeToString(Gzip(sub)) + "\n")},
		{Name: "lambda-event.json", Envelope: "lambda/base64/gzip/cloudwatch-subscription", Data: mustJSON(map[string]any{"awslogs": map[string]string{"data": base64.StdEncoding.EncodeToString(Gzip(sub))}})},
		{Name: "firehose-http-body.json", Envelope: "firehose/gzip/cloudwatch-subscription", Data: FirehoseBody("ed4acda5-034f-9f42-bba1-f29aea6d7d8f", Gzip(sub), Gzip(Control()), nil), Skipped: 1},
		{Name: "export-to-s3.log", Envelope: "cloudwatch-export", Data: []byte(export.String())},
		{Name: "filter-log-events.json", Envelope: "filter-log-events", Data: append(filter, '\n')},
	}
}

func join(lines ...[]byte) []byte {
	return append(bytes.Join(lines, []byte{'\n'}), '\n')
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
