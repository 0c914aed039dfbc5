// Package cloudwatch is ingest's direct CloudWatch Logs reader: it polls an EKS cluster's log
// group (/aws/eks/<cluster>/cluster, streams kube-apiserver-audit-*) with FilterLogEvents and
// publishes every audit event to the bus, keeping its position in a file that advances only
// after the bus acknowledged the events.
//
// The position is a start time and the ids of the events already stored at or after it, not
// a nextToken. A nextToken is only good for the scan that returned it (for 24 hours at most)
// and says nothing of events that CloudWatch accepts later with older timestamps: EKS ships
// the control plane's logs with a delay, and events of several API servers (streams) arrive
// out of order. So every scan starts Overlap before the newest timestamp stored so far and
// pages through to the end; events it has already stored (Seen, pruned to the window) are
// skipped, not published again. The position is saved during a scan at most every few
// seconds (saveEvery) and at its end, From following the newest stored event page by page:
// a restart, also after SIGKILL, scans the same window again and skips what was stored, so
// nothing is lost (an event arriving later than Overlap behind the newest one is) and nothing
// is stored twice. The bus's de-duplication by message id (<cluster>/<auditID>/<stage>) is
// the second guard: pages stored but not yet recorded in the position when the process died
// are published again and dropped by the bus.
//
// The cost of this choice: every poll reads the last Overlap again (API calls, not bus
// writes), and the position holds one id per event of that window (about 80 bytes each, at
// most MaxSeen): a cluster logging 100 events/s keeps about 1 MB there with the default
// overlap of 2 minutes, and a backlog read in one scan does not grow it with its length. A
// save appends the ids stored since the last one to a journal beside the snapshot, which is
// rewritten only once the journal has outgrown it (position.go): the disk sees about twice
// what was stored, not the whole window at every poll.
//
// Protocol: the CloudWatch Logs JSON 1.1 API (POST, X-Amz-Target:
// Logs_20140328.FilterLogEvents), through the AWS SDK for Go v2 with its default credential
// chain (environment, shared config, EKS Pod Identity, IRSA web identity, instance role).
package cloudwatch

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/lib/reason"
	"github.com/auditlens/auditlens/services/ingest/input"
)

// Input is the metrics label of this input.
const Input = "cloudwatch"

// StartNow is the Start that reads only what arrives after the first start.
const StartNow = "now"

// Config configures the reader.
type Config struct {
	// LogGroup is the log group to read, /aws/eks/<cluster>/cluster; empty: off.
	LogGroup     string
	StreamPrefix string
	Region       string
	// Endpoint replaces the regional endpoint (a VPC endpoint; tests).
	Endpoint string
	// CheckpointDir is where the position is kept: ingest's --checkpoint-dir (no flag of
	// its own).
	CheckpointDir string
	PollInterval  time.Duration
	// Start is where the first start reads from: StartNow or a duration back ("1h").
	Start string
	// Overlap is how far behind the newest stored event every scan starts, for events that
	// CloudWatch accepts late.
	Overlap time.Duration
}

// DefaultConfig is the reader's defaults; off until LogGroup is set.
func DefaultConfig() Config {
	return Config{StreamPrefix: "kube-apiserver-audit", PollInterval: 10 * time.Second, Start: StartNow, Overlap: 2 * time.Minute}
}

// RegisterFlags adds the --cloudwatch-* flags to fs, each defaulting to the current value of
// its field.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.LogGroup, "cloudwatch-log-group", c.LogGroup, "read EKS audit logs directly from this CloudWatch Logs `group` (/aws/eks/CLUSTER/cluster; credentials: the AWS SDK's default chain, e.g. EKS Pod Identity or IRSA; position kept in --checkpoint-dir) (empty: off)")
	fs.StringVar(&c.StreamPrefix, "cloudwatch-stream-prefix", c.StreamPrefix, "read the log streams whose names start with this `prefix`")
	fs.StringVar(&c.Region, "cloudwatch-region", c.Region, "AWS `region` of the log group (empty: AWS_REGION or the shared config)")
	fs.StringVar(&c.Endpoint, "cloudwatch-endpoint", c.Endpoint, "CloudWatch Logs endpoint `URL` instead of the region's (a VPC endpoint)")
	fs.DurationVar(&c.PollInterval, "cloudwatch-poll-interval", c.PollInterval, "how often the log group is asked for new events")
	fs.StringVar(&c.Start, "cloudwatch-start", c.Start, "without a saved position, read from `when`: now, or a duration back such as 1h")
	fs.DurationVar(&c.Overlap, "cloudwatch-overlap", c.Overlap, "every scan starts this long before the newest stored event, to catch events CloudWatch accepts late (already stored ones are skipped)")
}

// On reports whether the reader is configured.
func (c Config) On() bool { return c.LogGroup != "" }

