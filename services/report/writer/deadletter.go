package writer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/lib/printable"
	"github.com/auditlens/auditlens/lib/reason"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/store"
)

// add decodes the findings of d into b and keeps d there to be acknowledged after the write.
// A message that holds no usable finding is dead-lettered and settled here; so is each bad
// finding inside a batch, whose good findings are still written.
func (w *Writer) add(ctx context.Context, d *bus.Delivery, b *batch) {
	if len(d.Data) > w.cfg.MaxFindingBytes {
		w.invalid(ctx, d, fmt.Errorf("%w: message of %d bytes exceeds %d", errTooLarge, len(d.Data), w.cfg.MaxFindingBytes))
		return
	}
	data := d.Data
	now := w.now()
	notAfter := now.Add(MaxAhead)
	b.blk.NotAfter = notAfter.Unix()
	keptFrom := store.KeptFrom(now, w.cfg.RetentionDays)
	b.blk.NotBefore = 0
	if !keptFrom.IsZero() {
		b.blk.NotBefore = keptFrom.Unix()
	}
	if d.Header[auditlensv1.MessageTypeHeader] == auditlensv1.HeartbeatMessageType {
		hb, err := heartbeat(data, d.Cluster, notAfter)
		if err != nil {
			w.invalid(ctx, d, err)
			return
		}
		if hb.skipped > 0 {
			w.m.minutesSkipped.Add(float64(hb.skipped))
			w.log.Warn("heartbeat minutes out of range skipped (before 1970 or more than a day past this clock)",
				"cluster", d.Cluster, "skipped", hb.skipped, "kept", len(hb.minutes), "position", d.Position)
		}
		if hb.badSightings > 0 {
			w.m.sightingsSkipped.Add(float64(hb.badSightings))
			w.log.Warn("heartbeat sightings skipped (a control-plane sighting without a component or a Kubernetes release, a coverage one of an unknown kind, a migration one without an API, or no time from 1970 to a day past this clock)",
				"cluster", d.Cluster, "skipped", hb.badSightings, "kept", len(hb.sightings), "position", d.Position, "first", hb.firstBad)
		}
		b.heartbeats++
		b.beats = append(b.beats, hb.minutes...)
		b.sightings = append(b.sightings, hb.sightings...)
		b.coverage = append(b.coverage, hb.coverage...)
		for _, m := range hb.moves {
			if m.Seen.Before(keptFrom) {
				w.expiredOnArrival(m.Cluster, m.Seen, true)
				continue
			}
			b.moves = append(b.moves, m)
		}
		// Once per day: two heartbeats of a day can share a batch (neither written yet).
		for _, r := range hb.reviews {
			if w.reviews.fresh(r) && !slices.ContainsFunc(b.reviews, func(o store.ReviewSighting) bool { return reviewKey(o) == reviewKey(r) }) {
				b.reviews = append(b.reviews, r)
			}
		}
		b.ds = append(b.ds, d)
		return
	}
	if d.Header[auditlensv1.MessageTypeHeader] != auditlensv1.FindingBatchMessageType {
		// One Finding: what classify published before batches, still read during an upgrade.
		if err := b.blk.AppendWire(data, d.Cluster); err != nil {
			if at, ok := expiredAt(err); ok {
				w.expiredOnArrival(d.Cluster, at, false)
				b.ds = append(b.ds, d) // acknowledged with the batch
				return
			}
			w.invalid(ctx, d, findingCause(err))
			return
		}
		w.m.pending.Inc()
		b.ds = append(b.ds, d)
		return
	}
	// Classify compresses the batch (--classify-findings-compression); the block copies what
	// it keeps, so the decompressed bytes are not held past this call.
	data, _, err := eventbatch.Decompress(d.Header, data, nil)
	if err != nil {
		w.invalid(ctx, d, fmt.Errorf("undecodable finding batch: %w", err))
		return
	}
	n, err := b.blk.AppendBatch(data, d.Cluster, func(i int, f []byte, err error) error {
		if at, ok := expiredAt(err); ok {
			w.expiredOnArrival(d.Cluster, at, false)
			return nil
		}
		return w.deadLetterFinding(ctx, d, i, f, findingCause(err))
	})
	switch {
	case errors.Is(err, errDeadLetterFailed):
		// Keep the message on the bus rather than lose the finding that could not be parked.
		_ = d.Nak(w.cfg.RetryMax)
	case err != nil:
		w.invalid(ctx, d, fmt.Errorf("undecodable finding batch: %w", err))
	case n == 0:
		// Every finding in it was dead-lettered or older than the retention.
		if err := d.Ack(ctx); err != nil {
			w.m.ackErrors.Inc()
		}
	default:
		w.m.pending.Add(float64(n))
		b.ds = append(b.ds, d)
	}
}

