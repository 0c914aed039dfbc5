package access

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// The resource a user must be allowed to get to read a cluster's console: one RBAC rule
// (apiGroups [auditlens.io], resources [console], resourceNames [the clusters], verbs [get])
// grants a team its clusters.
const (
	Group    = "auditlens.io"
	Resource = "console"
	Verb     = "get"
)

// DefaultAudience is the audience a console token is minted for:
//
//	kubectl create token NAME --audience auditlens-console
//
// The apiserver accepts such a token for the console only: a reader does not hand the
// console a credential that would also work against the apiserver.
const DefaultAudience = "auditlens-console"

// MaxTokenBytes bounds a bearer token: a longer one is refused without a review (service
// account tokens are about 1 KiB, OIDC ID tokens a few).
const MaxTokenBytes = 16 << 10

// KubeConfig says how the authenticated listener asks the apiserver (report's one client
// configuration, --report-kube-*) about tokens and access. That identity needs create on
// tokenreviews and subjectaccessreviews: the ClusterRole system:auth-delegator.
type KubeConfig struct {
	// Audiences a token must be valid for (TokenReview spec.audiences); empty: the
	// apiserver's own (a token minted for the apiserver).
	Audiences []string
	// CacheTTL is how long a token's review (either answer) and an allowed decision are
	// reused; DenyTTL how long a denied decision is.
	CacheTTL, DenyTTL time.Duration
	// ReviewsPerSecond bounds the TokenReviews of tokens not in the cache (a burst of twice
	// as many): past it a request gets 429, so that clients sending new tokens cannot
	// flood the apiserver through the console.
	ReviewsPerSecond float64
}

// DefaultKubeConfig is the configuration of the flags' defaults.
func DefaultKubeConfig() KubeConfig {
	return KubeConfig{Audiences: []string{DefaultAudience}, CacheTTL: time.Minute, DenyTTL: 10 * time.Second, ReviewsPerSecond: 20}
}

// RegisterFlags registers --report-console-token-audiences, --report-console-auth-cache-ttl,
// --report-console-auth-deny-ttl and --report-console-token-reviews-per-second.
func (c *KubeConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("report-console-token-audiences", "comma-separated `audiences` a console token must be minted for (kubectl create token NAME --audience "+DefaultAudience+"); empty: the apiserver's own (default \""+DefaultAudience+"\")", func(s string) error {
		c.Audiences = nil
		for _, a := range strings.Split(s, ",") {
			if a = strings.TrimSpace(a); a != "" {
				c.Audiences = append(c.Audiences, a)
			}
		}
		return nil
	})
	fs.DurationVar(&c.CacheTTL, "report-console-auth-cache-ttl", c.CacheTTL, "how long a token review and an allowed access decision are reused")
	fs.DurationVar(&c.DenyTTL, "report-console-auth-deny-ttl", c.DenyTTL, "how long a denied access decision is reused")
	fs.Float64Var(&c.ReviewsPerSecond, "report-console-token-reviews-per-second", c.ReviewsPerSecond, "most TokenReviews per second of tokens not reviewed recently (a burst of twice as many); more: 429")
}

// Validate checks c and never changes it.
func (c KubeConfig) Validate() error {
	if c.CacheTTL < 0 {
		return fmt.Errorf("--report-console-auth-cache-ttl %s: want zero or more", c.CacheTTL)
	}
	if c.DenyTTL < 0 {
		return fmt.Errorf("--report-console-auth-deny-ttl %s: want zero or more", c.DenyTTL)
	}
	if c.ReviewsPerSecond <= 0 {
		return fmt.Errorf("--report-console-token-reviews-per-second %g: want more than zero", c.ReviewsPerSecond)
	}
	return nil
}

// Kube authenticates requests with a bearer token and authorizes each cluster through the
// apiserver, with k8s.io/apiserver's delegating authenticator (TokenReview: audiences,
// retries, a bounded cache) and authorizer (SubjectAccessReview: separate allow and deny
// lifetimes, cached per user as the review asks: name, uid, groups and extra).
type Kube struct {
	cfg     KubeConfig
	authn   authenticator.Request
	authz   authorizer.Authorizer
	reviews *limitedReviews
	log     *slog.Logger
	errs    *everyLimiter
}

// retry is the back-off of a review the apiserver failed (a 5xx, a 429, a broken
// connection): three tries within about a second, then the request gets 503.
var retry = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 3}

