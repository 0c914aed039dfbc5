package kubeversion

import (
	"testing"
	"time"
)

func TestControlPlane(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	type ev struct {
		user, ua string
		at       time.Duration
	}
	cases := []struct {
		name   string
		events []ev
		want   string // "" : unknown
	}{
		{"nothing", nil, ""},
		{"apiserver", []ev{{"system:apiserver", "kube-apiserver/v1.37.2 (linux/amd64) kubernetes/abc", 0}}, "1.37"},
		{"controller manager's controllers", []ev{
			{"system:serviceaccount:kube-system:service-account-controller", "kube-controller-manager/v1.28.7 (linux/amd64) kubernetes/c8dcb00/system:serviceaccount:kube-system:service-account-controller", 0},
		}, "1.28"},
		{"apiserver first, the others lag during an upgrade", []ev{
			{"system:kube-controller-manager", "kube-controller-manager/v1.36.1 (linux/amd64) kubernetes/abc", time.Minute},
			{"system:apiserver", "kube-apiserver/v1.37.0 (linux/amd64) kubernetes/abc", 0},
		}, "1.37"},
		{"without the apiserver, the newest component", []ev{
			{"system:kube-controller-manager", "kube-controller-manager/v1.36.1 (linux/amd64) kubernetes/abc", 0},
			{"system:kube-scheduler", "kube-scheduler/v1.35.1 (linux/amd64) kubernetes/abc", time.Minute},
		}, "1.36"},
		{"a rollback: the release seen last", []ev{
			{"system:apiserver", "kube-apiserver/v1.37.0 (linux/amd64) kubernetes/abc", 0},
			{"system:apiserver", "kube-apiserver/v1.36.4 (linux/amd64) kubernetes/abc", time.Hour},
		}, "1.36"},
		{"read out of order", []ev{
			{"system:apiserver", "kube-apiserver/v1.36.4 (linux/amd64) kubernetes/abc", time.Hour},
			{"system:apiserver", "kube-apiserver/v1.37.0 (linux/amd64) kubernetes/abc", 0},
		}, "1.36"},
		// Near misses: anyone can send any agent; kubelets lag; unstamped builds say v0.0.0.
		{"an agent from someone else", []ev{{"alice", "kube-apiserver/v1.99.0 (linux/amd64) kubernetes/abc", 0}}, ""},
		{"a kube-system service account posing as the apiserver", []ev{{"system:serviceaccount:kube-system:x", "kube-apiserver/v1.99.0", 0}}, ""},
		{"a kubelet", []ev{{"system:node:n1", "kubelet/v1.33.4 (linux/amd64) kubernetes/abc", 0}}, ""},
		{"an unstamped build", []ev{{"system:apiserver", "kube-apiserver/v0.0.0 (linux/amd64) kubernetes/$Format", 0}}, ""},
		{"kubectl", []ev{{"admin", "kubectl/v1.37.0 (linux/amd64) kubernetes/abc", 0}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var cp ControlPlane
			for _, e := range c.events {
				cp.Observe(e.user, e.ua, t0.Add(e.at))
			}
			if got := cp.Version().String(); got != c.want {
				t.Errorf("Version() = %q, want %q (sightings %v)", got, c.want, cp.Sightings())
			}
			// Two readers' shares merged say the same as one reader of everything.
			var a, b ControlPlane
			for i, e := range c.events {
				half := &a
				if i%2 == 1 {
					half = &b
				}
				half.Observe(e.user, e.ua, t0.Add(e.at))
			}
			a.Merge(&b)
			if got := a.Version().String(); got != c.want {
				t.Errorf("merged Version() = %q, want %q", got, c.want)
			}
		})
	}
}

// BenchmarkObserve is the cost an event pays that is not the control plane's (most of them).
func BenchmarkObserve(b *testing.B) {
	var cp ControlPlane
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	for b.Loop() {
		cp.Observe("system:serviceaccount:argocd:argocd-application-controller", "argocd-application-controller/v0.0.0 (linux/amd64) kubernetes/$Format", at)
	}
}