// findingCause says why a finding was not usable: it has no identity, or it is undecodable.
func findingCause(err error) error {
	if errors.Is(err, store.ErrNoIdentity) || errors.Is(err, store.ErrEventTime) {
		return err
	}
	return fmt.Errorf("undecodable finding: %w", err)
}

// errTooLarge marks a message over --report-max-finding-bytes.
var errTooLarge = reason.New("too large", reason.TooLarge)

var errDeadLetterFailed = errors.New("dead-letter publish failed")

// invalid counts, logs and dead-letters a message that holds no usable finding, then
// terminates it (or, when the dead letter cannot be published, leaves it for redelivery).
func (w *Writer) invalid(ctx context.Context, d *bus.Delivery, cause error) {
	w.m.invalid.Inc()
	w.log.Warn("skipping invalid finding", "position", d.Position, "reason", cause)
	id := d.ID
	if id == "" {
		id = d.Position
	}
	err := w.deadLetter(ctx, d.Cluster, id, "report:"+d.Position, d.Data, cause)
	switch {
	case errors.Is(err, bus.ErrTooLarge):
		w.log.Warn("dead letter refused for its size; dropping the message", "position", d.Position)
	case err != nil:
		// Keep it on the bus rather than lose it.
		w.log.Warn("dead-letter publish failed; redelivering the message later", "position", d.Position, "err", err)
		_ = d.Nak(w.cfg.RetryMax)
		return
	}
	_ = d.Term(cause.Error())
}

// deadLetterFinding counts, logs and dead-letters finding i of the batch in d.
func (w *Writer) deadLetterFinding(ctx context.Context, d *bus.Delivery, i int, f []byte, cause error) error {
	w.m.invalid.Inc()
	pos := d.Position + "#" + strconv.Itoa(i)
	w.log.Warn("skipping invalid finding", "position", pos, "reason", cause)
	id := d.ID
	if id == "" {
		id = d.Position
	}
	err := w.deadLetter(ctx, d.Cluster, id+"#"+strconv.Itoa(i), "report:"+pos, f, cause)
	switch {
	case errors.Is(err, bus.ErrTooLarge):
		w.log.Warn("dead letter refused for its size; dropping the finding", "position", pos)
	case err != nil:
		w.log.Warn("dead-letter publish failed; redelivering the message later", "position", pos, "err", err)
		return fmt.Errorf("%w: %w", errDeadLetterFailed, err)
	}
	return nil
}

// deadLetter publishes data to the dead-letter stream as "report/<id>" (bus.NewDeadLetter
// keeps its first bus.DeadLetterMaxData bytes) and counts it.
func (w *Writer) deadLetter(ctx context.Context, cluster, id, source string, data []byte, cause error) error {
	if bus.ValidateCluster(cluster) != nil {
		cluster = "unknown"
	}
	msg := bus.NewDeadLetter(cluster, "report", id, source, cause, data, nil)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.bus.Publish(pctx, msg); err != nil {
		return err
	}
	w.m.deadLettered.Inc()
	return nil
}

// errBadHeartbeat marks a Heartbeat message that cannot be stored.
var errBadHeartbeat = errors.New("undecodable heartbeat")

// MaxAhead is how far past the writer's clock a finding's event time or a heartbeat's minute
// may lie: past it, the finding is dead-lettered and the minute skipped, so that a wrong clock
// or a forged event cannot stand as a cluster's newest event for good.
const MaxAhead = 24 * time.Hour

