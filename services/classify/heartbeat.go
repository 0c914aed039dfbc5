package classify

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/kubeversion"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// heartbeatMinutesPerMessage bounds one Heartbeat message: about 20 bytes a minute, so ~20
// KiB, below the findings messages' default size (a log read from its beginning can bring
// thousands of minutes at once).
const heartbeatMinutesPerMessage = 1000

// heartbeatKeep is how long a minute's count is kept after its last event once it was
// published: events of that minute arriving later (a late node, a re-read log) then start a
// count of their own, which report's max of counts reads as at least as many as before.
const heartbeatKeep = 10 * time.Minute

// heartbeatMaxMinutes bounds the minutes kept per cluster; the oldest published ones go first.
const heartbeatMaxMinutes = 100_000

// heartbeatSightingsPerMessage bounds the control-plane sightings of one Heartbeat message
// (about 40 bytes each). A cluster has four control-plane components and one or two releases
// of each at a time; only a flood of forged releases (from an identity the components run
// as) needs more than one message.
const heartbeatSightingsPerMessage = 100

// heartbeatMaxSightings bounds the sightings kept per cluster; the oldest published ones go
// first.
const heartbeatMaxSightings = 1000

// minuteCount is the running count of one minute of event time.
type minuteCount struct {
	events  uint64
	dirty   bool      // changed since its last successful publish
	touched time.Time // wall time of its last event
}

// sightingKey is one release of one control-plane component.
type sightingKey struct {
	component string
	version   kubeversion.Version
}

// sighting is the newest minute of event time a component named a release in.
type sighting struct {
	minute  int64     // Unix seconds
	sent    int64     // the minute of its last successful publish, 0 before
	touched time.Time // wall time of its last event
}

// dirty reports whether the sighting changed since its last successful publish: it is new,
// or seen in a later minute.
func (s *sighting) dirty() bool { return s.minute > s.sent }

// heartbeats counts, per cluster, the events of each minute of event time that this process
// settled (acknowledged), and publishes the changed minutes as Heartbeat messages every
// interval. Counts are running totals since the start, so a heartbeat re-sent, or one
// following a failed one, says the same or more, never a delta to add. Beside them it keeps
// the releases the control plane named (per component and release, the newest minute), and
// sends those that are new or seen in a later minute: each release of a component is sent
// at most once a minute however busy the apiserver is, and a rolling upgrade, where two
// releases answer side by side, shows both (a settle gives the newest release of each
// component among its events, kubeversion.ControlPlane; the settles of a minute give both).
type heartbeats struct {
	mu       sync.Mutex
	clusters map[string]map[int64]*minuteCount // cluster -> minute (Unix seconds) -> count
	planes   map[string]map[sightingKey]*sighting
	// coverage holds, per cluster, the kinds of events seen (input, level, body) like the
	// control plane's releases: each sent when new or seen in a later minute.
	coverage map[string]map[coverageKey]*sighting
}

// coverageKey is one kind of event: the input it came by, its audit level, and for a write a
// request-body rule reads, whether its body was logged ("body", "no-body"; "" otherwise).
type coverageKey struct {
	input, level, writes string
}

func newHeartbeats() *heartbeats {
	return &heartbeats{clusters: map[string]map[int64]*minuteCount{}, planes: map[string]map[sightingKey]*sighting{},
		coverage: map[string]map[coverageKey]*sighting{}}
}

// add counts the events of a settled batch: per cluster, minute (Unix seconds) -> events.
func (h *heartbeats) add(counts map[string]map[int64]uint64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for cluster, minutes := range counts {
		c := h.clusters[cluster]
		if c == nil {
			c = map[int64]*minuteCount{}
			h.clusters[cluster] = c
		}
		for m, n := range minutes {
			mc := c[m]
			if mc == nil {
				mc = &minuteCount{}
				c[m] = mc
			}
			mc.events += n
			mc.dirty, mc.touched = true, now
		}
	}
}

// sighted keeps the control plane's sightings of a settled batch of cluster's events, each
// at the minute of its event time.
func (h *heartbeats) sighted(cluster string, ss []kubeversion.Sighting, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range ss {
		see(h.planes, cluster, sightingKey{s.Component, s.Version}, s.At.Truncate(time.Minute).Unix(), now)
	}
}

// covered keeps the kinds of cluster's events of a settled batch, each with the newest
// minute (Unix seconds) of event time it was seen in.
func (h *heartbeats) covered(cluster string, kinds map[coverageKey]int64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, minute := range kinds {
		see(h.coverage, cluster, k, minute, now)
	}
}

