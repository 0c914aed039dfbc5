package node

import (
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func query(t *testing.T, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	q, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestResolverAnswers(t *testing.T) {
	r := &Resolver{}
	r.rebuild([]any{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "nats", Namespace: "nats"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.40"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "headless", Namespace: "x"}, Spec: corev1.ServiceSpec{ClusterIP: "None"}},
	})
	for _, tc := range []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		a     string
	}{
		{"nats.nats.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, "10.96.0.40"},
		{"NATS.nats.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, "10.96.0.40"},
		{"nats.nats.svc.cluster.local.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, ""},
		{"headless.x.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
		{"other.nats.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
		// Nothing is forwarded: names outside the cluster are refused.
		{"example.com.", dnsmessage.TypeA, dnsmessage.RCodeRefused, ""},
	} {
		resp, ok := r.answer(query(t, tc.name, tc.typ))
		if !ok {
			t.Fatalf("%s: no answer", tc.name)
		}
		var m dnsmessage.Message
		if err := m.Unpack(resp); err != nil {
			t.Fatal(err)
		}
		if m.ID != 7 || !m.Response || m.RCode != tc.rcode {
			t.Errorf("%s %v: id %d response %v rcode %v, want 7 true %v", tc.name, tc.typ, m.ID, m.Response, m.RCode, tc.rcode)
		}
		var got string
		for _, a := range m.Answers {
			if ar, ok := a.Body.(*dnsmessage.AResource); ok {
				got = netip.AddrFrom4(ar.A).String()
			}
		}
		if got != tc.a {
			t.Errorf("%s %v: A %q, want %q", tc.name, tc.typ, got, tc.a)
		}
	}
	if _, ok := r.answer([]byte{1, 2, 3}); ok {
		t.Error("a truncated message got an answer")
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig("/repo")
	if err := cfg.Validate(); err == nil {
		t.Error("a config without Self validated")
	}
	cfg.Self = "/repo/.bin/node"
	if err := cfg.Validate(); err != nil {
		t.Errorf("default config with Self: %v", err)
	}
	cfg.Root = "relative"
	if err := cfg.Validate(); err == nil {
		t.Error("a relative root validated")
	}
}