// heartbeatRows are the rows of one Heartbeat message.
type heartbeatRows struct {
	minutes   []store.EventMinute
	sightings []store.ControlPlaneSighting
	coverage  []store.CoverageSighting
	moves     []store.MigrationSighting
	// reviews are the catalogue release the heartbeat names, at the newest of its minutes of
	// each day (none when it names none).
	reviews []store.ReviewSighting
	// skipped counts the minutes out of range, badSightings the sightings not kept;
	// firstBad says why the first of those was not.
	skipped, badSightings int
	firstBad              string
}

// heartbeat decodes a Heartbeat message published on the subject of cluster into its rows.
// A heartbeat naming no cluster is the subject's. Minutes before 1970 or after notAfter are
// skipped (counted in skipped), the others kept. A control-plane sighting without a
// component, with a version that is not a Kubernetes release, or without a time from 1970 to
// notAfter is skipped (counted in badSightings): one bad sighting never costs the minutes or
// the other sightings.
func heartbeat(data []byte, cluster string, notAfter time.Time) (heartbeatRows, error) {
	var hb auditlensv1.Heartbeat
	if err := proto.Unmarshal(data, &hb); err != nil {
		return heartbeatRows{}, fmt.Errorf("%w: %w", errBadHeartbeat, err)
	}
	if hb.Cluster != "" {
		cluster = hb.Cluster
	}
	if cluster == "" {
		return heartbeatRows{}, fmt.Errorf("%w: no cluster", errBadHeartbeat)
	}
	out := heartbeatRows{minutes: make([]store.EventMinute, 0, len(hb.Minutes))}
	last := store.LastKept(notAfter.Unix())
	for i, m := range hb.Minutes {
		if m.GetMinute() == nil || m.Minute.CheckValid() != nil {
			return heartbeatRows{}, fmt.Errorf("%w: minute %d has no valid time", errBadHeartbeat, i)
		}
		if m.Minute.Seconds <= 0 || m.Minute.Seconds > last {
			out.skipped++
			continue
		}
		out.minutes = append(out.minutes, store.EventMinute{Cluster: cluster, Minute: m.Minute.AsTime(), Events: m.Events})
	}
	if v, err := kubeversion.Parse(hb.GetReviewedThrough()); err == nil && hb.ReviewedThrough != "" {
		newest := map[int64]time.Time{} // per day
		for _, m := range out.minutes {
			if d := m.Minute.Unix() / 86400; m.Minute.After(newest[d]) {
				newest[d] = m.Minute
			}
		}
		for _, at := range newest {
			out.reviews = append(out.reviews, store.ReviewSighting{Cluster: cluster, Through: v, Seen: at})
		}
	}
	for i, s := range hb.ControlPlane {
		cs, err := sighting(s, cluster, last)
		if err != nil {
			if out.badSightings == 0 {
				out.firstBad = fmt.Sprintf("sighting %d: %v", i, err)
			}
			out.badSightings++
			continue
		}
		out.sightings = append(out.sightings, cs)
	}
	for i, c := range hb.Coverage {
		cs, err := coverage(c, cluster, last)
		if err != nil {
			if out.badSightings == 0 {
				out.firstBad = fmt.Sprintf("coverage %d: %v", i, err)
			}
			out.badSightings++
			continue
		}
		out.coverage = append(out.coverage, cs)
	}
	for i, m := range hb.Migrations {
		ms, err := migration(m, cluster, last)
		if err != nil {
			if out.badSightings == 0 {
				out.firstBad = fmt.Sprintf("migration %d: %v", i, err)
			}
			out.badSightings++
			continue
		}
		out.moves = append(out.moves, ms)
	}
	return out, nil
}

// maxCaller bounds a migration sighting's user and agent, as classify bounds the callers it
// keeps.
const maxCaller = 4096