// see records that cluster's k was seen in minute (h.mu held).
func see[K comparable](all map[string]map[K]*sighting, cluster string, k K, minute int64, now time.Time) {
	c := all[cluster]
	if c == nil {
		c = map[K]*sighting{}
		all[cluster] = c
	}
	sg := c[k]
	if sg == nil {
		sg = &sighting{}
		c[k] = sg
	}
	sg.minute = max(sg.minute, minute)
	sg.touched = now
}

// dirtyKeys returns the keys of p changed since their last publish, forgetting the published
// ones untouched for heartbeatKeep and the oldest beyond heartbeatMaxSightings (h.mu held).
func dirtyKeys[K comparable](p map[K]*sighting, now time.Time) []K {
	var keys []K
	for k, sg := range p {
		switch {
		case sg.dirty():
			keys = append(keys, k)
		case now.Sub(sg.touched) > heartbeatKeep:
			delete(p, k)
		}
	}
	trimSightings(p)
	return keys
}

// pending returns the Heartbeat messages of the minutes and sightings changed since their
// last successful publish, and forgets old published ones. Each message's id is derived from
// its content ("<cluster>/heartbeat/<hash>"), so a retry of the same message is
// de-duplicated by the bus.
func (h *heartbeats) pending(now time.Time) ([]bus.Message, *receipt, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []bus.Message
	done := &receipt{}
	names := make(map[string]bool, len(h.clusters)+len(h.planes))
	for cluster := range h.clusters {
		names[cluster] = true
	}
	for cluster := range h.planes {
		names[cluster] = true
	}
	for cluster := range h.coverage {
		names[cluster] = true
	}
	for cluster := range names {
		c, p, cov := h.clusters[cluster], h.planes[cluster], h.coverage[cluster]
		var minutes []int64
		for m, mc := range c {
			switch {
			case mc.dirty:
				minutes = append(minutes, m)
			case now.Sub(mc.touched) > heartbeatKeep:
				delete(c, m)
			}
		}
		h.trim(c)
		if len(c) == 0 {
			delete(h.clusters, cluster)
		}
		keys := dirtyKeys(p, now)
		if len(p) == 0 {
			delete(h.planes, cluster)
		}
		kinds := dirtyKeys(cov, now)
		if len(cov) == 0 {
			delete(h.coverage, cluster)
		}
		sort.Slice(kinds, func(i, j int) bool {
			a, b := kinds[i], kinds[j]
			if a.input != b.input {
				return a.input < b.input
			}
			if a.level != b.level {
				return a.level < b.level
			}
			return a.writes < b.writes
		})
		sort.Slice(minutes, func(i, j int) bool { return minutes[i] < minutes[j] })
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].component != keys[j].component {
				return keys[i].component < keys[j].component
			}
			return keys[i].version.Less(keys[j].version)
		})
		for len(minutes) > 0 || len(keys) > 0 || len(kinds) > 0 {
			part := minutes[:min(len(minutes), heartbeatMinutesPerMessage)]
			minutes = minutes[len(part):]
			seen := keys[:min(len(keys), heartbeatSightingsPerMessage)]
			keys = keys[len(seen):]
			kind := kinds[:min(len(kinds), heartbeatSightingsPerMessage)]
			kinds = kinds[len(kind):]
			hb := &auditlensv1.Heartbeat{Cluster: cluster, Minutes: make([]*auditlensv1.EventMinute, 0, len(part))}
			sum := sha256.New()
			sum.Write([]byte(cluster))
			var buf [16]byte
			for _, m := range part {
				n := c[m].events
				hb.Minutes = append(hb.Minutes, &auditlensv1.EventMinute{Minute: timestamppb.New(time.Unix(m, 0)), Events: n})
				binary.BigEndian.PutUint64(buf[:8], uint64(m))
				binary.BigEndian.PutUint64(buf[8:], n)
				sum.Write(buf[:])
				done.minutes = append(done.minutes, sent{cluster, m, n})
			}
			for _, k := range seen {
				m := p[k].minute
				hb.ControlPlane = append(hb.ControlPlane, &auditlensv1.ControlPlaneSighting{
					Component: k.component, Version: k.version.String(), Seen: timestamppb.New(time.Unix(m, 0))})
				sum.Write([]byte{0})
				sum.Write([]byte(k.component))
				binary.BigEndian.PutUint64(buf[:8], uint64(k.version.Key()))
				binary.BigEndian.PutUint64(buf[8:], uint64(m))
				sum.Write(buf[:])
				done.sightings = append(done.sightings, sentSighting{cluster, k, m})
			}
			for _, k := range kind {
				m := cov[k].minute
				hb.Coverage = append(hb.Coverage, &auditlensv1.CoverageSighting{
					Input: k.input, Level: k.level, Writes: k.writes, Seen: timestamppb.New(time.Unix(m, 0))})
				for _, s := range [...]string{k.input, k.level, k.writes} {
					sum.Write([]byte{1})
					sum.Write([]byte(s))
				}
				binary.BigEndian.PutUint64(buf[:8], uint64(m))
				sum.Write(buf[:8])
				done.coverage = append(done.coverage, sentCoverage{cluster, k, m})
			}
			data, err := proto.Marshal(hb)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, bus.Message{Stream: bus.Findings, Cluster: cluster, Data: data,
				ID:     cluster + "/heartbeat/" + hex.EncodeToString(sum.Sum(nil)[:16]),
				Header: map[string]string{auditlensv1.MessageTypeHeader: auditlensv1.HeartbeatMessageType}})
		}
	}
	return out, done, nil
}

