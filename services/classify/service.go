package classify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/backoff"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/lib/reason"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/classify/dedup"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// service is the running classify stage.
type service struct {
	cfg     Config
	bus     bus.Bus
	cluster string
	log     *slog.Logger
	engine  classifier
	seen    *dedup.Window
	met     *metrics
	beats   *heartbeats
	running atomic.Bool
}

var _ daemon.Component = (*service)(nil)

// classifier is what the service needs of the rule engine (*rules.Engine); tests put a
// faulty one in its place.
type classifier interface {
	Classify(ev *auditevent.Event, dst []rules.Match) []rules.Match
	Finding(ev *auditevent.Event, m *rules.Match, cluster, node string) *auditlensv1.Finding
	MoveOf(ev *auditevent.Event) rules.Move
	AsEnumeratorRead(m *rules.Match, who string) bool
	Catalogue() *rules.Catalogue
}

// newStage assembles the stage from a checked cfg, its deps and the engine.
func newStage(cfg Config, d daemon.Deps, engine classifier) *service {
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var reg prometheus.Registerer = d.Registry
	if d.Registry == nil {
		reg = nil
	}
	beats := newHeartbeats()
	if ts := engine.Catalogue().Targets(); len(ts) > 0 {
		beats.through = ts[len(ts)-1].String()
	}
	return &service{
		cfg: cfg, bus: d.Bus, cluster: d.Cluster, log: log.With("stage", "classify"),
		engine: engine, seen: dedup.New(cfg.DedupWindow), met: newMetrics(reg), beats: beats,
	}
}

// Ready implements daemon.Component.
func (s *service) Ready() error {
	if !s.running.Load() {
		return errors.New("classify: not consuming")
	}
	return s.bus.Ready()
}

// Run consumes events until ctx is done, then finishes the batches in hand and returns.
func (s *service) Run(ctx context.Context) error {
	// Panics and events too large for the bus are dead-lettered by this service itself, so
	// what is redelivered is almost always an event whose findings could not be published
	// (findings stream unavailable): the bound covers about a day of that, with redelivery's
	// backoff, instead of the bus's default 50 deliveries.
	cons, err := s.bus.Consumer(bus.Events, s.cfg.Group, bus.ConsumerOptions{MaxUnacked: s.cfg.MaxUnacked, AckWait: s.cfg.AckWait, MaxDeliver: classifyMaxDeliver})
	if err != nil {
		return fmt.Errorf("consume events: %w", err)
	}
	in := make(chan *bus.Delivery, s.cfg.BatchSize*s.cfg.Workers)
	var wg sync.WaitGroup
	for range s.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.worker(in)
		}()
	}
	hctx, stopHeartbeats := context.WithCancel(context.Background())
	var hb sync.WaitGroup
	if s.cfg.HeartbeatInterval > 0 {
		hb.Add(1)
		go func() {
			defer hb.Done()
			s.heartbeat(hctx, s.cfg.HeartbeatInterval)
		}()
	}
	s.running.Store(true)
	s.log.Info("consuming", "stream", bus.Events, "group", s.cfg.Group, "workers", s.cfg.Workers)
	err = cons.Consume(ctx, func(ctx context.Context, d *bus.Delivery) {
		select {
		case in <- d:
		case <-ctx.Done():
			_ = d.Nak(0) // not taken: let another replica (or the next start) have it
		}
	})
	s.running.Store(false)
	close(in)
	wg.Wait()
	stopHeartbeats()
	hb.Wait()
	if s.cfg.HeartbeatInterval > 0 {
		s.flushHeartbeats(context.Background())
	}
	if err != nil {
		return fmt.Errorf("consume events: %w", err)
	}
	return nil
}

// worker settles deliveries in batches of about BatchSize events (a delivery of an
// EventBatch counts its events): decode, classify, publish findings and dead letters in one
// call, then ack (or nak all on a failed publish, so nothing is lost).
func (s *service) worker(in <-chan *bus.Delivery) {
	w := &work{dec: auditevent.NewDecoder(s.cfg.MaxEventSize)}
	batch := make([]*bus.Delivery, 0, s.cfg.BatchSize)
	for {
		d, ok := <-in
		if !ok {
			return
		}
		batch = append(batch[:0], d)
		events := eventbatch.Count(d.Header)
		timer := time.NewTimer(s.cfg.BatchWait)
	fill:
		for events < s.cfg.BatchSize {
			select {
			case d, ok := <-in:
				if !ok {
					break fill
				}
				batch = append(batch, d)
				events += eventbatch.Count(d.Header)
			case <-timer.C:
				break fill
			}
		}
		timer.Stop()
		s.settle(w, batch)
	}
}

