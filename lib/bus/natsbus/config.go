package natsbus

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/auditlens/auditlens/lib/secret"
)

// Embedded is the URL value that starts an in-process server.
const Embedded = "embedded"

// Config configures the connection and the streams.
type Config struct {
	// URL is a NATS URL list ("nats://a:4222,nats://b:4222") or Embedded.
	URL string
	// StoreDir is the JetStream file store of the embedded server.
	StoreDir string
	// EmbeddedListen, when set, makes the embedded server also listen on this host:port so
	// other processes can connect; otherwise it is reachable in-process only.
	EmbeddedListen string

	// Authentication and TLS for a remote server; all optional.
	User, Password, Token string
	CredsFile, NKeyFile   string
	TLSCAFile             string
	TLSCertFile           string
	TLSKeyFile            string

	// Name is the client connection name shown by the server.
	Name string
	// Duplicates is the de-duplication window of the streams (default 2m).
	Duplicates time.Duration
	// MaxAge bounds how long messages are kept (default 7 days).
	MaxAge time.Duration
	// Replicas of each stream in a clustered deployment (default 1; 1 to 5, and 1 with the
	// embedded server). An existing stream is scaled to it; the durable consumers follow
	// their stream.
	Replicas int
	// MaxInflight bounds asynchronous publishes awaiting an acknowledgement (default 4096).
	MaxInflight int
	// StallWait is how long Publish waits for room when MaxInflight is reached (default 10s).
	StallWait time.Duration
	// AckTimeout bounds the wait for one publish acknowledgement (default 30s).
	AckTimeout time.Duration
	// OneAtATime publishes every message on its own even where the server offers batched
	// publishing (nats-server >= 2.14), as auditlens does with older servers.
	OneAtATime bool

	Logger *slog.Logger
}

func (c *Config) withDefaults() Config {
	o := *c
	if o.Duplicates <= 0 {
		o.Duplicates = 2 * time.Minute
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 7 * 24 * time.Hour
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = 4096
	}
	if o.StallWait <= 0 {
		o.StallWait = 10 * time.Second
	}
	if o.AckTimeout <= 0 {
		o.AckTimeout = 30 * time.Second
	}
	if o.Name == "" {
		o.Name = "auditlens"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports the first configuration error, naming the flag at fault.
func (c *Config) Validate() error {
	if c.URL == "" {
		return errors.New("--nats-url is empty: give a NATS URL or \"embedded\"")
	}
	if c.URL == Embedded && c.StoreDir == "" {
		return errors.New("--nats-url embedded needs --nats-store-dir")
	}
	if c.URL != Embedded {
		for _, u := range strings.Split(c.URL, ",") {
			u = strings.TrimSpace(u)
			if !strings.Contains(u, "://") && strings.Contains(u, "/") {
				return fmt.Errorf("--nats-url %q is not a NATS URL (nats://host:4222)", secret.URL(u))
			}
		}
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("--nats-tls-cert and --nats-tls-key go together")
	}
	return c.validateReplicas()
}

func (c *Config) authOptions() ([]nats.Option, error) {
	var o []nats.Option
	if c.User != "" {
		o = append(o, nats.UserInfo(c.User, c.Password))
	}
	if c.Token != "" {
		o = append(o, nats.Token(c.Token))
	}
	if c.CredsFile != "" {
		o = append(o, nats.UserCredentials(c.CredsFile))
	}
	if c.NKeyFile != "" {
		opt, err := nats.NkeyOptionFromSeed(c.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey-file %s: %w", c.NKeyFile, err)
		}
		o = append(o, opt)
	}
	if c.TLSCAFile != "" {
		o = append(o, nats.RootCAs(c.TLSCAFile))
	}
	if c.TLSCertFile != "" {
		o = append(o, nats.ClientCert(c.TLSCertFile, c.TLSKeyFile))
	}
	return o, nil
}