// trim drops the oldest published minutes of c beyond heartbeatMaxMinutes (h.mu held).
func (h *heartbeats) trim(c map[int64]*minuteCount) {
	if len(c) <= heartbeatMaxMinutes {
		return
	}
	var clean []int64
	for m, mc := range c {
		if !mc.dirty {
			clean = append(clean, m)
		}
	}
	sort.Slice(clean, func(i, j int) bool { return clean[i] < clean[j] })
	for _, m := range clean[:min(len(clean), len(c)-heartbeatMaxMinutes)] {
		delete(c, m)
	}
}

// trimSightings drops the oldest published sightings of p beyond heartbeatMaxSightings
// (h.mu held).
func trimSightings[K comparable](p map[K]*sighting) {
	if len(p) <= heartbeatMaxSightings {
		return
	}
	var clean []K
	for k, sg := range p {
		if !sg.dirty() {
			clean = append(clean, k)
		}
	}
	sort.Slice(clean, func(i, j int) bool { return p[clean[i]].minute < p[clean[j]].minute })
	for _, k := range clean[:min(len(clean), len(p)-heartbeatMaxSightings)] {
		delete(p, k)
	}
}

// receipt is what the messages of one pending call said: published marks it clean.
type receipt struct {
	minutes   []sent
	sightings []sentSighting
	coverage  []sentCoverage
}

// sentCoverage is one published kind of event: its minute.
type sentCoverage struct {
	cluster string
	key     coverageKey
	minute  int64
}

// sent is one published minute count.
type sent struct {
	cluster string
	minute  int64
	events  uint64
}

// sentSighting is one published sighting: its minute.
type sentSighting struct {
	cluster string
	key     sightingKey
	minute  int64
}

// published marks the minutes and sightings of a successful publish clean, unless they
// changed meanwhile. A nil receipt marks nothing.
func (h *heartbeats) published(done *receipt) {
	if done == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range done.minutes {
		if mc := h.clusters[s.cluster][s.minute]; mc != nil && mc.events == s.events {
			mc.dirty = false
		}
	}
	for _, s := range done.sightings {
		if sg := h.planes[s.cluster][s.key]; sg != nil {
			sg.sent = max(sg.sent, s.minute)
		}
	}
	for _, s := range done.coverage {
		if sg := h.coverage[s.cluster][s.key]; sg != nil {
			sg.sent = max(sg.sent, s.minute)
		}
	}
}

// flush publishes the pending heartbeats once; a failure is counted and logged, and the
// minutes stay pending for the next flush.
func (s *service) flushHeartbeats(ctx context.Context) {
	msgs, done, err := s.beats.pending(time.Now())
	if err == nil && len(msgs) > 0 {
		pctx, cancel := context.WithTimeout(ctx, s.cfg.AckWait)
		err = s.bus.Publish(pctx, msgs...)
		cancel()
	}
	if err != nil {
		s.met.heartbeatErrors.Inc()
		s.log.Warn("publish heartbeats failed; the next one re-affirms them", "messages", len(msgs), "err", err)
		return
	}
	s.beats.published(done)
	s.met.heartbeats.Add(float64(len(msgs)))
}

// heartbeat flushes every interval until ctx ends, then once more (the minutes of the last
// settled events).
func (s *service) heartbeat(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.flushHeartbeats(context.Background())
		case <-ctx.Done():
			return
		}
	}
}