// NewKube asks the apiserver rc names; log may be nil.
func NewKube(rc *rest.Config, cfg KubeConfig, log *slog.Logger) (*Kube, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The Kubernetes libraries log each failed review (klog): into log, each message at most
	// once every 10 seconds, as the console's own errors.
	klog.SetSlogLogger(slog.New(newOnceEvery(log.Handler(), 10*time.Second)))
	sar := rest.CopyConfig(rc)
	sar.QPS, sar.Burst = 50, 100 // access reviews of many readers at once (client-go's default is 5)
	cs, err := kubernetes.NewForConfig(sar)
	if err != nil {
		return nil, fmt.Errorf("the console's apiserver client: %w", err)
	}
	reviews := &limitedReviews{limit: rate.NewLimiter(rate.Limit(cfg.ReviewsPerSecond), max(1, int(2*cfg.ReviewsPerSecond)))}
	limited := rest.CopyConfig(rc)
	limited.QPS = -1 // not client-go's queue: past the bound a request is answered 429 at once
	limited.Wrap(func(rt http.RoundTripper) http.RoundTripper { reviews.next = rt; return reviews })
	authnClient, err := kubernetes.NewForConfig(limited)
	if err != nil {
		return nil, fmt.Errorf("the console's apiserver client: %w", err)
	}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient:  authnClient.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      &retry,
		CacheTTL:                 cfg.CacheTTL,
		APIAudiences:             cfg.Audiences,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("the console's authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: cs.AuthorizationV1(),
		AllowCacheTTL:             cfg.CacheTTL,
		DenyCacheTTL:              cfg.DenyTTL,
		WebhookRetryBackoff:       &retry,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("the console's authorizer: %w", err)
	}
	return &Kube{cfg: cfg, authn: authn, authz: authz, reviews: reviews, log: log, errs: &everyLimiter{every: 10 * time.Second}}, nil
}

