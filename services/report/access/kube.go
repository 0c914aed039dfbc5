package access

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// The resource a user must be allowed to get to read a cluster's console: one RBAC rule
// (apiGroups [auditlens.io], resources [console], resourceNames [the clusters], verbs [get])
// grants a team its clusters.
const (
	Group    = "auditlens.io"
	Resource = "console"
	Verb     = "get"
)

// In-cluster defaults: the pod's service account.
const (
	inClusterTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	inClusterCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// KubeConfig says how to reach the apiserver that reviews tokens and access. The identity
// used (TokenFile) needs create on tokenreviews and subjectaccessreviews: the ClusterRole
// system:auth-delegator.
type KubeConfig struct {
	// URL of the apiserver; empty means in-cluster (https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT).
	URL string
	// TokenFile holds the bearer token of our own identity, read again for each review (the
	// kubelet rotates it).
	TokenFile string
	// CAFile holds the CA certificates the apiserver's serving certificate is checked against.
	CAFile string
	// CacheTTL is how long a token's review and a user's decision on a cluster are reused.
	CacheTTL time.Duration
}

// DefaultKubeConfig is the in-cluster configuration.
func DefaultKubeConfig() KubeConfig {
	return KubeConfig{TokenFile: inClusterTokenFile, CAFile: inClusterCAFile, CacheTTL: time.Minute}
}

// RegisterFlags registers --report-console-kube-url, --report-console-kube-token-file,
// --report-console-kube-ca-file and --report-console-auth-cache-ttl.
func (c *KubeConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "report-console-kube-url", c.URL, "`URL` of the Kubernetes apiserver that reviews the authenticated console listener's tokens (empty: in-cluster)")
	fs.StringVar(&c.TokenFile, "report-console-kube-token-file", c.TokenFile, "`file` holding the token auditlens reviews tokens with (needs the ClusterRole system:auth-delegator)")
	fs.StringVar(&c.CAFile, "report-console-kube-ca-file", c.CAFile, "`file` of CA certificates the apiserver's certificate is checked against")
	fs.DurationVar(&c.CacheTTL, "report-console-auth-cache-ttl", c.CacheTTL, "how long a token review and an access decision are reused")
}

// Validate checks c and never changes it.
func (c KubeConfig) Validate() error {
	if c.URL != "" {
		u, err := url.Parse(c.URL)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("--report-console-kube-url %q: want https://host[:port]", c.URL)
		}
	}
	if c.TokenFile == "" {
		return errors.New("--report-console-kube-token-file is empty")
	}
	if c.CacheTTL < 0 {
		return fmt.Errorf("--report-console-auth-cache-ttl %s: want zero or more", c.CacheTTL)
	}
	return nil
}

// Kube authenticates requests with a bearer token through the apiserver's TokenReview and
// authorizes each cluster with a SubjectAccessReview, as kube-rbac-proxy does.
type Kube struct {
	cfg    KubeConfig
	base   string
	client *http.Client
	log    *slog.Logger

	mu        sync.Mutex
	users     map[[32]byte]cached[*User]
	decisions map[decisionKey]cached[bool]
}

// User is who a token belongs to, as the apiserver says.
type User struct {
	Username string              `json:"username"`
	UID      string              `json:"uid,omitempty"`
	Groups   []string            `json:"groups,omitempty"`
	Extra    map[string][]string `json:"extra,omitempty"`
}

type cached[T any] struct {
	v       T
	expires time.Time
}

type decisionKey struct{ user, cluster string }

// maxCached bounds each cache: beyond it the cache starts over.
const maxCached = 10000

// NewKube checks cfg and loads its CA; log may be nil.
func NewKube(cfg KubeConfig, log *slog.Logger) (*Kube, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(cfg.URL, "/")
	if base == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, errors.New("--report-console-kube-url is empty and KUBERNETES_SERVICE_HOST/PORT are not set (not in a cluster): name the apiserver")
		}
		base = "https://" + net.JoinHostPort(host, port)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read --report-console-kube-ca-file: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--report-console-kube-ca-file %s: no PEM certificate in it", cfg.CAFile)
		}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 8}
	return &Kube{cfg: cfg, base: base, log: log, client: &http.Client{Transport: tr, Timeout: 10 * time.Second},
		users: map[[32]byte]cached[*User]{}, decisions: map[decisionKey]cached[bool]{}}, nil
}

