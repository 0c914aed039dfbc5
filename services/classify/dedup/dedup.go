// Package dedup remembers recently emitted finding keys (Key) so that the
// several stages of one request (RequestReceived, ResponseStarted, ResponseComplete, Panic)
// yield one finding per rule, in bounded memory.
//
// The window is counted in keys, not time: a Window of size N always remembers the last N/2
// keys added and never more than N. Stages of one request normally arrive within milliseconds
// (a watch's ResponseStarted and ResponseComplete can be minutes apart); a repeat that falls
// out of the window is emitted again with the same key, which the bus's de-duplication
// (Message.ID) and the report's counting by the same identity absorb.
package dedup

import (
	"strconv"
	"sync"
)

// DefaultSize is the default window: 200k keys, about 20 MB at most.
const DefaultSize = 200_000

// Window is a bounded set of recently seen keys, safe for concurrent use.
type Window struct {
	mu        sync.Mutex
	half      int
	cur, prev map[string]struct{}
}

// New returns a window remembering between size/2 and size keys (size < 2: DefaultSize).
func New(size int) *Window {
	if size < 2 {
		size = DefaultSize
	}
	return &Window{half: size / 2, cur: make(map[string]struct{}), prev: map[string]struct{}{}}
}

// Seen reports whether key is in the window, without adding it.
func (w *Window) Seen(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.has(key)
}

func (w *Window) has(key string) bool {
	if _, ok := w.cur[key]; ok {
		return true
	}
	_, ok := w.prev[key]
	return ok
}

// Add puts keys in the window.
func (w *Window) Add(keys ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range keys {
		w.add(k)
	}
}

func (w *Window) add(key string) {
	if w.has(key) {
		return
	}
	if len(w.cur) >= w.half {
		w.prev, w.cur = w.cur, make(map[string]struct{}, w.half)
	}
	w.cur[key] = struct{}{}
}

// FirstTime adds key and reports whether it was new: true once per key within the window.
func (w *Window) FirstTime(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.has(key) {
		return false
	}
	w.add(key)
	return true
}

// Len is the number of keys remembered now.
func (w *Window) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.cur) + len(w.prev)
}

// Key is the identity of a finding, also its bus message id: "cluster/audit_id/rule_id", and
// "/request_received" after it when the request's receipt time (Unix seconds) is part of it.
// A client may choose its request's Audit-ID, so one audit ID may name several requests; the
// stages of one request share its receipt time.
func Key(cluster, auditID, ruleID string, requestReceived int64) string {
	if requestReceived == 0 {
		return cluster + "/" + auditID + "/" + ruleID
	}
	b := make([]byte, 0, len(cluster)+len(auditID)+len(ruleID)+3+20)
	b = append(append(append(append(append(b, cluster...), '/'), auditID...), '/'), ruleID...)
	b = strconv.AppendInt(append(b, '/'), requestReceived, 10)
	return string(b)
}
