// Package kubeapi names Kubernetes API resources and versions the way the apiserver does: the
// REST resource of a kind (client-gen's plural) and the stability order of API versions
// (v1 before v1beta2 before v1beta1 before v1alpha1).
package kubeapi

import "strings"

// irregular are the kinds whose REST resource is not the regular English plural of the
// lower-cased kind. Each was checked against the apiserver (kubectl api-resources, or the
// resource name in the generated client-go clientset of the release that served it).
var irregular = map[string]string{
	// core/v1 Endpoints: already plural; client-go typed client uses "endpoints".
	"Endpoints": "endpoints",
	// resource.k8s.io/v1alpha2 (1.30-1.31): client-go's typed clients use
	// "resourceclaimparameters" and "resourceclassparameters".
	"ResourceClaimParameters": "resourceclaimparameters",
	"ResourceClassParameters": "resourceclassparameters",
}

// Resource is the REST resource of a kind: the lower-case plural, as client-gen derives it
// (and as the apiserver logs it in objectRef.resource), unless the kind is irregular. A type
// may name its resource otherwise with a +resourceName tag, which only its source shows.
func Resource(kind string) string {
	if r, ok := irregular[kind]; ok {
		return r
	}
	return strings.ToLower(plural(kind))
}

// plural is the English plural client-gen derives resource names with.
func plural(s string) string {
	if len(s) < 2 {
		return s
	}
	last, prev := s[len(s)-1], s[len(s)-2]
	switch {
	case last == 's' || last == 'x' || last == 'z':
		return s + "es"
	case last == 'h' && (prev == 'c' || prev == 's'):
		return s + "es"
	case last == 'y' && !strings.ContainsRune("aeiouAEIOU", rune(prev)):
		return s[:len(s)-1] + "ies"
	}
	return s + "s"
}

// Stability levels of an API version.
const (
	Unknown = 0 // not a Kubernetes API version ("v2x", "1", "")
	Alpha   = 1 // v1alpha1
	Beta    = 2 // v1beta1
	GA      = 3 // v1
)

// rank is an API version's place in the order: stability, major, then the alpha or beta
// number; the zero rank for what is not an API version.
func rank(v string) [3]int {
	rest, ok := strings.CutPrefix(v, "v")
	major, rest, ok2 := number(rest)
	if !ok || !ok2 {
		return [3]int{}
	}
	if rest == "" {
		return [3]int{GA, major, 0}
	}
	level := Beta
	rest, ok = strings.CutPrefix(rest, "beta")
	if !ok {
		level = Alpha
		rest, ok = strings.CutPrefix(rest, "alpha")
	}
	n, rest, ok2 := number(rest)
	if !ok || !ok2 || rest != "" {
		return [3]int{}
	}
	return [3]int{level, major, n}
}

// number reads the decimal number s starts with.
func number(s string) (n int, rest string, ok bool) {
	i := 0
	for i < len(s) && i < 9 && s[i] >= '0' && s[i] <= '9' {
		n = n*10 + int(s[i]-'0')
		i++
	}
	return n, s[i:], i > 0
}

// Stability is the level of API version v: GA, Beta, Alpha or Unknown.
func Stability(v string) int { return rank(v)[0] }

// MoreStable reports whether API version a is preferred to b, as the apiserver orders them:
// GA before beta before alpha, then the higher major, then the higher alpha or beta number
// (v2 before v1, v1beta2 before v1beta1). What is not an API version comes last.
func MoreStable(a, b string) bool {
	ra, rb := rank(a), rank(b)
	for i := range ra {
		if ra[i] != rb[i] {
			return ra[i] > rb[i]
		}
	}
	return false
}

// Name is how an API is shown to people: "group/version resource", "version resource" for
// the core group, the parts present when some are empty, "" when all are.
func Name(group, version, resource string) string {
	gv := version
	if group != "" {
		gv = group + "/" + version
	}
	switch {
	case gv == "" && resource == "":
		return ""
	case gv == "":
		return resource
	case resource == "":
		return gv
	}
	return gv + " " + resource
}