// migration checks one migration sighting of cluster: an API (a resource, with a version),
// a caller within maxCaller, and a time from 1970 to last (Unix seconds). The strings are
// stored as sent, like a finding's: data bound as parameters, never interpreted.
func migration(m *auditlensv1.MigrationSighting, cluster string, last int64) (store.MigrationSighting, error) {
	switch {
	case m.GetResource() == "" || m.GetApiVersion() == "" || len(m.ApiGroup)+len(m.ApiVersion)+len(m.Resource) > 512:
		return store.MigrationSighting{}, fmt.Errorf("API %q %q %q: want a group, version and resource",
			printable.String(m.GetApiGroup()), printable.String(m.GetApiVersion()), printable.String(m.GetResource()))
	case len(m.GetUsername())+len(m.GetUserAgent()) > maxCaller:
		return store.MigrationSighting{}, fmt.Errorf("caller of %d bytes: want at most %d", len(m.Username)+len(m.UserAgent), maxCaller)
	case m.GetSeen() == nil || m.Seen.CheckValid() != nil:
		return store.MigrationSighting{}, errors.New("no valid time")
	case m.Seen.Seconds <= 0 || m.Seen.Seconds > last:
		return store.MigrationSighting{}, fmt.Errorf("time %s: want one from 1970 to a day past this clock", m.Seen.AsTime().Format(time.RFC3339))
	}
	return store.MigrationSighting{Cluster: cluster, APIGroup: m.ApiGroup, APIVersion: m.ApiVersion, Resource: m.Resource,
		Username: m.Username, UserAgent: m.UserAgent, Seen: m.Seen.AsTime()}, nil
}

// coverage checks one coverage sighting of cluster: an input and a level as ingest and the
// apiserver write them (short, printable), a known kind of write, and a time from 1970 to
// last (Unix seconds).
func coverage(c *auditlensv1.CoverageSighting, cluster string, last int64) (store.CoverageSighting, error) {
	switch {
	case c.GetInput() == "" || len(c.Input) > 64 || printable.String(c.Input) != c.Input:
		return store.CoverageSighting{}, fmt.Errorf("input %q: want a short name", printable.String(c.GetInput()))
	case len(c.GetLevel()) > 32 || printable.String(c.Level) != c.Level:
		return store.CoverageSighting{}, fmt.Errorf("level %q: want an audit level", printable.String(c.GetLevel()))
	case c.GetWrites() != "" && c.Writes != "body" && c.Writes != "no-body":
		return store.CoverageSighting{}, fmt.Errorf("writes %q: want body, no-body or nothing", printable.String(c.Writes))
	case c.GetSeen() == nil || c.Seen.CheckValid() != nil:
		return store.CoverageSighting{}, errors.New("no valid time")
	case c.Seen.Seconds <= 0 || c.Seen.Seconds > last:
		return store.CoverageSighting{}, fmt.Errorf("time %s: want one from 1970 to a day past this clock", c.Seen.AsTime().Format(time.RFC3339))
	}
	return store.CoverageSighting{Cluster: cluster, Input: c.Input, Level: c.Level, Writes: c.Writes, Seen: c.Seen.AsTime()}, nil
}

// sighting checks one control-plane sighting of cluster: a component, a Kubernetes release
// and a time from 1970 to last (Unix seconds).
func sighting(s *auditlensv1.ControlPlaneSighting, cluster string, last int64) (store.ControlPlaneSighting, error) {
	if s.GetComponent() == "" {
		return store.ControlPlaneSighting{}, errors.New("no component")
	}
	v, err := kubeversion.Parse(s.GetVersion())
	if err != nil {
		return store.ControlPlaneSighting{}, err
	}
	switch {
	case s.GetSeen() == nil || s.Seen.CheckValid() != nil:
		return store.ControlPlaneSighting{}, errors.New("no valid time")
	case s.Seen.Seconds <= 0 || s.Seen.Seconds > last:
		return store.ControlPlaneSighting{}, fmt.Errorf("time %s: want one from 1970 to a day past this clock", s.Seen.AsTime().Format(time.RFC3339))
	}
	return store.ControlPlaneSighting{Cluster: cluster, Component: s.Component, Version: v, Seen: s.Seen.AsTime()}, nil
}