// Handler serves next to requests whose bearer token the apiserver authenticates; their
// authorizer asks the apiserver whether the user may get the console of each cluster. No
// token or a token refused: 401; the apiserver unreachable: 503.
func (k *Kube) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="auditlens console"`)
			http.Error(w, "a bearer token is required (Authorization: Bearer <Kubernetes token>)", http.StatusUnauthorized)
			return
		}
		u, err := k.Authenticate(r.Context(), token)
		if err != nil {
			k.log.Error("review console token", "err", err)
			http.Error(w, "the token could not be reviewed; see the service log", http.StatusServiceUnavailable)
			return
		}
		if u == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="auditlens console", error="invalid_token"`)
			http.Error(w, "the token is not valid", http.StatusUnauthorized)
			return
		}
		a := AuthorizerFunc(func(ctx context.Context, cluster string) (bool, error) { return k.Authorize(ctx, u, cluster) })
		next.ServeHTTP(w, r.WithContext(WithAuthorizer(r.Context(), a)))
	})
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// Authenticate returns the user of token, nil when the apiserver does not authenticate it.
func (k *Kube) Authenticate(ctx context.Context, token string) (*User, error) {
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	k.mu.Lock()
	c, ok := k.users[key]
	k.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.v, nil
	}
	var review struct {
		Status struct {
			Authenticated bool   `json:"authenticated"`
			User          User   `json:"user"`
			Error         string `json:"error"`
		} `json:"status"`
	}
	body := map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": map[string]any{"token": token}}
	if err := k.post(ctx, "/apis/authentication.k8s.io/v1/tokenreviews", body, &review); err != nil {
		return nil, err
	}
	var u *User
	if review.Status.Authenticated && review.Status.User.Username != "" {
		u = &review.Status.User
	}
	k.mu.Lock()
	if len(k.users) >= maxCached {
		clear(k.users)
	}
	k.users[key] = cached[*User]{v: u, expires: now.Add(k.cfg.CacheTTL)}
	k.mu.Unlock()
	return u, nil
}

// Authorize says whether u may get the console of cluster.
func (k *Kube) Authorize(ctx context.Context, u *User, cluster string) (bool, error) {
	if u == nil {
		return false, nil
	}
	key := decisionKey{user: userKey(u), cluster: cluster}
	now := time.Now()
	k.mu.Lock()
	c, ok := k.decisions[key]
	k.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.v, nil
	}
	var review struct {
		Status struct {
			Allowed bool `json:"allowed"`
		} `json:"status"`
	}
	spec := map[string]any{
		"user": u.Username, "uid": u.UID, "groups": u.Groups,
		"resourceAttributes": map[string]any{"group": Group, "resource": Resource, "verb": Verb, "name": cluster},
	}
	if len(u.Extra) > 0 {
		spec["extra"] = u.Extra
	}
	body := map[string]any{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
	if err := k.post(ctx, "/apis/authorization.k8s.io/v1/subjectaccessreviews", body, &review); err != nil {
		return false, err
	}
	k.mu.Lock()
	if len(k.decisions) >= maxCached {
		clear(k.decisions)
	}
	k.decisions[key] = cached[bool]{v: review.Status.Allowed, expires: now.Add(k.cfg.CacheTTL)}
	k.mu.Unlock()
	return review.Status.Allowed, nil
}

// post creates a review at path and decodes the answer into out.
func (k *Kube) post(ctx context.Context, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	token, err := os.ReadFile(k.cfg.TokenFile)
	if err != nil {
		return fmt.Errorf("read --report-console-kube-token-file: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := k.client.Do(req)
	if err != nil {
		return fmt.Errorf("post %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("post %s: %s: %s", path, resp.Status, strings.TrimSpace(string(data[:min(len(data), 512)])))
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

// userKey is everything of u a SubjectAccessReview is asked with: uid, name, groups and extra
// (an OpenShift token's scopes are extra: a scoped token must not reuse the decision of the
// full one, nor the other way), each field length-prefixed so that no two users share a key.
func userKey(u *User) string {
	var b strings.Builder
	field := func(s string) { fmt.Fprintf(&b, "%d:%s", len(s), s) }
	field(u.UID)
	field(u.Username)
	fmt.Fprintf(&b, "g%d", len(u.Groups))
	for _, g := range u.Groups {
		field(g)
	}
	keys := make([]string, 0, len(u.Extra))
	for k := range u.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(&b, "e%d", len(keys))
	for _, k := range keys {
		field(k)
		fmt.Fprintf(&b, "v%d", len(u.Extra[k]))
		for _, v := range u.Extra[k] {
			field(v)
		}
	}
	return b.String()
}
