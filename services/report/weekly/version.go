package weekly

import "github.com/auditlens/auditlens/lib/kubeversion"

// Version is a Kubernetes minor release, lib/kubeversion's: compared numerically (1.9 <
// 1.16); its Key (Major*1000+Minor) is what the queries compare with removed_in_key.
type Version = kubeversion.Version

// ParseVersion parses "1.22" (kubeversion.Parse: a leading "v", a patch level and a
// pre-release suffix are accepted and ignored).
func ParseVersion(s string) (Version, error) { return kubeversion.Parse(s) }