// work is a worker's scratch space, reused from one settle to the next.
type work struct {
	dec     *auditevent.Decoder
	matches []rules.Match
	events  [][]byte
	bufs    [][]byte // decompressed batches, one per delivery of the settle
	// findings holds a FindingBatch per cluster of a settle.
	findings []*findingBatch
	// minutes counts the decoded events of a settle per cluster and minute of event time
	// (Unix seconds), for the heartbeats.
	minutes map[string]map[int64]uint64
	// planes follows the control plane's releases in the decoded events of a settle, per
	// cluster in order of appearance, for the heartbeats; planes[:nplanes] are this settle's.
	planes  []clusterPlane
	nplanes int
}

// clusterPlane is the control plane of one cluster's events in a settle, and the kinds of
// those events (coverage: input, level, body), each with its newest minute.
type clusterPlane struct {
	cluster string
	cp      kubeversion.ControlPlane
	kinds   map[coverageKey]*int64
	// moves holds the callers' calls of catalogued API versions and of their successors.
	moves map[moveKey]*moveObs
}

// moveObs is a settle's newest calls by one caller of one API (lastOld) and of its
// successor (newest, newestRead: a get, list or watch), Unix seconds of event time (0: none),
// with the kinds of calls (readCall, writeCall) of the API (oldKinds) and of the successor
// after the last of those (newKinds).
type moveObs struct {
	newest, newestRead, lastOld int64
	oldKinds, newKinds          uint8
}

// Kinds of calls, for the moves: a caller that reads the old version and writes the
// successor has not moved its reads.
const (
	readCall uint8 = 1 << iota
	writeCall
)

func kindOf(mv rules.Move) uint8 {
	if mv.Read {
		return readCall
	}
	return writeCall
}

// maxMoveCaller bounds the user and agent of a caller kept for the moves: an agent longer is
// not a client's, and would only fill the heartbeats' memory.
const maxMoveCaller = 4096

// observe keeps what ev (of delivery d, at at) says for the heartbeats: a release the control
// plane names, the kind of event it is, and a caller's move to a successor (mv).
func (p *clusterPlane) observe(ev *auditevent.Event, d *bus.Delivery, at time.Time, mv rules.Move) {
	p.cp.Observe(ev.User.Username, ev.UserAgent, at)
	if (mv.IsOld || len(mv.Replaces) > 0) && len(ev.User.Username)+len(ev.UserAgent) <= maxMoveCaller {
		p.move(ev.User.Username, ev.UserAgent, at.Unix(), mv)
	}
	// The event's strings point into the decoded line, which the next event overwrites: a
	// key kept in the map must own its strings (the levels the apiserver writes are interned).
	k := coverageKey{input: d.Header[bus.HeaderInput], level: internLevel(ev.Level)}
	if k.input == "" {
		k.input = "unknown"
	}
	if env, ok := ev.Annotation(auditevent.EnvelopeAnnotation); ok {
		// "eks/cloudwatch-subscription": the cloud whose envelope it came in.
		cloud, _, _ := strings.Cut(env, "/")
		k.input += " " + cloud
	}
	if rules.NeedsBody(ev) {
		k.writes = "no-body"
		if ev.RequestObjectRaw != nil {
			k.writes = "body"
		}
	}
	if len(k.input) > 64 || len(k.level) > 32 {
		return // not what ingest or the apiserver write: no kind to keep
	}
	if p.kinds == nil {
		p.kinds = map[coverageKey]*int64{}
	}
	m := at.Truncate(time.Minute).Unix()
	k.day = m / 86400
	// Assigning to a key already in a map stores the key given (its strings here point into
	// the decoded line): a kept key is only ever inserted, owning its strings, and its minute
	// changed in place.
	if old := p.kinds[k]; old != nil {
		*old = max(*old, m)
		return
	}
	k.input, k.level = strings.Clone(k.input), strings.Clone(k.level)
	p.kinds[k] = &m
}

