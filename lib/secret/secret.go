// Package secret keeps credentials out of what auditlens logs and returns in errors: URLs and
// DSNs are shown with their password and secret query parameters masked.
package secret

import (
	"net/url"
	"strings"
)

// Mask replaces a secret in a shown URL.
const Mask = "xxxxx"

// URL returns raw (a URL or DSN such as clickhouse://user:pass@host:9000/db?password=...)
// fit for a log line or an error: the password of its user information and the values of
// secret query parameters (password, token, secret, key, ...) are masked, and so is a user
// name without a password, which NATS takes for a token. Text that does not
// parse as a URL is masked from its scheme to its last '@', and in its query, the same way.
func URL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Opaque == "" {
		if u.RawQuery != "" {
			u.RawQuery = query(u.RawQuery)
		}
		if _, hasPassword := u.User.Password(); u.User != nil && !hasPassword {
			// A user name alone may be a token (nats://TOKEN@host).
			u.User = url.User(Mask)
		}
		return u.Redacted()
	}
	// Unparsable (e.g. a password with an unescaped '/' or '%'): hide everything that may be
	// user information, i.e. up to the last '@' before the query.
	rest, q, hasQuery := strings.Cut(raw, "?")
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		start := 0
		if i := strings.Index(rest, "://"); i >= 0 && i < at {
			start = i + 3
		}
		rest = rest[:start] + Mask + rest[at:]
	}
	if hasQuery {
		rest += "?" + query(q)
	}
	return rest
}

// URLs applies URL to each element of a comma-separated list (as --nats-url takes).
func URLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = URL(p)
	}
	return strings.Join(parts, ",")
}

// query masks the values of secret parameters in a raw query, keeping the others as they
// were written (and their order).
func query(raw string) string {
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		name, _, hasValue := strings.Cut(p, "=")
		if key, err := url.QueryUnescape(name); err == nil {
			name = key
		}
		if hasValue && IsSecretName(name) {
			parts[i] = p[:strings.IndexByte(p, '=')+1] + Mask
		}
	}
	return strings.Join(parts, "&")
}

// secretWords are the parts of a parameter name that mark its value as a credential.
var secretWords = []string{"pass", "pwd", "token", "secret", "key", "auth", "cred", "sig"}

// IsSecretName reports whether a parameter called name holds a credential (password,
// access_token, apiKey, client_secret, sig, ...).
func IsSecretName(name string) bool {
	name = strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}
