// Package access decides who may read the console: on its plain listener only loopback
// requests (a local browser, kubectl port-forward), on its authenticated listener a bearer
// token the Kubernetes apiserver vouches for (TokenReview) whose user may get the console of
// the cluster asked for (SubjectAccessReview on auditlens.io/console, name = the cluster).
package access

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Authorizer says whether the request's user may read the console of cluster.
type Authorizer interface {
	Allowed(ctx context.Context, cluster string) (bool, error)
}

// AuthorizerFunc adapts a function to an Authorizer.
type AuthorizerFunc func(ctx context.Context, cluster string) (bool, error)

// Allowed calls f.
func (f AuthorizerFunc) Allowed(ctx context.Context, cluster string) (bool, error) {
	return f(ctx, cluster)
}

// Everyone allows every cluster: the loopback listener's authorizer (whoever reaches a
// loopback address already runs code on the machine, or passed port-forward's RBAC).
var Everyone = AuthorizerFunc(func(context.Context, string) (bool, error) { return true, nil })

type authorizerKey struct{}

// authorized is what a context carries: the authorizer, and who it decides for.
type authorized struct {
	a  Authorizer
	id string
}

// WithAuthorizer returns ctx carrying a, for a user Identity does not name.
func WithAuthorizer(ctx context.Context, a Authorizer) context.Context {
	return context.WithValue(ctx, authorizerKey{}, authorized{a: a})
}

// WithIdentity returns ctx carrying a, which decides for the user id names: two contexts
// with the same id are allowed the same clusters (id spells everything a decides on).
func WithIdentity(ctx context.Context, id string, a Authorizer) context.Context {
	return context.WithValue(ctx, authorizerKey{}, authorized{a: a, id: id})
}

// Identity is the id of the user ctx's authorizer decides for (WithIdentity), false when
// none is named.
func Identity(ctx context.Context) (string, bool) {
	v, ok := ctx.Value(authorizerKey{}).(authorized)
	return v.id, ok && v.id != ""
}

// Allowed says whether the user of ctx may read the console of cluster. A context that
// carries no authorizer allows nothing: a handler reached without passing Loopback or Kube
// shows no cluster.
func Allowed(ctx context.Context, cluster string) (bool, error) {
	v, ok := ctx.Value(authorizerKey{}).(authorized)
	if !ok || v.a == nil {
		return false, nil
	}
	return v.a.Allowed(ctx, cluster)
}

// Loopback serves next to requests from a loopback address only (with Everyone as their
// authorizer); any other gets 403 and no console content, whatever address the listener
// was given. The request must also name a loopback host (IsLoopbackHost): a web page the user
// opens could otherwise point a name of its own at 127.0.0.1 (DNS rebinding) and read the
// console through the user's browser; such a request gets 421 and no content.
func Loopback(next http.Handler) http.Handler {
	anyone := Anyone(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !IsLoopback(r.RemoteAddr) {
			http.Error(w, "this listener serves the console to loopback clients only (a local browser or kubectl port-forward); "+
				"shared access goes through the authenticated listener (--report-console-auth-addr)", http.StatusForbidden)
			return
		}
		if !IsLoopbackHost(r.Host) {
			http.Error(w, "this listener answers requests for localhost, 127.0.0.1 or [::1] only (not a name that points here: "+
				"DNS rebinding); open the console as http://localhost:<port>/", http.StatusMisdirectedRequest)
			return
		}
		anyone.ServeHTTP(w, r)
	})
}

// IsLoopbackHost reports whether host (a request's Host: name or address, with or without a
// port) names this machine's loopback: localhost, a name under .localhost (RFC 6761), or a
// loopback address.
func IsLoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// AnyoneID is the Identity of the requests Loopback and Anyone serve: one user, allowed
// every cluster.
const AnyoneID = "anyone"

// Anyone serves next to every request, unauthenticated (with Everyone as their authorizer):
// the loopback listener opened on purpose by --report-console-allow-remote.
func Anyone(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), AnyoneID, Everyone)))
	})
}

// IsLoopback reports whether addr (host:port, as http.Request.RemoteAddr) is a loopback
// address (127.0.0.0/8, ::1, or an IPv4 loopback mapped into IPv6).
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	return ip.Unmap().IsLoopback()
}

// IsLoopbackListen reports whether a listen address (host:port) binds loopback only: a
// literal loopback IP or "localhost". An empty host binds every interface.
func IsLoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
