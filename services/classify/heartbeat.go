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
	"github.com/auditlens/auditlens/services/classify/rules"
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

func (s *sighting) last() time.Time { return s.touched }
func (s *sighting) at() int64       { return s.minute }

// kept is one thing the heartbeats keep by key beside the minute counts: a sighting or a move.
type kept interface {
	// dirty reports whether it is to be sent.
	dirty() bool
	// last is the wall time of its last event, at its event time (Unix seconds).
	last() time.Time
	at() int64
}

// moveKey is one caller of one catalogued API version that has a successor.
type moveKey = rules.APICaller

// move is what the heartbeats know of a caller's calls of an API and of its successor: the
// newest call of each (Unix seconds of event time; newest 0: none of the successor), the
// newest read of the successor, the newest successor call sent, and the kinds of calls
// (readCall, writeCall) of the API and of the successor since the caller's last call of it.
type move struct {
	newest, newestRead, lastOld, sent int64
	oldKinds, covered                 uint8
	touched                           time.Time
}

// moveRefresh is how often a caller's successor calls are sent again when nothing else says
// to: another classify replica may have seen the caller's old calls, which this one cannot
// see (so report may count a caller that has moved as blocking for up to this long).
const moveRefresh = int64(time.Hour / time.Second)

// dirty: a successor call report may not know to be newer than the caller's old calls, once
// the successor has had every kind of call (read, write) the caller made of the old version
// since the last one. It is the first this process keeps (a start, a new day, or the caller
// was forgotten), the first after an old call seen since the last one sent (the move), or an
// hour or a day after it.
func (m *move) dirty() bool {
	switch {
	case m.newest <= m.sent, m.covered&m.oldKinds != m.oldKinds:
		// Nothing new, or the successor took over only some kinds of the caller's calls (it
		// writes v1 but still lists v1beta1): those still need the old version.
		return false
	case m.sent == 0, m.newest > m.lastOld && m.sent <= m.lastOld:
		return true
	}
	return m.newest-m.sent >= moveRefresh || m.newest/86400 != m.sent/86400
}

func (m *move) last() time.Time { return m.touched }
func (m *move) at() int64       { return m.newest }

// heartbeatMaxMoves bounds the callers kept per cluster; the oldest published ones go first
// (a forgotten caller's next successor call is sent as its first).
const heartbeatMaxMoves = 100_000

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
	// moves holds, per cluster, the callers of successors of catalogued API versions.
	moves map[string]map[moveKey]*move
	// through is the newest release whose removals the catalogue knows ("" unknown), sent in
	// every heartbeat.
	through string
}

// coverageKey is one kind of event: the input it came by, its audit level, and for a write a
// request-body rule reads, whether its body was logged ("body", "no-body"; "" otherwise).
type coverageKey struct {
	input, level, writes string
	// day (Unix days of event time): a kind is kept per day, so that report holds a sighting in
	// each day it was seen (an imported log's window, weeks back, finds its own).
	day int64
}

func newHeartbeats() *heartbeats {
	return &heartbeats{clusters: map[string]map[int64]*minuteCount{}, planes: map[string]map[sightingKey]*sighting{},
		coverage: map[string]map[coverageKey]*sighting{}, moves: map[string]map[moveKey]*move{}}
}

