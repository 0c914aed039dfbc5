package access

import (
	"context"
	"errors"
	"testing"
)

// TestDecisionsHoldForTheSameAnswers: a recorded read's decisions hold for a user decided the
// same on each cluster it looked at (whatever that user's other clusters), not for one decided
// otherwise, and never when a decision failed or changed during the read.
func TestDecisionsHoldForTheSameAnswers(t *testing.T) {
	only := func(allowed ...string) context.Context {
		return WithIdentity(context.Background(), "u", AuthorizerFunc(func(_ context.Context, c string) (bool, error) {
			for _, a := range allowed {
				if a == c {
					return true, nil
				}
			}
			return false, nil
		}))
	}
	var d *Decisions
	// same asks every decision d made of ctx's authorizer.
	same := func(ctx context.Context) bool {
		ok, _, _ := d.SameFrom(ctx, 0)
		return ok
	}
	ctx, d := Recording(only("prod", "dev"))
	if id, _ := Identity(ctx); id != "u" {
		t.Errorf("the recording context's identity %q, want u", id)
	}
	for _, c := range []string{"prod", "staging"} {
		if _, err := Allowed(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for name, c := range map[string]struct {
		ctx  context.Context
		want bool
	}{
		"the same":                 {only("prod", "dev"), true},
		"the same where it looked": {only("prod"), true},
		"allowed staging":          {only("prod", "staging"), false},
		"refused prod":             {only(), false},
		"no authorizer":            {context.Background(), false},
		"a failing authorizer": {WithAuthorizer(context.Background(), AuthorizerFunc(func(context.Context, string) (bool, error) {
			return false, errors.New("apiserver down")
		})), false},
	} {
		if got := same(c.ctx); got != c.want {
			t.Errorf("%s: Same %v, want %v", name, got, c.want)
		}
	}

	// A decision that failed, or that changed during the read, holds for nobody.
	calls := 0
	flaky := WithAuthorizer(context.Background(), AuthorizerFunc(func(context.Context, string) (bool, error) {
		calls++
		return calls == 1, nil
	}))
	ctx, d = Recording(flaky)
	_, _ = Allowed(ctx, "prod")
	_, _ = Allowed(ctx, "prod")
	if same(only("prod")) || same(only()) {
		t.Error("a decision that changed during the read holds")
	}
	ctx, d = Recording(WithAuthorizer(context.Background(), AuthorizerFunc(func(context.Context, string) (bool, error) {
		return false, errors.New("apiserver down")
	})))
	if _, err := Allowed(ctx, "prod"); err == nil {
		t.Error("the recording context hid its authorizer's error")
	}
	if same(only()) {
		t.Error("a failed decision holds")
	}
	// Without an authorizer the recording context allows nothing, as the plain one.
	ctx, d = Recording(context.Background())
	if ok, err := Allowed(ctx, "prod"); ok || err != nil {
		t.Errorf("no authorizer: %v %v", ok, err)
	}
	if !same(only("dev")) || same(only("prod")) {
		t.Error("no authorizer's decisions")
	}
}
