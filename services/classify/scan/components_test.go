package scan

import (
	"strings"
	"testing"
)

// TestComponentTargets: a request to a removed cert-manager CRD version blocks unless
// --target-versions names a cert-manager release before its removal.
func TestComponentTargets(t *testing.T) {
	ev := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseComplete",` +
		`"requestURI":"/apis/cert-manager.io/v1beta1/namespaces/shop/certificates","verb":"create","user":{"username":"alice"},` +
		`"objectRef":{"resource":"certificates","namespace":"shop","apiGroup":"cert-manager.io","apiVersion":"v1beta1"},` +
		`"responseStatus":{"metadata":{},"code":404},"requestReceivedTimestamp":"2026-11-29T10:00:00.000000Z","stageTimestamp":"2026-11-29T10:00:00.000000Z"}` + "\n"
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--target-version", "1.33"}, ExitRemoved},
		{[]string{"--target-version", "1.33", "--target-versions", "cert-manager=1.5"}, ExitFindings},
		{[]string{"--target-versions", "cert-manager=1.6"}, ExitRemoved},
	} {
		code, out, errOut := run(t, ev, append(tc.args, "-")...)
		if code != tc.want || !strings.Contains(out, `"removed_in":"cert-manager 1.6"`) {
			t.Errorf("%v: exit %d, want %d:\n%s\n%s", tc.args, code, tc.want, out, errOut)
		}
	}
	var c ComponentTargets
	if err := c.Set("Istio=1.22, cert-manager=1.6"); err != nil || c.String() != "cert-manager=1.6,istio=1.22" {
		t.Errorf("Set: %v, %s", err, c.String())
	}
	for _, bad := range []string{"istio", "istio=", "=1.2", "istio=one", "a b=1.2"} {
		if err := c.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}
