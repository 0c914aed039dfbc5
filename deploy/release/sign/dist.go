package sign

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/dsse"
)

// Build says how dist/ was made, for its provenance.
type Build struct {
	// Source is the repository's URL and Commit the commit built (its Version the release).
	Source, Commit, Version string
	// Command is what built it (make release) and GoVersion the toolchain.
	Command, GoVersion string
	// Dependencies beyond the source and its go.sum files: name to version (libchdb).
	Dependencies map[string]string
}

// In-toto and SLSA names (in-toto Statement v1, SLSA Provenance v1).
const (
	statementType  = "https://in-toto.io/Statement/v1"
	provenanceType = "https://slsa.dev/provenance/v1"
	payloadType    = "application/vnd.in-toto+json"
	buildType      = "https://github.com/auditlens/auditlens/deploy/release@v1"
)

type (
	statement struct {
		Type          string     `json:"_type"`
		Subject       []subject  `json:"subject"`
		PredicateType string     `json:"predicateType"`
		Predicate     provenance `json:"predicate"`
	}
	subject struct {
		Name   string            `json:"name"`
		Digest map[string]string `json:"digest"`
	}
	provenance struct {
		BuildDefinition struct {
			BuildType            string            `json:"buildType"`
			ExternalParameters   map[string]string `json:"externalParameters"`
			ResolvedDependencies []resource        `json:"resolvedDependencies"`
		} `json:"buildDefinition"`
		RunDetails struct {
			Builder struct {
				ID string `json:"id"`
			} `json:"builder"`
		} `json:"runDetails"`
	}
	resource struct {
		URI    string            `json:"uri"`
		Digest map[string]string `json:"digest,omitempty"`
	}
)

// Dist signs a release directory: every file SHA256SUMS lists and SHA256SUMS itself (FILE.sig
// each), then writes provenance.intoto.json, a DSSE envelope of the SLSA provenance whose
// subjects are those files. Every listed file must hash to its line.
func Dist(s signature.Signer, dir string, b Build) error {
	sums, err := checkSums(dir)
	if err != nil {
		return err
	}
	names := sortedKeys(sums)
	for _, n := range append(names, sumsFile) {
		if err := Blob(s, filepath.Join(dir, n)); err != nil {
			return err
		}
	}
	st := statement{Type: statementType, PredicateType: provenanceType}
	for _, n := range names {
		st.Subject = append(st.Subject, subject{Name: n, Digest: map[string]string{"sha256": sums[n]}})
	}
	p := &st.Predicate
	p.BuildDefinition.BuildType = buildType
	p.BuildDefinition.ExternalParameters = map[string]string{"source": b.Source, "version": b.Version, "command": b.Command}
	p.BuildDefinition.ResolvedDependencies = []resource{{URI: "git+" + b.Source + "@" + b.Commit, Digest: map[string]string{"gitCommit": b.Commit}}}
	if b.GoVersion != "" {
		p.BuildDefinition.ResolvedDependencies = append(p.BuildDefinition.ResolvedDependencies, resource{URI: "pkg:golang/toolchain@" + b.GoVersion})
	}
	for _, name := range sortedKeys(b.Dependencies) {
		p.BuildDefinition.ResolvedDependencies = append(p.BuildDefinition.ResolvedDependencies, resource{URI: name + "@" + b.Dependencies[name]})
	}
	p.RunDetails.Builder.ID = b.Source + "/blob/" + b.Commit + "/Makefile#release"
	payload, err := json.Marshal(st)
	if err != nil {
		return err
	}
	env, err := dsse.WrapSigner(s, payloadType).SignMessage(bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("sign the provenance: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, Provenance), append(env, '\n'), 0o644)
}

// VerifyDist checks a signed release directory: SHA256SUMS's signature, every file it lists
// against its line and its own signature, and the provenance envelope's signature and
// subjects (exactly the listed files, with the same digests). It returns the files checked.
func VerifyDist(v signature.Verifier, dir string) ([]string, error) {
	if err := VerifyBlob(v, filepath.Join(dir, sumsFile)); err != nil {
		return nil, err
	}
	sums, err := checkSums(dir)
	if err != nil {
		return nil, err
	}
	names := sortedKeys(sums)
	for _, n := range names {
		if err := VerifyBlob(v, filepath.Join(dir, n)); err != nil {
			return nil, err
		}
	}
	env, err := os.ReadFile(filepath.Join(dir, Provenance))
	if err != nil {
		return nil, fmt.Errorf("provenance: %w", err)
	}
	payload, err := dssePayload(v, env)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Provenance, err)
	}
	var st statement
	if err := json.Unmarshal(payload, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", Provenance, err)
	}
	if st.Type != statementType || st.PredicateType != provenanceType {
		return nil, fmt.Errorf("%s: not an in-toto SLSA provenance statement (%s, %s)", Provenance, st.Type, st.PredicateType)
	}
	var subjects []string
	for _, sub := range st.Subject {
		if sums[sub.Name] != sub.Digest["sha256"] {
			return nil, fmt.Errorf("%s: subject %s has sha256 %s, SHA256SUMS %s", Provenance, sub.Name, sub.Digest["sha256"], sums[sub.Name])
		}
		subjects = append(subjects, sub.Name)
	}
	sort.Strings(subjects)
	if !slices.Equal(subjects, names) {
		return nil, fmt.Errorf("%s: subjects %v, SHA256SUMS lists %v", Provenance, subjects, names)
	}
	return append(names, sumsFile, Provenance), nil
}

// dssePayload verifies a DSSE envelope and returns its payload.
func dssePayload(v signature.Verifier, env []byte) ([]byte, error) {
	if err := dsse.WrapVerifier(v).VerifySignature(bytes.NewReader(env), nil); err != nil {
		return nil, fmt.Errorf("the signature does not match (%w)", err)
	}
	var e struct {
		PayloadType string `json:"payloadType"`
		Payload     []byte `json:"payload"`
	}
	if err := json.Unmarshal(env, &e); err != nil {
		return nil, err
	}
	if e.PayloadType != payloadType {
		return nil, fmt.Errorf("payload type %q, want %q", e.PayloadType, payloadType)
	}
	return e.Payload, nil
}

// checkSums reads SHA256SUMS and checks every file it lists against it.
func checkSums(dir string) (map[string]string, error) {
	sums, err := readSums(dir)
	if err != nil {
		return nil, err
	}
	for _, n := range sortedKeys(sums) {
		got, err := FileSHA256(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		if got != sums[n] {
			return nil, fmt.Errorf("%s: sha256 %s, SHA256SUMS says %s", n, got, sums[n])
		}
	}
	return sums, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
