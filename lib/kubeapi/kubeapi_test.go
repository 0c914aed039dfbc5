package kubeapi

import (
	"slices"
	"testing"
)

func TestResource(t *testing.T) {
	for kind, want := range map[string]string{
		"Deployment": "deployments", "NetworkPolicy": "networkpolicies", "IngressClass": "ingressclasses",
		"IPAddress": "ipaddresses", "Endpoints": "endpoints", "ComponentStatus": "componentstatuses",
		"CSIStorageCapacity": "csistoragecapacities", "ServiceCIDR": "servicecidrs", "Gateway": "gateways",
		"ResourceClaimParameters": "resourceclaimparameters", "Mesh": "meshes", "Box": "boxes",
		"Policy": "policies", "Gateway2": "gateway2s", "Key": "keys", "A": "a",
	} {
		if got := Resource(kind); got != want {
			t.Errorf("Resource(%s) = %s, want %s", kind, got, want)
		}
	}
}

func TestMoreStableOrdersAsTheAPIServer(t *testing.T) {
	want := []string{"v2", "v1", "v2beta1", "v1beta3", "v1beta2", "v1beta1", "v1alpha2", "v1alpha1", "v1gamma1", "v1beta", "1", ""}
	got := slices.Clone(want)
	slices.Reverse(got)
	slices.SortStableFunc(got, func(a, b string) int {
		switch {
		case MoreStable(a, b):
			return -1
		case MoreStable(b, a):
			return 1
		}
		return 0
	})
	if !slices.Equal(got[:8], want[:8]) {
		t.Errorf("order %v, want %v", got, want)
	}
	for v, level := range map[string]int{"v1": GA, "v2beta1": Beta, "v1alpha3": Alpha, "v1gamma1": Unknown, "x": Unknown, "v": Unknown} {
		if got := Stability(v); got != level {
			t.Errorf("Stability(%q) = %d, want %d", v, got, level)
		}
	}
}

func TestName(t *testing.T) {
	for _, c := range []struct{ group, version, resource, want string }{
		{"policy", "v1beta1", "podsecuritypolicies", "policy/v1beta1 podsecuritypolicies"},
		{"", "v1", "pods", "v1 pods"},
		{"", "", "pods", "pods"},
		{"apps", "v1", "", "apps/v1"},
		{"", "", "", ""},
	} {
		if got := Name(c.group, c.version, c.resource); got != c.want {
			t.Errorf("Name(%q, %q, %q) = %q, want %q", c.group, c.version, c.resource, got, c.want)
		}
	}
}
