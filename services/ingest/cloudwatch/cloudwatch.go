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
// skipped, not published again. The position is saved after every page the bus acknowledged:
// a restart, also after SIGKILL, scans the same window again and skips what was stored, so
// nothing is lost (an event arriving later than Overlap behind the newest one is) and nothing
// is stored twice. The bus's de-duplication by message id (<cluster>/<auditID>/<stage>) is
// the second guard: a page stored but not yet recorded in the position when the process died
// is published again and dropped by the bus.
//
// The cost of this choice: every poll reads the last Overlap again (API calls, not bus
// writes), and the position file holds one id per event of that window (about 80 bytes each,
// rewritten after every page): a cluster logging 100 events/s keeps about 1 MB there with the
// default overlap of 2 minutes.
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
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/lib/reason"
	"github.com/auditlens/auditlens/services/ingest/metrics"
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
	Endpoint     string
	PollInterval time.Duration
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

// Bus is what the reader needs from the bus.
type Bus interface {
	bus.Publisher
	Ready() error
}

// Options are the reader's collaborators.
type Options struct {
	// Cluster names the events when the log group is not /aws/eks/<cluster>/cluster.
	Cluster string
	Node    string
	// CheckpointDir is where the position is kept (ingest's --checkpoint-dir).
	CheckpointDir string
	MaxEventSize  int
	Logger        *slog.Logger
	Metrics       *metrics.Ingest
	// Batch packs the events of what the source publishes at once into EventBatch messages
	// (lib/bus/eventbatch.Pack); the zero value is eventbatch.DefaultConfig.
	Batch eventbatch.Config
}

// API is the CloudWatch Logs call the reader makes.
type API interface {
	FilterLogEvents(ctx context.Context, in *cloudwatchlogs.FilterLogEventsInput, opts ...func(*cloudwatchlogs.Options)) (*cloudwatchlogs.FilterLogEventsOutput, error)
}

// Source reads one log group.
type Source struct {
	cfg     Config
	opt     Options
	bus     Bus
	api     API
	store   *store
	pos     Position
	cluster string
	header  map[string]string
	dec     *envelope.Decoder
	wrapped []byte
}

// New loads the AWS configuration (region, credentials chain) and the saved position.
func New(ctx context.Context, cfg Config, b Bus, opt Options) (*Source, error) {
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
	return NewWithAPI(cfg, api, b, opt)
}

// NewWithAPI is New with the CloudWatch Logs client given.
func NewWithAPI(cfg Config, api API, b Bus, opt Options) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opt.CheckpointDir == "" {
		return nil, errors.New("--cloudwatch-log-group needs --checkpoint-dir")
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Metrics == nil {
		opt.Metrics = metrics.New(nil)
	}
	opt.Batch = opt.Batch.OrDefault()
	st, err := openStore(opt.CheckpointDir, cfg.LogGroup, cfg.StreamPrefix)
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
	cluster := opt.Cluster
	if c := eksCluster(cfg.LogGroup); c != "" {
		cluster = c
	}
	return &Source{cfg: cfg, opt: opt, bus: b, api: api, store: st, pos: pos, cluster: cluster,
		header: map[string]string{bus.HeaderNode: opt.Node}, dec: envelope.NewDecoder(0)}, nil
}