// move records a call of mv's old API or of its successor by a caller at sec.
func (p *clusterPlane) move(user, agent string, sec int64, mv rules.Move) {
	if p.moves == nil {
		p.moves = map[moveKey]*moveObs{}
	}
	// The user and agent point into the decoded line, and assigning to a key already in a map
	// stores the key given: a kept key is only ever inserted, owning its strings, and its
	// calls changed in place.
	obs := func(api rules.API) *moveObs {
		k := moveKey{API: api, User: user, Agent: agent}
		if o := p.moves[k]; o != nil {
			return o
		}
		k.User, k.Agent = strings.Clone(user), strings.Clone(agent)
		o := &moveObs{}
		p.moves[k] = o
		return o
	}
	kind := kindOf(mv)
	if mv.IsOld && !mv.Missing {
		o := obs(mv.Old)
		o.lastOld, o.oldKinds, o.newKinds = max(o.lastOld, sec), o.oldKinds|kind, 0
	}
	for _, api := range mv.Replaces {
		o := obs(api)
		o.newest, o.newKinds = max(o.newest, sec), o.newKinds|kind
		if mv.Read {
			o.newestRead = max(o.newestRead, sec)
		}
	}
}

// internLevel returns the audit level as a string of its own for the levels the apiserver
// writes, else level itself (cloned by the caller when kept).
func internLevel(level string) string {
	for _, l := range [...]string{"Metadata", "Request", "RequestResponse", "None"} {
		if level == l {
			return l
		}
	}
	return level
}

// plane returns what the heartbeats keep of cluster's events in this settle.
func (w *work) plane(cluster string) *clusterPlane {
	for i := range w.planes[:w.nplanes] {
		if w.planes[i].cluster == cluster {
			return &w.planes[i]
		}
	}
	if w.nplanes == len(w.planes) {
		w.planes = append(w.planes, clusterPlane{})
	}
	p := &w.planes[w.nplanes]
	w.nplanes++
	// A sighting allocates the ControlPlane's map; most settles have none, so most resets
	// free nothing. The kinds of events are few: their map is kept and cleared.
	p.cluster, p.cp = cluster, kubeversion.ControlPlane{}
	clear(p.kinds)
	clear(p.moves)
	return p
}

// events returns the events of delivery i of a settle: one for a single-event message, every
// event of an EventBatch. The slices stay valid until the next settle.
func (w *work) eventsOf(d *bus.Delivery, i int) ([][]byte, error) {
	if !eventbatch.IsBatch(d.Header) {
		return append(w.events[:0], d.Data), nil
	}
	for len(w.bufs) <= i {
		w.bufs = append(w.bufs, nil)
	}
	var err error
	w.events, w.bufs[i], err = eventbatch.Events(d.Header, d.Data, w.bufs[i], w.events[:0])
	return w.events, err
}

