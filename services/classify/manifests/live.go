package manifests

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/lib/printable"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// LiveConfig says which cluster's Helm releases to read.
type LiveConfig struct {
	// Kubeconfig is the kubeconfig file; Context one of its contexts ("": its current one).
	Kubeconfig, Context string
	// Namespace limits the releases read to one namespace ("": every namespace).
	Namespace string
	// AllRevisions reads every revision, not only the latest deployed one of each release.
	AllRevisions bool
	// PageSize is how many Secrets or ConfigMaps one list request returns.
	PageSize int64
}

// rest is the client configuration of cfg's kubeconfig and context.
func (cfg LiveConfig) rest() (*rest.Config, error) {
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	loading.ExplicitPath = cfg.Kubeconfig
	restCfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, &clientcmd.ConfigOverrides{CurrentContext: cfg.Context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	restCfg.UserAgent = "auditlens-classify-manifests"
	return restCfg, nil
}

// ServerRelease asks the apiserver of cfg's kubeconfig which release it runs (its /version,
// as kubectl version does) and says so in why: "the apiserver's /version (v1.37.2)".
func ServerRelease(cfg LiveConfig) (v kubeversion.Version, why string, err error) {
	restCfg, err := cfg.rest()
	if err != nil {
		return v, "", err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(restCfg)
	if err != nil {
		return v, "", fmt.Errorf("kubeconfig: %w", err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return v, "", fmt.Errorf("the apiserver's /version: %w", err)
	}
	if v, err = kubeversion.Parse(info.GitVersion); err != nil {
		return v, "", fmt.Errorf("the apiserver's /version: %w", err)
	}
	return v, "the apiserver's /version (" + printable.String(info.GitVersion) + ")", nil
}

// storedRelease is one release Secret or ConfigMap, before its release is decoded.
type storedRelease struct {
	kind, namespace, name string
	labels                map[string]string
	encoded               string
}

// better reports whether s is a better revision of its release to check than cur: a deployed
// one over any other, then the higher revision.
func (s *storedRelease) better(cur *storedRelease) bool {
	sd, cd := s.labels["status"] == "deployed", cur.labels["status"] == "deployed"
	if sd != cd {
		return sd
	}
	return revisionLabel(s.labels) > revisionLabel(cur.labels)
}

// CheckLive reads Helm 3's release storage from a cluster (Secrets of type helm.sh/release.v1
// and ConfigMaps labelled owner=helm, page by page) and checks the manifest of each release's
// latest deployed revision (every revision with AllRevisions). It returns the releases and
// documents checked; a release that cannot be decoded is an error naming it, and the others
// are still checked.
func (c *Checker) CheckLive(ctx context.Context, cfg LiveConfig, emit func(source string, f *auditlensv1.Finding)) (releases, docs int, errs []error) {
	restCfg, err := cfg.rest()
	if err != nil {
		return 0, 0, []error{err}
	}
	client, err := corev1client.NewForConfig(restCfg)
	if err != nil {
		return 0, 0, []error{fmt.Errorf("kubeconfig: %w", err)}
	}
	pageSize := cfg.PageSize
	if pageSize <= 0 {
		pageSize = 100
	}
	var stored []*storedRelease         // every revision (AllRevisions)
	best := map[string]*storedRelease{} // namespace/name: the revision to check
	add := func(s *storedRelease) {
		if cfg.AllRevisions {
			stored = append(stored, s)
			return
		}
		key := s.namespace + "/" + s.labels["name"]
		if cur, ok := best[key]; !ok || s.better(cur) {
			if ok {
				c.OlderRevisions++
			}
			best[key] = s
		} else {
			c.OlderRevisions++
		}
	}
	opts := metav1.ListOptions{LabelSelector: "owner=helm", FieldSelector: "type=" + HelmSecretType, Limit: pageSize}
	for {
		list, err := client.Secrets(cfg.Namespace).List(ctx, opts)
		if err != nil {
			return 0, 0, []error{fmt.Errorf("list helm release secrets: %w", err)}
		}
		for i := range list.Items {
			s := &list.Items[i]
			add(&storedRelease{kind: "secret", namespace: s.Namespace, name: s.Name, labels: s.Labels, encoded: string(s.Data["release"])})
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	opts = metav1.ListOptions{LabelSelector: "owner=helm", Limit: pageSize}
	for {
		list, err := client.ConfigMaps(cfg.Namespace).List(ctx, opts)
		if err != nil {
			return 0, 0, []error{fmt.Errorf("list helm release configmaps: %w", err)}
		}
		for i := range list.Items {
			cm := &list.Items[i]
			if cm.Data["release"] == "" {
				continue
			}
			add(&storedRelease{kind: "configmap", namespace: cm.Namespace, name: cm.Name, labels: cm.Labels, encoded: cm.Data["release"]})
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	for _, s := range best {
		stored = append(stored, s)
	}
	sortStored(stored)
	for _, s := range stored {
		where := s.kind + " " + s.namespace + "/" + s.name
		// The Secret's data is already decoded from its base64 by client-go: what is left is
		// Helm's own encoding, as in a ConfigMap.
		r, err := DecodeRelease(s.encoded, false, c.maxSize())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		releases++
		n, err := c.CheckRelease(where+" "+r.Source(), r, emit)
		docs += n
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
	}
	return releases, docs, errs
}

// sortStored orders releases by namespace, name and revision, so the output is stable.
func sortStored(s []*storedRelease) {
	slices.SortFunc(s, func(a, b *storedRelease) int {
		if d := strings.Compare(a.namespace, b.namespace); d != 0 {
			return d
		}
		if d := strings.Compare(a.labels["name"], b.labels["name"]); d != 0 {
			return d
		}
		return revisionLabel(a.labels) - revisionLabel(b.labels)
	})
}
