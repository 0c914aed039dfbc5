package main

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

// resourceOf is the REST resource of a kind: the lower-case plural, as client-gen derives it
// (and as the apiserver logs it in objectRef.resource), unless the kind is irregular or its
// type carries a +resourceName tag.
func resourceOf(kind string) string {
	if r, ok := irregular[kind]; ok {
		return r
	}
	return strings.ToLower(plural(kind))
}

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