// Handler serves next to requests whose bearer token the apiserver authenticates for the
// console's audiences; their authorizer asks the apiserver whether the user may get the
// console of each cluster. No token, a token too long or refused: 401; too many new tokens:
// 429; the apiserver failing: 503 (logged at most once every 10 seconds).
func (k *Kube) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="auditlens console"`)
			http.Error(w, "a bearer token is required (Authorization: Bearer <Kubernetes token>, kubectl create token NAME --audience "+strings.Join(k.cfg.Audiences, ",")+")", http.StatusUnauthorized)
			return
		}
		if len(token) > MaxTokenBytes {
			w.Header().Set("WWW-Authenticate", `Bearer realm="auditlens console", error="invalid_token"`)
			http.Error(w, fmt.Sprintf("the token is longer than %d bytes", MaxTokenBytes), http.StatusUnauthorized)
			return
		}
		u, err := k.Authenticate(r.Context(), r)
		rateBound, unavailable := false, false
		if err != nil {
			rateBound, unavailable = classify(err)
		}
		switch {
		case rateBound:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many tokens to review at once; retry", http.StatusTooManyRequests)
			return
		case unavailable:
			k.logError("review console token", err)
			http.Error(w, "the token could not be reviewed; see the service log", http.StatusServiceUnavailable)
			return
		case err != nil || u == nil:
			w.Header().Set("WWW-Authenticate", `Bearer realm="auditlens console", error="invalid_token"`)
			http.Error(w, "the token is not valid for this console (its audience: "+strings.Join(k.cfg.Audiences, ",")+")", http.StatusUnauthorized)
			return
		}
		a := AuthorizerFunc(func(ctx context.Context, cluster string) (bool, error) {
			ok, err := k.Authorize(ctx, u, cluster)
			if err != nil {
				k.logError("review console access", err)
			}
			return ok, err
		})
		next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), identityOf(u), a)))
	})
}

// identityOf spells everything about u that a SubjectAccessReview sends (name, uid, groups,
// extra): two requests of the same identity get the same decisions.
func identityOf(u user.Info) string {
	b, err := json.Marshal(struct {
		Name, UID string
		Groups    []string
		Extra     map[string][]string
	}{u.GetName(), u.GetUID(), u.GetGroups(), u.GetExtra()})
	if err != nil {
		panic(err) // strings only: Marshal cannot fail
	}
	return "kube:" + string(b)
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

// Authenticate returns the user of r's bearer token, nil when the apiserver does not
// authenticate it for the console's audiences (with an error when it said why, or could not
// be asked: see classify).
func (k *Kube) Authenticate(ctx context.Context, r *http.Request) (user.Info, error) {
	if len(k.cfg.Audiences) > 0 {
		ctx = authenticator.WithAudiences(ctx, k.cfg.Audiences)
	}
	resp, ok, err := k.authn.AuthenticateRequest(r.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	if !ok || resp == nil || resp.User == nil || resp.User.GetName() == "" {
		return nil, nil
	}
	return resp.User, nil
}

// Authorize says whether u may get the console of cluster.
func (k *Kube) Authorize(ctx context.Context, u user.Info, cluster string) (bool, error) {
	if u == nil {
		return false, nil
	}
	d, _, err := k.authz.Authorize(ctx, authorizer.AttributesRecord{
		User: u, Verb: Verb, APIGroup: Group, Resource: Resource, Name: cluster, ResourceRequest: true,
	})
	if err != nil {
		return false, err
	}
	return d == authorizer.DecisionAllow, nil
}

// Reviews counts the TokenReviews sent to the apiserver and those refused by the rate bound.
func (k *Kube) Reviews() (sent, refused uint64) {
	return k.reviews.sent.Load(), k.reviews.refused.Load()
}

// logError logs err at most once every 10 seconds, with how many were left out since.
func (k *Kube) logError(msg string, err error) {
	if n, ok := k.errs.allow(); ok {
		k.log.Error(msg+" (logged at most once every 10s)", "err", err, "unlogged_since", n)
	}
}

// errReviewRate: the review of a new token was refused by ReviewsPerSecond.
var errReviewRate = errors.New("too many token reviews")

// limitedReviews bounds the TokenReviews sent (the delegating authenticator posts them
// through the client's REST client: the bound is on its transport).
type limitedReviews struct {
	next          http.RoundTripper
	limit         *rate.Limiter
	sent, refused atomic.Uint64
}

func (l *limitedReviews) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/tokenreviews") {
		if !l.limit.Allow() {
			l.refused.Add(1)
			return nil, errReviewRate
		}
		l.sent.Add(1)
	}
	return l.next.RoundTrip(r)
}

// classify tells apart what an authentication error means: the rate bound (429), the
// apiserver not answering or failing (503), or a token it refused with a reason (401).
func classify(err error) (rateBound, unavailable bool) {
	errs := []error{err}
	if agg := utilerrors.Aggregate(nil); errors.As(err, &agg) {
		errs = agg.Errors()
	}
	for _, e := range errs {
		var ue *url.Error
		var st apierrors.APIStatus
		switch {
		case errors.Is(e, errReviewRate):
			rateBound = true
		case errors.As(e, &ue), errors.As(e, &st), errors.Is(e, context.DeadlineExceeded), errors.Is(e, context.Canceled):
			unavailable = true
		}
	}
	return rateBound, unavailable
}

// everyLimiter allows one event per period and counts the others.
type everyLimiter struct {
	every   time.Duration
	last    atomic.Int64
	dropped atomic.Uint64
}

func (e *everyLimiter) allow() (dropped uint64, ok bool) {
	now := time.Now().UnixNano()
	last := e.last.Load()
	if now-last < int64(e.every) || !e.last.CompareAndSwap(last, now) {
		e.dropped.Add(1)
		return 0, false
	}
	return e.dropped.Swap(0), true
}

// onceEvery passes each message to next at most once every period, with how many of it were
// left out since ("unlogged_since").
type onceEvery struct {
	next  slog.Handler
	every time.Duration
	mu    *sync.Mutex
	last  map[string]time.Time
	count map[string]int
}

func newOnceEvery(next slog.Handler, every time.Duration) *onceEvery {
	return &onceEvery{next: next, every: every, mu: &sync.Mutex{}, last: map[string]time.Time{}, count: map[string]int{}}
}

func (h *onceEvery) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *onceEvery) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	if t, ok := h.last[r.Message]; ok && r.Time.Sub(t) < h.every {
		h.count[r.Message]++
		h.mu.Unlock()
		return nil
	}
	if len(h.last) >= 1000 {
		clear(h.last)
		clear(h.count)
	}
	n := h.count[r.Message]
	h.last[r.Message], h.count[r.Message] = r.Time, 0
	h.mu.Unlock()
	if n > 0 {
		r.AddAttrs(slog.Int("unlogged_since", n))
	}
	return h.next.Handle(ctx, r)
}

func (h *onceEvery) WithAttrs(as []slog.Attr) slog.Handler {
	return &onceEvery{next: h.next.WithAttrs(as), every: h.every, mu: h.mu, last: h.last, count: h.count}
}

func (h *onceEvery) WithGroup(name string) slog.Handler {
	return &onceEvery{next: h.next.WithGroup(name), every: h.every, mu: h.mu, last: h.last, count: h.count}
}
