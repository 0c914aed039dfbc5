// Package auditlensv1 holds the auditlens.v1 protobuf messages (generated from finding.proto)
// and the bus header that says which of them a message on the findings stream holds.
package auditlensv1

// MessageTypeHeader is the bus header that names the message a payload on the findings stream
// holds. A payload without it is one Finding, the format classify published before batches,
// so report reads both during an upgrade.
const MessageTypeHeader = "Auditlens-Message-Type"

// FindingBatchMessageType is the MessageTypeHeader value of a FindingBatch payload: the full
// protobuf name of the message.
const FindingBatchMessageType = "auditlens.v1.FindingBatch"