// Validate checks the flags when the reader is on.
func (c Config) Validate() error {
	if c.LogGroup == "" {
		return nil
	}
	if c.PollInterval <= 0 {
		return fmt.Errorf("--cloudwatch-poll-interval %s: want a positive duration", c.PollInterval)
	}
	if c.Overlap < 0 {
		return fmt.Errorf("--cloudwatch-overlap %s: want zero or a positive duration", c.Overlap)
	}
	if _, err := c.startBack(); err != nil {
		return err
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--cloudwatch-endpoint %q: want an http:// or https:// URL", c.Endpoint)
		}
	}
	return nil
}

// startBack is how far back the first start reads.
func (c Config) startBack() (time.Duration, error) {
	if c.Start == StartNow {
		return 0, nil
	}
	d, err := time.ParseDuration(c.Start)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("--cloudwatch-start %q: want now or a duration back such as 1h", c.Start)
	}
	return d, nil
}

// API is the CloudWatch Logs call the reader makes.
type API interface {
	FilterLogEvents(ctx context.Context, in *cloudwatchlogs.FilterLogEventsInput, opts ...func(*cloudwatchlogs.Options)) (*cloudwatchlogs.FilterLogEventsOutput, error)
}

// Source reads one log group.
type Source struct {
	cfg     Config
	env     *input.Env
	em      *input.Emitter
	api     API
	store   *store
	pos     Position
	cluster string
	header  map[string]string
	dec     *envelope.Decoder
	wrapped []byte

	saved      time.Time        // when the position was last saved
	added      map[string]int64 // the ids stored since then
	warnedSeen bool
}

// New loads the AWS configuration (region, credentials chain) and the saved position.
func New(ctx context.Context, cfg Config, env *input.Env) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.LogGroup == "" {
		return nil, errors.New("--cloudwatch-log-group is empty")
	}
	var opts []func(*awsconfig.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cfg.Region))
	}
	ac, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load the AWS configuration: %w", err)
	}
	if ac.Region == "" {
		return nil, errors.New("--cloudwatch-log-group needs a region: give --cloudwatch-region or set AWS_REGION")
	}
	api := cloudwatchlogs.NewFromConfig(ac, func(o *cloudwatchlogs.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	return NewWithAPI(cfg, api, env)
}

// NewWithAPI is New with the CloudWatch Logs client given.
func NewWithAPI(cfg Config, api API, env *input.Env) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.CheckpointDir == "" {
		return nil, errors.New("--cloudwatch-log-group needs --checkpoint-dir")
	}
	st, err := openStore(cfg.CheckpointDir, cfg.LogGroup, cfg.StreamPrefix)
	if err != nil {
		return nil, err
	}
	pos, ok, err := st.load()
	if err != nil {
		return nil, err
	}
	if !ok {
		back, _ := cfg.startBack()
		pos = Position{From: time.Now().Add(-back).UnixMilli(), Seen: map[string]int64{}}
	}
	pos.LogGroup, pos.StreamPrefix = cfg.LogGroup, cfg.StreamPrefix
	cluster := env.Cluster
	if c := envelope.EKSCluster(cfg.LogGroup); c != "" {
		cluster = c
	}
	return &Source{cfg: cfg, env: env, em: env.Emitter(Input), api: api, store: st, pos: pos, cluster: cluster,
		header: env.Header(Input), dec: envelope.NewDecoder(0), added: map[string]int64{}}, nil
}

// Position is the current position (what a restart would resume from).
func (s *Source) Position() Position { return s.pos }

// Ready reports an error while publishing fails (retried, or answered with a retryable
// error), or the bus is not ready.
func (s *Source) Ready() error {
	return s.em.Ready()
}

