package rules

import (
	"strings"

	"github.com/auditlens/auditlens/lib/kubeversion"
)

// authProviderClient is the legacy-auth-provider-client heuristic: a kubectl or client-go
// user agent older than 1.26 (the last releases with the in-tree gcp and azure
// auth-providers) used by an identity shaped like a Google or Azure AD account. The
// apiserver cannot see how a token was minted, so the finding is low confidence.
func (m *matcher) authProviderClient() {
	ev := m.ev
	ua := ev.UserAgent
	if ua == "" {
		return
	}
	provider := identityProvider(ev.User.Username, ev.User.Groups)
	if provider == "" {
		return
	}
	minor, ok := clientMinor(ua)
	if !ok || minor >= 26 {
		return
	}
	mt := Match{Confidence: 0, Evidence: []Evidence{{"userAgent", ua}, {"user.username", ev.User.Username}}}
	switch provider {
	case "Google":
		mt.Detail, mt.Value, mt.Plugin = "Google", "gcp", "gke-gcloud-auth-plugin (gcloud components install gke-gcloud-auth-plugin)"
	case "Azure AD":
		mt.Detail, mt.Value, mt.Plugin = "Azure AD", "azure", "kubelogin (az aks install-cli, then kubelogin convert-kubeconfig -l azurecli)"
	default:
		mt.Detail, mt.Value, mt.Plugin = "Google or Azure AD", "gcp or azure",
			"gke-gcloud-auth-plugin (GKE) or kubelogin (AKS)"
	}
	// The replacement names the exec credential plugins (client.authentication.k8s.io), which
	// replace the in-tree auth-provider.
	mt.Replacement = map[string]string{"Google": "exec plugin gke-gcloud-auth-plugin", "Azure AD": "exec plugin kubelogin"}[provider]
	if mt.Replacement == "" {
		mt.Replacement = "exec plugin gke-gcloud-auth-plugin (GKE) or kubelogin (Azure)"
	}
	m.add(LegacyAuthProviderClient, mt)
}

// identityProvider guesses whose identity a username is: "Google", "Azure AD", "either" for
// a plain e-mail address, "" for cluster-local identities.
func identityProvider(user string, groups []string) string {
	if user == "" || strings.HasPrefix(user, "system:") {
		return ""
	}
	switch {
	case strings.HasSuffix(user, ".gserviceaccount.com"), strings.HasSuffix(user, "@gmail.com"),
		strings.HasSuffix(user, "@googlemail.com"), strings.HasSuffix(user, "@google.com"):
		return "Google"
	case strings.Contains(user, "sts.windows.net/"), strings.HasSuffix(user, ".onmicrosoft.com"),
		strings.HasPrefix(user, "aad:"), isGUID(user):
		return "Azure AD"
	}
	for _, g := range groups {
		if isGUID(g) {
			return "Azure AD" // AKS puts AAD group object ids in the groups
		}
	}
	if at := strings.IndexByte(user, '@'); at > 0 && strings.IndexByte(user[at:], '.') > 0 {
		return "either"
	}
	return ""
}

func isGUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// clientMinor reads the Kubernetes minor version of a kubectl or client-go user agent,
// "<name>/v1.<minor>.<patch>[+meta] (<os>/<arch>) kubernetes/<commit>". Programs built
// without version stamping (v0.0.0), the components and other agents are unknown.
func clientMinor(ua string) (int, bool) {
	name, v, ok := kubeversion.Agent(ua)
	if !ok || v.Major != 1 {
		return 0, false
	}
	if name != "kubectl" && !strings.Contains(ua, " kubernetes/") {
		return 0, false
	}
	switch name {
	case "kubelet", "kube-proxy", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "kube-probe":
		return 0, false
	}
	return v.Minor, true
}