// eksCluster is <cluster> of the log group /aws/eks/<cluster>/cluster, or "".
func eksCluster(group string) string {
	rest, ok := strings.CutPrefix(group, "/aws/eks/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}

// Position is the current position (what a restart would resume from).
func (s *Source) Position() Position { return s.pos }

// Ready reports whether the bus is.
func (s *Source) Ready() error { return s.bus.Ready() }

// Run scans the log group every PollInterval until ctx is cancelled. A scan that fails
// (CloudWatch unreachable, throttled) is retried at the next poll from the saved position.
func (s *Source) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		if err := s.scan(ctx); err != nil && ctx.Err() == nil {
			s.opt.Logger.Warn("read CloudWatch Logs (retried at the next poll)", "log_group", s.cfg.LogGroup, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// scan reads every page from the position's From on; each page's new events are stored, then
// the position is saved. At the end From moves to Overlap before the newest stored event.
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
	for {
		out, err := s.api.FilterLogEvents(ctx, in)
		if err != nil {
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
				return err // ctx cancelled while the bus was failing: the position stays
			}
			for _, e := range fresh {
				ts := aws.ToInt64(e.Timestamp)
				s.pos.Seen[aws.ToString(e.EventId)] = ts
				newest = max(newest, ts)
			}
			if err := s.store.save(&s.pos); err != nil {
				return err
			}
		}
		if out.NextToken == nil || aws.ToString(out.NextToken) == aws.ToString(in.NextToken) {
			break
		}
		in.NextToken = out.NextToken
	}
	if from := newest - s.cfg.Overlap.Milliseconds(); from > s.pos.From {
		s.pos.From = from
		s.pos.prune()
		return s.store.save(&s.pos)
	}
	return nil
}

// publish publishes the events, retrying with back-off until the bus took them or ctx is
// cancelled.
func (s *Source) publish(ctx context.Context, evs []types.FilteredLogEvent) error {
	var msgs []bus.Message
	events := 0
	bad := map[string]int{}
	for _, e := range evs {
		m, n, label := s.messages(e)
		msgs = append(msgs, m...)
		events += n
		if label != "" {
			bad[label]++
		}
	}
	return s.opt.Metrics.PublishUntilStored(ctx, s.bus, s.opt.Logger, Input, "cloudwatch:"+s.cfg.LogGroup, s.opt.Node, "the CloudWatch position",
		metrics.Batch{Msgs: eventbatch.Pack(s.opt.Batch, msgs), Events: events, Bad: bad})
}

// messages turns one log event into event messages (named cluster/auditID/stage) or a dead
// letter (named by stream and event id). A message that is one audit event is read as
// FilterLogEvents returned it, so that it gets the envelope annotation eks/filter-log-events;
// anything else is read as lib/envelope reads a message (an EventList, an envelope) or is bad.
func (s *Source) messages(e types.FilteredLogEvent) (msgs []bus.Message, events int, bad string) {
	stream, id, text := aws.ToString(e.LogStreamName), aws.ToString(e.EventId), aws.ToString(e.Message)
	src := "cloudwatch:" + s.cfg.LogGroup + "/" + stream + "/" + id
	q, _ := json.Marshal(text) // a string always encodes
	s.wrapped = append(append(append(s.wrapped[:0], `{"events":[{"message":`...), q...), `}]}`...)
	items, _, err := s.dec.Split(s.wrapped, s.opt.MaxEventSize)
	if err != nil || len(items) != 1 || items[0].Err != nil {
		items, _, err = s.dec.SplitAny([]byte(text), s.opt.MaxEventSize)
	}
	if err != nil {
		bad = reason.Of(err)
		s.opt.Logger.Warn("bad CloudWatch log event sent to the dead-letter stream", "source", src, "reason", bad, "err", bus.Short(err.Error(), 512))
		return []bus.Message{bus.NewDeadLetter(s.cluster, Input, stream+"/"+id, src, err, []byte(text), map[string]string{bus.HeaderNode: s.opt.Node})}, 0, bad
	}
	for i, it := range items {
		if it.Err != nil {
			bad = reason.Of(it.Err)
			s.opt.Logger.Warn("bad CloudWatch log event sent to the dead-letter stream", "source", src, "reason", bad, "err", bus.Short(it.Err.Error(), 512))
			msgs = append(msgs, bus.NewDeadLetter(s.cluster, Input, fmt.Sprintf("%s/%s/%d", stream, id, i), src, it.Err, it.Raw, map[string]string{bus.HeaderNode: s.opt.Node}))
			continue
		}
		cluster := it.Origin.ClusterOr(s.cluster)
		events++
		msgs = append(msgs, bus.Message{Stream: bus.Events, Cluster: cluster, ID: bus.EventID(cluster, it.Key()), Header: s.header, Data: it.Raw})
	}
	return msgs, events, bad
}