// Run scans the log group every PollInterval until ctx is cancelled. A scan that fails
// (CloudWatch unreachable, throttled) is retried at the next poll from the saved position.
func (s *Source) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		if err := s.scan(ctx); err != nil && ctx.Err() == nil {
			s.em.Logger().Warn("read CloudWatch Logs (retried at the next poll)", "log_group", s.cfg.LogGroup, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// scan reads every page from the position's From on; each page's new events are stored, then
// recorded in the position, whose From moves to Overlap before the newest stored event (the
// seen ids older than it are forgotten): the position holds the last Overlap of events, not
// the scan's. It is saved at most every saveEvery during a scan, and at its end.
func (s *Source) scan(ctx context.Context) error {
	in := &cloudwatchlogs.FilterLogEventsInput{
		LogGroupName: aws.String(s.cfg.LogGroup),
		StartTime:    aws.Int64(s.pos.From),
	}
	if s.cfg.StreamPrefix != "" {
		in.LogStreamNamePrefix = aws.String(s.cfg.StreamPrefix)
	}
	newest := s.pos.From
	for _, ts := range s.pos.Seen {
		newest = max(newest, ts)
	}
	dirty := false
	for {
		out, err := s.api.FilterLogEvents(ctx, in)
		if err != nil {
			if dirty {
				_ = s.save() // keep what was stored; the error below is the one to report
			}
			return fmt.Errorf("filter log events of %s: %w", s.cfg.LogGroup, err)
		}
		var fresh []types.FilteredLogEvent
		for _, e := range out.Events {
			if _, ok := s.pos.Seen[aws.ToString(e.EventId)]; !ok {
				fresh = append(fresh, e)
			}
		}
		if len(fresh) > 0 {
			if err := s.publish(ctx, fresh); err != nil {
				if dirty {
					_ = s.save()
				}
				return err // ctx cancelled while the bus was failing: the position stays
			}
			for _, e := range fresh {
				ts := aws.ToInt64(e.Timestamp)
				s.pos.Seen[aws.ToString(e.EventId)] = ts
				s.added[aws.ToString(e.EventId)] = ts
				newest = max(newest, ts)
			}
			s.advance(newest)
			dirty = true
			if time.Since(s.saved) >= saveEvery {
				if err := s.save(); err != nil {
					return err
				}
				dirty = false
			}
		}
		if out.NextToken == nil || aws.ToString(out.NextToken) == aws.ToString(in.NextToken) {
			break
		}
		in.NextToken = out.NextToken
	}
	if s.advance(newest) || dirty {
		return s.save()
	}
	return nil
}

// saveEvery spaces the saves of the position during a scan: a restart reads again what was
// stored since the last save, and the bus drops it by id.
const saveEvery = 5 * time.Second

// MaxSeen bounds the ids of stored events the position keeps (about 80 bytes each in its
// file): past it the oldest are forgotten; if a later scan reads them again the bus drops them
// by id within its de-duplication window.
const MaxSeen = 100_000

// advance moves From to Overlap before newest and forgets the ids older than it, and the
// oldest past MaxSeen; it reports whether From moved.
func (s *Source) advance(newest int64) bool {
	moved := false
	if from := newest - s.cfg.Overlap.Milliseconds(); from > s.pos.From {
		s.pos.From = from
		s.pos.prune()
		moved = true
	}
	if dropped := s.pos.bound(MaxSeen); dropped > 0 && !s.warnedSeen {
		s.warnedSeen = true
		s.em.Logger().Warn("more events within --cloudwatch-overlap than the position keeps; forgetting the oldest (the bus drops them by id if read again)", "kept", MaxSeen, "dropped", dropped)
	}
	return moved
}

// save saves the position: what changed since the last save.
func (s *Source) save() error {
	s.saved = time.Now()
	if err := s.store.save(&s.pos, s.added); err != nil {
		return err
	}
	clear(s.added)
	return nil
}

// publish publishes the events, retrying with back-off until the bus took them or ctx is
// cancelled; what they decode to is bounded by the managed sources' budget.
func (s *Source) publish(ctx context.Context, evs []types.FilteredLogEvent) error {
	lim := s.env.Limit()
	s.dec.SetLimit(lim)
	defer s.dec.SetLimit(nil)
	return s.em.PublishRecords(ctx, "the CloudWatch position", "cloudwatch:"+s.cfg.LogGroup, false, lim, len(evs),
		func(i int) input.Converted { return s.messages(evs[i]) })
}

// messages turns one log event into event messages (named cluster/auditID/stage) or a dead
// letter (named by stream and event id). A message that is one audit event is read as
// FilterLogEvents returned it, so that it gets the envelope annotation eks/filter-log-events;
// anything else is read as lib/envelope reads a message (an EventList, an envelope) or is bad.
func (s *Source) messages(e types.FilteredLogEvent) (c input.Converted) {
	stream, id, text := aws.ToString(e.LogStreamName), aws.ToString(e.EventId), aws.ToString(e.Message)
	src := "cloudwatch:" + s.cfg.LogGroup + "/" + stream + "/" + id
	q, _ := json.Marshal(text) // a string always encodes
	s.wrapped = append(append(append(s.wrapped[:0], `{"events":[{"message":`...), q...), `}]}`...)
	items, _, err := s.dec.Split(s.wrapped, s.env.MaxEventSize)
	if err != nil || len(items) != 1 || items[0].Err != nil {
		items, _, err = s.dec.SplitAny([]byte(text), s.env.MaxEventSize)
	}
	if errors.Is(err, envelope.ErrBusy) {
		return input.Converted{Err: err}
	}
	if err != nil {
		label := reason.Of(err)
		c.AddBad(label, 1)
		s.em.Logger().Warn("bad CloudWatch log event sent to the dead-letter stream", "source", src, "reason", label, "err", bus.Short(err.Error(), 512))
		c.Msgs = []bus.Message{s.env.DeadLetter(s.cluster, Input, stream+"/"+id, src, err, []byte(text))}
		return c
	}
	for i, it := range items {
		if it.Err != nil {
			label := reason.Of(it.Err)
			c.AddBad(label, 1)
			s.em.Logger().Warn("bad CloudWatch log event sent to the dead-letter stream", "source", src, "reason", label, "err", bus.Short(it.Err.Error(), 512))
			c.Msgs = append(c.Msgs, s.env.DeadLetter(s.cluster, Input, fmt.Sprintf("%s/%s/%d", stream, id, i), src, it.Err, it.Raw))
			continue
		}
		cluster := it.Origin.ClusterOr(s.cluster)
		c.Events++
		c.Msgs = append(c.Msgs, bus.Message{Stream: bus.Events, Cluster: cluster, ID: bus.EventID(cluster, it.Key()), Header: s.header, Data: it.Raw})
	}
	return c
}
