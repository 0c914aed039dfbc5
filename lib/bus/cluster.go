package bus

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/auditlens/auditlens/lib/reason"
)

// Cluster names come from flags (--cluster, checked by ValidateCluster) and from the
// envelopes of managed clouds, which allow what a subject token does not: EKS names of up to
// 100 characters, names with dots in a GKE label or an Azure resource id. The bus carries any
// name that ValidateClusterName accepts: the subject token (NATS) and key (Kafka) are
// ClusterToken of the name, and the name itself travels in HeaderCluster whenever the token
// differs from it, so that consumers see the original name (Delivery.Cluster).

// MaxClusterName is the longest cluster name the bus carries, in bytes.
const MaxClusterName = 256

// ErrInvalid wraps the refusal of a message the bus cannot carry whatever is retried (a
// cluster name it cannot route, an unknown stream, no id): PublishOrDeadLetter sends it to the
// dead-letter stream alone and publishes the others.
var ErrInvalid = reason.New("message the bus cannot carry", reason.Unpublishable)

// ValidateCluster checks that a cluster name is a token as it is: 1 to 64 of letters,
// digits, '-' and '_'. It checks the --cluster flag; the bus carries more (ValidateClusterName).
func ValidateCluster(name string) error {
	if !isToken(name) {
		return fmt.Errorf("cluster name %q: use 1 to 64 letters, digits, '-' or '_'", name)
	}
	return nil
}

func isToken(name string) bool {
	ok := len(name) >= 1 && len(name) <= 64
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
	}
	return ok
}

// ValidateClusterName checks that the bus can carry a cluster name: 1 to MaxClusterName bytes
// of UTF-8 without control characters (it travels in a header). It runs for every published
// message; an error wraps ErrInvalid.
func ValidateClusterName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty cluster name", ErrInvalid)
	case len(name) > MaxClusterName:
		return fmt.Errorf("%w: cluster name of %d bytes (at most %d): %q", ErrInvalid, len(name), MaxClusterName, Short(name, 100))
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: cluster name %q is not UTF-8", ErrInvalid, name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: cluster name %q holds a control character", ErrInvalid, name)
		}
	}
	return nil
}

// ClusterToken is the subject token (and Kafka key) of a cluster name: the name itself when
// it is a token that does not start with '_', else "_" followed by the name's letters,
// digits and '-' (up to 30) and "_" and 128 bits of the name's SHA-256 in hex. Stable (a
// function of the name), a valid token (at most 64 characters), and collision-free: names
// kept as they are never start with '_', mapped ones always do, and two mapped names share a
// token only if they share the hash.
func ClusterToken(name string) string {
	if isToken(name) && name[0] != '_' {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	b := make([]byte, 0, 64)
	b = append(b, '_')
	for i := 0; i < len(name) && len(b) < 31; i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b = append(b, c)
		}
	}
	b = append(b, '_')
	return string(hex.AppendEncode(b, sum[:16]))
}