func (s *service) settle(w *work, batch []*bus.Delivery) {
	var out []bus.Message
	var keys []string
	// The findings, per cluster in order of appearance, packed into FindingBatch messages
	// (the worker's, reused).
	clusters := w.findings[:0]
	findingsOf := func(cluster string) *findingBatch {
		for _, fb := range clusters {
			if fb.cluster == cluster {
				return fb
			}
		}
		if len(clusters) == len(w.findings) {
			w.findings = append(w.findings, newFindingBatch(cluster, s.cfg.FindingsMessageBytes, s.cfg.FindingsCompression))
		}
		fb := w.findings[len(clusters)]
		fb.reset(cluster)
		clusters = w.findings[:len(clusters)+1]
		return fb
	}
	inBatch := map[string]bool{}
	now := time.Now()
	clear(w.minutes)
	w.nplanes = 0
	countMinute := func(cluster string, t time.Time) {
		if t.IsZero() || s.cfg.HeartbeatInterval <= 0 {
			return
		}
		if w.minutes == nil {
			w.minutes = map[string]map[int64]uint64{}
		}
		m := w.minutes[cluster]
		if m == nil {
			m = map[int64]uint64{}
			w.minutes[cluster] = m
		}
		m[t.Truncate(time.Minute).Unix()]++
	}
	perRule := map[string]int{}
	events, bad := 0, 0
	for i, d := range batch {
		if d.Delivered > 1 {
			s.met.redelivered.Inc()
		}
		cluster := d.Cluster
		if cluster == "" {
			cluster = s.cluster
		}
		evs, err := w.eventsOf(d, i)
		if err != nil {
			// The framing or compression is broken: the message as a whole is the dead letter.
			events++
			bad++
			s.met.parseErrors.WithLabelValues(reason.Of(err)).Inc()
			s.log.Warn("unreadable batch of events sent to the dead-letter stream", "position", d.Position, "id", bus.Short(d.ID, 100), "err", err)
			out = append(out, s.deadLetter(d, -1, d.Data, cluster, err))
			continue
		}
		batched := eventbatch.IsBatch(d.Header)
		var cp *clusterPlane
		if s.cfg.HeartbeatInterval > 0 {
			cp = w.plane(cluster)
		}
		for j, data := range evs {
			events++
			var found []found
			var at time.Time
			found, at, w.matches, err = s.classify(w.dec, d, data, cluster, now, w.matches[:0], cp)
			if err != nil {
				bad++
				index := -1
				if batched {
					index = j
				}
				out = append(out, s.deadLetter(d, index, data, cluster, err))
				continue
			}
			countMinute(cluster, at)
			for _, f := range found {
				if inBatch[f.key] || s.seen.Seen(f.key) {
					s.met.duplicates.Inc()
					continue
				}
				inBatch[f.key] = true
				if err := findingsOf(cluster).add(f.key, f.finding); err != nil {
					s.log.Error("marshal finding", "err", err)
					continue
				}
				keys = append(keys, f.key)
				perRule[f.finding.RuleId]++
			}
		}
	}
	for _, fb := range clusters {
		out = append(out, fb.messages()...)
	}
	if len(out) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.AckWait)
		err := s.bus.Publish(ctx, out...)
		cancel()
		if err != nil {
			s.log.Warn("publish findings failed; events will be redelivered", "messages", len(batch), "events", events, "err", err)
			for _, d := range batch {
				_ = d.Nak(redelivery.Delay(d.Delivered))
			}
			return
		}
	}
	s.seen.Add(keys...)
	for id, n := range perRule {
		s.met.findings.WithLabelValues(id).Add(float64(n))
	}
	s.met.events.WithLabelValues("ok").Add(float64(events - bad))
	if bad > 0 {
		s.met.events.WithLabelValues("bad").Add(float64(bad))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, d := range batch {
		if err := d.Ack(ctx); err != nil {
			s.log.Warn("ack", "position", d.Position, "err", err)
		}
	}
	// Counted once settled: a batch whose findings could not be published comes back, and
	// is counted then.
	if len(w.minutes) > 0 {
		s.beats.add(w.minutes, now)
	}
	for _, p := range w.planes[:w.nplanes] {
		if ss := p.cp.Sightings(); len(ss) > 0 {
			s.beats.sighted(p.cluster, ss, now)
		}
		if len(p.kinds) > 0 {
			s.beats.covered(p.cluster, p.kinds, now)
		}
		if len(p.moves) > 0 {
			s.beats.moved(p.cluster, p.moves, now)
		}
	}
}

// readSuccessor reports whether the caller of k read k's successor in the
// rules.EnumeratorWindow before sec: in this settle (cp) or one settled before.
func (s *service) readSuccessor(cluster string, cp *clusterPlane, k moveKey, sec int64) bool {
	if o := cp.moves[k]; o != nil && rules.ReadsEveryVersion(o.newestRead, sec) {
		return true
	}
	return rules.ReadsEveryVersion(s.beats.newestRead(cluster, k), sec)
}

// found is one finding of an event with its de-duplication key.
type found struct {
	key     string
	finding *auditlensv1.Finding
}

// errPanic marks an event whose classification panicked.
var errPanic = reason.New("panic while classifying", reason.Panic)

