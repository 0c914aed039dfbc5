package bus

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/reason"
)

func TestValidateCluster(t *testing.T) {
	for name, ok := range map[string]bool{
		"default": true, "prod-eu_1": true, "A9": true, "": false, "a.b": false, "a b": false,
		"a>": false, "é": false, string(make([]byte, 65)): false,
	} {
		if err := ValidateCluster(name); (err == nil) != ok {
			t.Errorf("%q: %v", name, err)
		}
	}
	long := strings.Repeat("x", 64)
	if ValidateCluster(long) != nil || ValidateCluster(long+"x") == nil {
		t.Error("64 is the limit")
	}
}

// TestClusterToken: every name the bus carries maps to a valid token, stable, the name itself
// when it is one, and different names to different tokens; names the managed clouds allow
// (EKS: 100 characters; dots) are carried.
func TestClusterToken(t *testing.T) {
	eks100 := "e" + strings.Repeat("k", 99)
	names := []string{"default", "prod-eu_1", "a.b", "a_b", "a-b", "_a", "__a", eks100, eks100[:99] + "s", "a b", "é", "a>", "*", "x." + strings.Repeat("y", 200)}
	seen := map[string]string{}
	for _, name := range names {
		if err := ValidateClusterName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
		tok := ClusterToken(name)
		if ValidateCluster(tok) != nil {
			t.Errorf("%q: token %q is not a token", name, tok)
		}
		if ClusterToken(name) != tok {
			t.Errorf("%q: token not stable", name)
		}
		if other, ok := seen[tok]; ok {
			t.Errorf("%q and %q share the token %q", name, other, tok)
		}
		seen[tok] = name
		if ValidateCluster(name) == nil && name[0] != '_' && tok != name {
			t.Errorf("%q: a token already, mapped to %q", name, tok)
		}
	}
	// A mapped token never equals a name kept as it is, nor maps to itself again.
	for tok, name := range seen {
		if tok != name && ClusterToken(tok) == tok {
			t.Errorf("token %q of %q is also a name kept as it is", tok, name)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", MaxClusterName+1), "a\nb", "a\rb", "\xff"} {
		if err := ValidateClusterName(bad); !errors.Is(err, ErrInvalid) || reason.Of(err) != reason.Unpublishable {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
}

// refusing is a publisher that refuses, whole, any publish holding an invalid message, as the
// bus implementations do (they validate before sending anything).
type refusing struct{ stored []Message }

func (r *refusing) Publish(_ context.Context, msgs ...Message) error {
	for i := range msgs {
		if err := msgs[i].Validate(); err != nil {
			return err
		}
	}
	r.stored = append(r.stored, msgs...)
	return nil
}

// TestPublishOrDeadLetterInvalid: a message the bus cannot carry (a cluster name with a
// newline) is dead-lettered alone, under a cluster the bus can carry; the others are stored.
func TestPublishOrDeadLetterInvalid(t *testing.T) {
	msgs := []Message{
		{Stream: Events, Cluster: "prod", ID: "prod/a/x", Data: []byte("{}")},
		{Stream: Events, Cluster: "bad\nname", ID: "bad/b/x", Data: []byte("{}")},
		{Stream: Events, Cluster: "a.b", ID: "a.b/c/x", Data: []byte("{}")},
	}
	var r refusing
	var why []error
	err := PublishOrDeadLetter(context.Background(), &r, msgs, RefusedDeadLetter(msgs, "kafka", "src", "n1", func(_ *Message, err error) { why = append(why, err) }))
	if err != nil {
		t.Fatal(err)
	}
	if len(why) != 1 || !errors.Is(why[0], ErrInvalid) {
		t.Fatalf("refused %v, want the one message with a newline", why)
	}
	var events, dead int
	for _, m := range r.stored {
		switch m.Stream {
		case Events:
			events++
		case DeadLetter:
			dead++
			if m.Cluster != "unknown" || m.ID != "kafka/invalid/bad/b/x" || m.Header[HeaderReasonLabel] != reason.Unpublishable {
				t.Errorf("dead letter %q of %q, label %q", m.ID, m.Cluster, m.Header[HeaderReasonLabel])
			}
		}
	}
	if events != 2 || dead != 1 {
		t.Errorf("stored %d events and %d dead letters, want 2 and 1", events, dead)
	}
}
