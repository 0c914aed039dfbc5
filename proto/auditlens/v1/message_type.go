// Package auditlensv1 holds the auditlens.v1 protobuf messages (generated from finding.proto,
// heartbeat.proto and event.proto) and the bus header that says which of them a message holds.
package auditlensv1

// MessageTypeHeader is the bus header that names the message a payload holds. A payload on
// the findings stream without it is one Finding, and on the events stream one audit Event as
// JSON: the formats before batches, so readers take both during an upgrade.
const MessageTypeHeader = "Auditlens-Message-Type"

// FindingBatchMessageType is the MessageTypeHeader value of a FindingBatch payload: the full
// protobuf name of the message.
const FindingBatchMessageType = "auditlens.v1.FindingBatch"

// EventBatchMessageType is the MessageTypeHeader value of an EventBatch payload on the events
// stream; a payload without the header is one audit Event as JSON.
const EventBatchMessageType = "auditlens.v1.EventBatch"

// HeartbeatMessageType is the MessageTypeHeader value of a Heartbeat payload on the findings
// stream: which minutes of a cluster's audit stream carried events. A reader older than it
// dead-letters it, so report is upgraded before classify.
const HeartbeatMessageType = "auditlens.v1.Heartbeat"