// classify decodes and classifies one event (data) of delivery d. An event that cannot be decoded, or whose
// classification panics (a bug, or a rule meeting input it was not written for), is an error
// for the dead-letter stream: one event never stops the others nor, redelivered for ever,
// restarts the service.
// It returns the event's time (for the heartbeats) and matches (its scratch space) for the
// next call. What the heartbeats keep of the event (the control plane's release, its kind)
// goes to cp (when not nil).
func (s *service) classify(dec *auditevent.Decoder, d *bus.Delivery, data []byte, cluster string, now time.Time, matches []rules.Match, cp *clusterPlane) (out []found, at time.Time, _ []rules.Match, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, at, err = nil, time.Time{}, fmt.Errorf("%w: %v", errPanic, p)
			s.met.panics.Inc()
			s.log.Error("classifying an event panicked; sent to the dead-letter stream", "id", d.ID, "position", d.Position,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	ev, err := dec.DecodeEvent(data)
	if err != nil {
		s.met.parseErrors.WithLabelValues(reason.Of(err)).Inc()
		s.log.Warn("undecodable event sent to the dead-letter stream", "position", d.Position, "source", d.Header[bus.HeaderSource], "err", err)
		return nil, time.Time{}, matches, err
	}
	at = ev.EventTime().UTC()
	var mv rules.Move
	if cp != nil && !at.IsZero() {
		mv = s.engine.MoveOf(ev)
		cp.observe(ev, d, at, mv)
	}
	if !ev.StageTimestamp.IsZero() {
		lag := now.Sub(ev.StageTimestamp).Seconds()
		s.met.lag.Observe(max(lag, 0))
		s.met.lagLast.Set(lag)
	}
	matches = s.engine.Classify(ev, matches)
	if mv.IsOld && mv.Read && !mv.Missing && s.readSuccessor(cluster, cp, moveKey{API: mv.Old, User: ev.User.Username, Agent: ev.UserAgent}, at.Unix()) {
		// A read of the old version minutes after a read of its successor by the same caller:
		// a reader of every served version (a cache, a backup), which stops when it is gone.
		for i := range matches {
			s.engine.AsEnumeratorRead(&matches[i], rules.BothVersions)
		}
	}
	for i := range matches {
		m := &matches[i]
		key := dedup.Key(cluster, m.AuditID(ev.AuditID), m.Rule.ID, m.RequestReceived(ev))
		if m.ID != "" && s.seen.Seen(key) {
			// A sighting already reported today (a kubelet's every request): no finding to
			// build; the batch's check below would drop it as a duplicate anyway.
			s.met.duplicates.Inc()
			continue
		}
		out = append(out, found{key, s.engine.Finding(ev, m, cluster, d.Header[bus.HeaderNode])})
	}
	return out, at, matches, nil
}

// deadLetter wraps an undecodable event (data) of d for the dead-letter stream: the whole
// message (index -1), or event index of an EventBatch, named "<batch id>/<index>" and found
// at "<position> event <index+1>".
func (s *service) deadLetter(d *bus.Delivery, index int, data []byte, cluster string, err error) bus.Message {
	id := d.ID
	if id == "" {
		sum := sha256.Sum256(d.Data)
		id = hex.EncodeToString(sum[:16])
	}
	source := d.Position
	if src := d.Header[bus.HeaderSource]; src != "" {
		source = src + " (" + d.Position + ")"
	}
	if index >= 0 {
		id += "/" + strconv.Itoa(index)
		source += " event " + strconv.Itoa(index+1)
	}
	var extra map[string]string
	if n := d.Header[bus.HeaderNode]; n != "" {
		extra = map[string]string{bus.HeaderNode: n}
	}
	return bus.NewDeadLetter(cluster, "classify", id, source, fmt.Errorf("classify: %w", err), data, extra)
}

// classifyMaxDeliver bounds how often one event is handed to classify before it is given up
// to the dead-letter stream.
const classifyMaxDeliver = 1000

// redelivery is how long an event whose findings could not be published waits before it is
// delivered again: one second, doubling with each delivery up to a minute. Without jitter:
// the events of a failed batch come back together, as one batch again, and what replicas
// hold meanwhile is bounded by --classify-max-unacked however the retries line up.
var redelivery = backoff.Backoff{Min: time.Second, Max: time.Minute, Jitter: -1}
