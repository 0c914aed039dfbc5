package access

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
)

// TestIdentityNamesWhatAccessDependsOn: users that differ in anything a SubjectAccessReview
// sends (name, uid, groups, extra such as OpenShift's token scopes) have different
// identities, so the console never hands one the answer read for another.
func TestIdentityNamesWhatAccessDependsOn(t *testing.T) {
	base := &user.DefaultInfo{Name: "jane", UID: "1", Groups: []string{"dev"}, Extra: map[string][]string{"scopes.authorization.openshift.io": {"user:full"}}}
	others := []*user.DefaultInfo{
		{Name: "john", UID: "1", Groups: []string{"dev"}, Extra: base.Extra},
		{Name: "jane", UID: "2", Groups: []string{"dev"}, Extra: base.Extra},
		{Name: "jane", UID: "1", Groups: []string{"dev", "admin"}, Extra: base.Extra},
		{Name: "jane", UID: "1", Groups: []string{"dev"}, Extra: map[string][]string{"scopes.authorization.openshift.io": {"user:info"}}},
		{Name: "jane", UID: "1", Groups: []string{"dev"}},
		// No splice of one field into the next makes the same spelling.
		{Name: "jane\",\"UID\":\"1", Groups: []string{"dev"}, Extra: base.Extra},
	}
	id := identityOf(base)
	if same := identityOf(&user.DefaultInfo{Name: "jane", UID: "1", Groups: []string{"dev"},
		Extra: map[string][]string{"scopes.authorization.openshift.io": {"user:full"}}}); same != id {
		t.Errorf("the same user spelled twice: %q and %q", id, same)
	}
	for _, o := range others {
		if identityOf(o) == id {
			t.Errorf("%+v has the identity of %+v: %q", o, base, id)
		}
	}
	ctx := WithIdentity(context.Background(), id, Everyone)
	if got, ok := Identity(ctx); !ok || got != id {
		t.Errorf("Identity: %q %v", got, ok)
	}
	if _, ok := Identity(WithAuthorizer(context.Background(), Everyone)); ok {
		t.Error("an authorizer without an identity names one")
	}
	if ok, _ := Allowed(WithAuthorizer(context.Background(), Everyone), "prod"); !ok {
		t.Error("WithAuthorizer's authorizer is not asked")
	}
	if ok, _ := Allowed(context.Background(), "prod"); ok {
		t.Error("a context without an authorizer allows")
	}
}
