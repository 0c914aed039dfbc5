package weekly

import "time"

// Acceptance is an acknowledged risk: who accepted a blocker, why, and until which day.
type Acceptance struct {
	// Until is the last day the acceptance holds (UTC); zero when it has no expiry.
	Until  Date   `json:"until,omitzero"`
	By     string `json:"by"`
	Reason string `json:"reason"`
	// Source is where it is written (file:line).
	Source string `json:"source"`
}

// Expired reports whether a is over at: after the end of its Until day.
func (a Acceptance) Expired(at time.Time) bool {
	return !a.Until.IsZero() && !at.Before(a.Until.AddDate(0, 0, 1))
}

// Accepted is a blocker that an acceptance takes off the blockers.
type Accepted struct {
	Blocker
	Acceptance Acceptance `json:"acceptance"`
}

// Acceptor finds the acceptance of b, if any, expired or not.
type Acceptor interface {
	Accept(b Blocker) (Acceptance, bool)
}

// Split separates the blockers that an unexpired acceptance covers at at from those that
// still block; a blocker whose acceptance expired blocks again, with that acceptance in
// Expired. A nil Acceptor accepts nothing. The order of bs is kept in both.
func Split(bs []Blocker, a Acceptor, at time.Time) (blocking []Blocker, accepted []Accepted) {
	blocking, accepted = []Blocker{}, []Accepted{}
	for _, b := range bs {
		if a == nil {
			blocking = append(blocking, b)
			continue
		}
		acc, ok := a.Accept(b)
		switch {
		case !ok:
			blocking = append(blocking, b)
		case acc.Expired(at):
			b.Expired = &acc
			blocking = append(blocking, b)
		default:
			accepted = append(accepted, Accepted{Blocker: b, Acceptance: acc})
		}
	}
	return blocking, accepted
}

// Accept moves the blockers that a accepts at at from r.Blockers to r.Accepted, and flags
// those whose acceptance expired (see Split).
func (r *Report) Accept(a Acceptor, at time.Time) {
	if a == nil {
		return
	}
	r.Blockers, r.Accepted = Split(r.Blockers, a, at)
}

// Notice is something to review in a file the report reads (an acknowledgement without
// expiry, expired, or unused), at its source (file:line).
type Notice struct {
	Source  string `json:"source"`
	Message string `json:"message"`
}
