package transport

import (
	"flag"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/flagenv"
)

// --nats-replicas (and its env twin) reaches the NATS configuration: 1 by default, N for a
// cluster URL list, and refused, naming the flag, with the embedded server or out of range.
func TestReplicasFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want int
		err  string
	}{
		{args: nil, want: 1},
		{args: []string{"--nats-url", "nats://a:4222,nats://b:4222,nats://c:4222", "--nats-replicas", "3"}, want: 3},
		{args: []string{"--nats-url", "nats://a:4222"}, env: map[string]string{"AUDITLENS_NATS_REPLICAS": "3"}, want: 3},
		{args: []string{"--nats-replicas", "3"}, err: "--nats-replicas 3 needs a NATS cluster"},
		{args: []string{"--nats-url", "nats://a:4222", "--nats-replicas", "7"}, err: "--nats-replicas 7"},
	} {
		var cfg Config
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		cfg.RegisterFlags(fs, t.TempDir())
		if err := flagenv.ParseWith(fs, c.args, func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }); err != nil {
			t.Fatal(err)
		}
		err := cfg.Validate()
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%v: %v, want an error with %q", c.args, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.err == "" && cfg.NATS.Replicas != c.want:
			t.Errorf("%v %v: %d replicas, want %d", c.args, c.env, cfg.NATS.Replicas, c.want)
		}
	}
}