// add counts the events of a settled batch: per cluster, minute (Unix seconds) -> events.
func (h *heartbeats) add(counts map[string]map[int64]uint64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for cluster, minutes := range counts {
		c := of(h.clusters, cluster)
		for m, n := range minutes {
			mc := entry(c, m)
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
func (h *heartbeats) covered(cluster string, kinds map[coverageKey]*int64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, minute := range kinds {
		see(h.coverage, cluster, k, *minute, now)
	}
}

// moved keeps the calls of a settled batch of cluster's events that move callers off
// catalogued API versions, and their successor reads (moveObs).
func (h *heartbeats) moved(cluster string, obs map[moveKey]*moveObs, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := of(h.moves, cluster)
	for k, o := range obs {
		mv := entry(c, k)
		if o.lastOld > 0 {
			// The successor calls before the settle's last old call cover nothing.
			mv.lastOld, mv.oldKinds, mv.covered = max(mv.lastOld, o.lastOld), mv.oldKinds|o.oldKinds, o.newKinds
		} else {
			mv.covered |= o.newKinds
		}
		mv.newest, mv.newestRead, mv.touched = max(mv.newest, o.newest), max(mv.newestRead, o.newestRead), now
	}
}

// newestRead is the newest read of k's successor by k's caller that cluster's settled events
// held (0: none kept).
func (h *heartbeats) newestRead(cluster string, k moveKey) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if mv := h.moves[cluster][k]; mv != nil {
		return mv.newestRead
	}
	return 0
}

// see records that cluster's k was seen in minute (h.mu held).
func see[K comparable](all map[string]map[K]*sighting, cluster string, k K, minute int64, now time.Time) {
	sg := entry(of(all, cluster), k)
	sg.minute = max(sg.minute, minute)
	sg.touched = now
}

// of is cluster's map in all, a new one inserted when there is none.
func of[K comparable, V any](all map[string]map[K]*V, cluster string) map[K]*V {
	c := all[cluster]
	if c == nil {
		c = map[K]*V{}
		all[cluster] = c
	}
	return c
}

// entry is m's value at k, a new zero one inserted when there is none. A key already in m is
// never assigned again: that would store the key given (see clusterPlane.move).
func entry[K comparable, V any](m map[K]*V, k K) *V {
	if v := m[k]; v != nil {
		return v
	}
	v := new(V)
	m[k] = v
	return v
}

// dirtyKeys returns the keys of p to send, forgetting the published ones untouched for
// heartbeatKeep and the oldest beyond limit (h.mu held).
func dirtyKeys[K comparable, V kept](p map[K]V, now time.Time, limit int) []K {
	var keys []K
	for k, v := range p {
		switch {
		case v.dirty():
			keys = append(keys, k)
		case now.Sub(v.last()) > heartbeatKeep:
			delete(p, k)
		}
	}
	trimKept(p, limit)
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
	for cluster := range h.moves {
		names[cluster] = true
	}
	for cluster := range names {
		c, p, cov, mvs := h.clusters[cluster], h.planes[cluster], h.coverage[cluster], h.moves[cluster]
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
		keys := dirtyKeys(p, now, heartbeatMaxSightings)
		if len(p) == 0 {
			delete(h.planes, cluster)
		}
		kinds := dirtyKeys(cov, now, heartbeatMaxSightings)
		if len(cov) == 0 {
			delete(h.coverage, cluster)
		}
		callers := dirtyKeys(mvs, now, heartbeatMaxMoves)
		if len(mvs) == 0 {
			delete(h.moves, cluster)
		}
		sort.Slice(callers, func(i, j int) bool { return lessCaller(callers[i], callers[j]) })
		sort.Slice(kinds, func(i, j int) bool {
			a, b := kinds[i], kinds[j]
			if a.input != b.input {
				return a.input < b.input
			}
			if a.level != b.level {
				return a.level < b.level
			}
			if a.writes != b.writes {
				return a.writes < b.writes
			}
			return a.day < b.day
		})
		sort.Slice(minutes, func(i, j int) bool { return minutes[i] < minutes[j] })
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].component != keys[j].component {
				return keys[i].component < keys[j].component
			}
			return keys[i].version.Less(keys[j].version)
		})
		for len(minutes) > 0 || len(keys) > 0 || len(kinds) > 0 || len(callers) > 0 {
			part := minutes[:min(len(minutes), heartbeatMinutesPerMessage)]
			minutes = minutes[len(part):]
			seen := keys[:min(len(keys), heartbeatSightingsPerMessage)]
			keys = keys[len(seen):]
			kind := kinds[:min(len(kinds), heartbeatSightingsPerMessage)]
			kinds = kinds[len(kind):]
			movers := callers[:min(len(callers), heartbeatSightingsPerMessage)]
			callers = callers[len(movers):]
			hb := &auditlensv1.Heartbeat{Cluster: cluster, Minutes: make([]*auditlensv1.EventMinute, 0, len(part)), ReviewedThrough: h.through}
			sum := sha256.New()
			sum.Write([]byte(cluster))
			sum.Write([]byte{3})
			sum.Write([]byte(h.through))
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
			for _, k := range movers {
				at := mvs[k].newest
				hb.Migrations = append(hb.Migrations, &auditlensv1.MigrationSighting{ApiGroup: k.API.Group, ApiVersion: k.API.Version,
					Resource: k.API.Resource, Username: k.User, UserAgent: k.Agent, Seen: timestamppb.New(time.Unix(at, 0))})
				for _, s := range [...]string{k.API.Group, k.API.Version, k.API.Resource, k.User, k.Agent} {
					sum.Write([]byte{2})
					sum.Write([]byte(s))
				}
				binary.BigEndian.PutUint64(buf[:8], uint64(at))
				sum.Write(buf[:8])
				done.moves = append(done.moves, sentMove{cluster, k, at})
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

// trimKept drops the oldest published entries of p beyond limit (h.mu held).
func trimKept[K comparable, V kept](p map[K]V, limit int) {
	if len(p) <= limit {
		return
	}
	var clean []K
	for k, v := range p {
		if !v.dirty() {
			clean = append(clean, k)
		}
	}
	sort.Slice(clean, func(i, j int) bool { return p[clean[i]].at() < p[clean[j]].at() })
	for _, k := range clean[:min(len(clean), len(p)-limit)] {
		delete(p, k)
	}
}

// receipt is what the messages of one pending call said: published marks it clean.
type receipt struct {
	minutes   []sent
	sightings []sentSighting
	coverage  []sentCoverage
	moves     []sentMove
}

// sentMove is one published successor call: its time.
type sentMove struct {
	cluster string
	key     moveKey
	at      int64
}

// lessCaller orders callers for a stable message content.
func lessCaller(k, o moveKey) bool {
	if k.API != o.API {
		return k.API.String() < o.API.String()
	}
	if k.User != o.User {
		return k.User < o.User
	}
	return k.Agent < o.Agent
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
	for _, s := range done.moves {
		if mv := h.moves[s.cluster][s.key]; mv != nil {
			mv.sent = max(mv.sent, s.at)
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
