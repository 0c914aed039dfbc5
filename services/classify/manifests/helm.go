package manifests

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Helm 3 keeps each revision of a release in a Secret of type helm.sh/release.v1 (the default
// driver) or a ConfigMap (HELM_DRIVER=configmap), both labelled owner=helm, name, status and
// version, named sh.helm.release.v1.NAME.vREVISION. The release is in data.release: the JSON
// of the release, gzip'ed and base64'd, once more base64'd by the Secret. Its manifest is
// what `helm upgrade` compares the new chart with: a removed apiVersion there fails the
// upgrade once the cluster no longer serves it.

// HelmSecretType is the type of Helm 3's release Secrets.
const HelmSecretType = "helm.sh/release.v1"

// Release is what is read of a Helm release: who it is and the manifest it applied.
type Release struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Version   int    `json:"version"`
	Info      struct {
		Status string `json:"status"`
	} `json:"info"`
	Chart struct {
		Metadata struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"metadata"`
	} `json:"chart"`
	Manifest string `json:"manifest"`
}

// Source names the release in a finding's source: "helm release NAMESPACE/NAME revision N
// (chart CHART-VERSION)".
func (r *Release) Source() string {
	chart := r.Chart.Metadata.Name
	if r.Chart.Metadata.Version != "" {
		chart += "-" + r.Chart.Metadata.Version
	}
	return fmt.Sprintf("helm release %s/%s revision %d (chart %s)", r.Namespace, r.Name, r.Version, chart)
}

// helmStorage returns the encoded release of obj when obj is Helm release storage: a Secret
// of type helm.sh/release.v1 (data.release, base64 once more) or a ConfigMap labelled
// owner=helm with data.release.
func helmStorage(obj map[string]any) (encoded string, isSecret, ok bool) {
	if api, _ := obj["apiVersion"].(string); api != "v1" {
		return "", false, false
	}
	data, _ := obj["data"].(map[string]any)
	release, _ := data["release"].(string)
	switch obj["kind"] {
	case "Secret":
		if t, _ := obj["type"].(string); t != HelmSecretType {
			return "", false, false
		}
		return release, true, true
	case "ConfigMap":
		meta, _ := obj["metadata"].(map[string]any)
		labels, _ := meta["labels"].(map[string]any)
		if owner, _ := labels["owner"].(string); owner != "helm" || release == "" {
			return "", false, false
		}
		return release, false, true
	}
	return "", false, false
}

// DecodeRelease decodes data.release of a release Secret (secret: base64 once more) or
// ConfigMap. The release may decompress to at most max bytes: a gzip that expands past it is
// refused, not read to the end.
func DecodeRelease(encoded string, secret bool, max int) (*Release, error) {
	b := []byte(strings.TrimSpace(encoded))
	if secret {
		n, err := base64.StdEncoding.Decode(b, b)
		if err != nil {
			return nil, fmt.Errorf("helm release: data.release is not base64: %w", err)
		}
		b = b[:n]
	}
	n, err := base64.StdEncoding.Decode(b, b)
	if err != nil {
		return nil, fmt.Errorf("helm release: not base64 inside: %w", err)
	}
	b = b[:n]
	if bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("helm release: gzip: %w", err)
		}
		b, err = io.ReadAll(io.LimitReader(zr, int64(max)+1))
		if err != nil {
			return nil, fmt.Errorf("helm release: gzip: %w", err)
		}
		if len(b) > max {
			return nil, fmt.Errorf("helm release: %w: decompresses to more than %d bytes (--max-document-size)", ErrTooLarge, max)
		}
	}
	var r Release
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("helm release: not a release: %w", err)
	}
	if r.Name == "" {
		return nil, errors.New("helm release: not a release: no name")
	}
	return &r, nil
}

// revisionLabel is the revision a release Secret or ConfigMap is labelled with, 0 when none.
func revisionLabel(labels map[string]string) int {
	n, _ := strconv.Atoi(labels["version"])
	return n
}

// EncodeRelease is the inverse of DecodeRelease for a ConfigMap (a Secret's data holds the
// same bytes): r as JSON, gzip'ed and base64'd, as Helm 3 stores it.
func EncodeRelease(r *Release) (string, error) {
	js, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("encode helm release: %w", err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(js); err != nil {
		return "", fmt.Errorf("encode helm release: %w", err)
	}
	if err := zw.Close(); err != nil {
		return "", fmt.Errorf("encode helm release: %w", err)
	}
	return base64.StdEncoding.EncodeToString(gz.Bytes()), nil
}

// NewRelease is a release as Helm stores it, for tests and tools that write release storage.
func NewRelease(name, namespace string, revision int, status, chart, chartVersion, manifest string) *Release {
	r := &Release{Name: name, Namespace: namespace, Version: revision, Manifest: manifest}
	r.Info.Status = status
	r.Chart.Metadata.Name, r.Chart.Metadata.Version = chart, chartVersion
	return r
}
