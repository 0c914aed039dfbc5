// Package reason is the one vocabulary of why input was skipped or given up: snake_case
// labels, the same in every service's metrics and in the dead letters' headers.
package reason

import "errors"

// Labels. A metric labelled with one of these has a bounded set of values.
const (
	TooLarge       = "too_large"       // larger than a size cap (line, event, message)
	InvalidUTF8    = "invalid_utf8"    // bytes that are not UTF-8
	NotJSON        = "not_json"        // not a JSON value
	NotAuditEvent  = "not_audit_event" // JSON, but not an audit event (or envelope of one)
	IncompleteLine = "incomplete_line" // a finished file's last line has no newline
	Panic          = "panic"           // processing it panicked
	Undeliverable  = "undeliverable"   // redelivered too often without an acknowledgement
	BadBatch       = "bad_batch"       // a batch of events whose framing or compression is broken
	Unpublishable  = "unpublishable"   // a message the bus cannot carry (a cluster name it cannot route)
	Other          = "other"           // none of the above
)

// Error is an error that carries its label; sentinels made by New are Errors.
type Error struct {
	text, label string
}

// New returns a sentinel error with text and label; compare with errors.Is as usual.
func New(text, label string) error { return &Error{text: text, label: label} }

func (e *Error) Error() string { return e.text }

// Label is the error's label.
func (e *Error) Label() string { return e.label }

// Of is the label of err: that of the first labelled error it wraps, else Other (and ""
// for a nil err).
func Of(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.label
	}
	return Other
}
