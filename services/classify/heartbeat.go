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

// minuteCount is the running count of one minute of event time.
type minuteCount struct {
	events  uint64
	dirty   bool      // changed since its last successful publish
	touched time.Time // wall time of its last event
}

// heartbeats counts, per cluster, the events of each minute of event time that this process
// settled (acknowledged), and publishes the changed minutes as Heartbeat messages every
// interval. Counts are running totals since the start, so a heartbeat re-sent, or one
// following a failed one, says the same or more, never a delta to add.
type heartbeats struct {
	mu       sync.Mutex
	clusters map[string]map[int64]*minuteCount // cluster -> minute (Unix seconds) -> count
}

func newHeartbeats() *heartbeats {
	return &heartbeats{clusters: map[string]map[int64]*minuteCount{}}
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

// pending returns the Heartbeat messages of the minutes changed since their last successful
// publish, and forgets old published ones. Each message's id is derived from its content
// ("<cluster>/heartbeat/<hash>"), so a retry of the same message is de-duplicated by the bus.
func (h *heartbeats) pending(now time.Time) ([]bus.Message, []sent, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []bus.Message
	var done []sent
	for cluster, c := range h.clusters {
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
		sort.Slice(minutes, func(i, j int) bool { return minutes[i] < minutes[j] })
		for len(minutes) > 0 {
			part := minutes[:min(len(minutes), heartbeatMinutesPerMessage)]
			minutes = minutes[len(part):]
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
				done = append(done, sent{cluster, m, n})
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

// sent is one published minute count.
type sent struct {
	cluster string
	minute  int64
	events  uint64
}

// published marks the minutes of a successful publish clean, unless they changed meanwhile.
func (h *heartbeats) published(done []sent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range done {
		if mc := h.clusters[s.cluster][s.minute]; mc != nil && mc.events == s.events {
			mc.dirty = false
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
