package rules

import (
	"os"
	"slices"
	"testing"

	"k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// bodyGroups says which API groups serve each body resource today.
var bodyGroups = map[string][]string{
	"pods": {""}, "podtemplates": {""}, "replicationcontrollers": {""}, "nodes": {""}, "services": {""}, "persistentvolumes": {""},
	"deployments": {"apps", "extensions"}, "daemonsets": {"apps", "extensions"}, "replicasets": {"apps", "extensions"}, "statefulsets": {"apps"},
	"jobs": {"batch"}, "cronjobs": {"batch"}, "certificatesigningrequests": {"certificates.k8s.io"},
	"storageclasses": {"storage.k8s.io"}, "runtimeclasses": {"node.k8s.io"},
	"ingressclasses":  {"networking.k8s.io"},
	"ingresses":       {"networking.k8s.io", "extensions"},
	"networkpolicies": {"networking.k8s.io", "extensions"},
}

// TestAuditPolicy loads deploy/audit-policy.yaml with the apiserver's own policy loader
// (decoding and validation) and evaluates it: Request level exactly for writes of the
// resources whose rules read bodies, Metadata elsewhere, RequestReceived omitted.
func TestAuditPolicy(t *testing.T) {
	data, err := os.ReadFile("../../../deploy/audit-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.LoadPolicyFromBytes(data)
	if err != nil {
		t.Fatalf("the apiserver rejects deploy/audit-policy.yaml: %v", err)
	}
	if !slices.Contains(p.OmitStages, audit.StageRequestReceived) {
		t.Error("omitStages lacks RequestReceived")
	}
	ev := policy.NewPolicyRuleEvaluator(p)
	level := func(verb, group, resource, subresource string) audit.Level {
		return ev.EvaluatePolicyRule(&authorizer.AttributesRecord{
			User: &user.DefaultInfo{Name: "alice"}, Verb: verb, APIGroup: group, APIVersion: "v1",
			Resource: resource, Subresource: subresource, ResourceRequest: true, Namespace: "default",
		}).Level
	}
	for res := range BodyResources {
		groups := bodyGroups[res]
		if len(groups) == 0 {
			t.Errorf("body resource %s has no group in this test", res)
		}
		for _, g := range groups {
			for _, verb := range []string{"create", "update", "patch"} {
				if l := level(verb, g, res, ""); l != audit.LevelRequest {
					t.Errorf("%s %s/%s logged at %s, want Request", verb, g, res, l)
				}
			}
			for _, verb := range []string{"get", "list", "watch", "delete", "deletecollection"} {
				if l := level(verb, g, res, ""); l != audit.LevelMetadata {
					t.Errorf("%s %s/%s logged at %s, want Metadata", verb, g, res, l)
				}
			}
		}
	}
	for _, c := range [][4]string{
		{"patch", "", "pods", "status"}, {"patch", "", "nodes", "status"}, {"update", "apps", "deployments", "scale"},
		{"create", "", "secrets", ""}, {"update", "", "configmaps", ""}, {"create", "authentication.k8s.io", "tokenreviews", ""},
		{"create", "", "serviceaccounts", "token"}, {"list", "extensions", "ingresses", ""}, {"update", "coordination.k8s.io", "leases", ""},
		{"create", "policy", "podsecuritypolicies", ""},
	} {
		if l := level(c[0], c[1], c[2], c[3]); l != audit.LevelMetadata {
			t.Errorf("%s %s/%s/%s logged at %s, want Metadata", c[0], c[1], c[2], c[3], l)
		}
	}
	// Events: created by a node or kube-proxy at Request level (their warnings), by anyone
	// else at Metadata.
	event := func(name, group, verb, apiGroup string) audit.Level {
		return ev.EvaluatePolicyRule(&authorizer.AttributesRecord{
			User: &user.DefaultInfo{Name: name, Groups: []string{group}}, Verb: verb, APIGroup: apiGroup, APIVersion: "v1",
			Resource: "events", ResourceRequest: true, Namespace: "default",
		}).Level
	}
	for _, g := range []string{"", "events.k8s.io"} {
		for _, c := range []struct {
			name, group, verb string
			want              audit.Level
		}{
			{"system:node:n1", "system:nodes", "create", audit.LevelRequest},
			{"system:kube-proxy", "system:authenticated", "create", audit.LevelRequest},
			{"system:serviceaccount:kube-system:kube-proxy", "system:serviceaccounts", "create", audit.LevelRequest},
			{"system:node:n1", "system:nodes", "patch", audit.LevelMetadata},
			{"system:kube-scheduler", "system:authenticated", "create", audit.LevelMetadata},
			{"alice", "system:authenticated", "create", audit.LevelMetadata},
		} {
			if l := event(c.name, c.group, c.verb, g); l != c.want {
				t.Errorf("%s of %q events by %s: %s, want %s", c.verb, g, c.name, l, c.want)
			}
		}
	}
	nonResource := func(path string) audit.Level {
		return ev.EvaluatePolicyRule(&authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "kubelet"}, Verb: "get", Path: path}).Level
	}
	if l := nonResource("/readyz"); l != audit.LevelNone {
		t.Errorf("/readyz at %s, want None", l)
	}
	if l := nonResource("/apis"); l != audit.LevelMetadata {
		t.Errorf("/apis at %s, want Metadata", l)
	}
}
