package manifests

import (
	"errors"

	"github.com/goccy/go-yaml"

	"github.com/auditlens/auditlens/lib/yamlsafe"
)

// MaxDepth is the deepest nesting of collections accepted in a manifest; a Kubernetes object,
// CRD schemas included, stays far below it.
var MaxDepth = yamlsafe.Manifests.MaxDepth

// ErrTooDeep, ErrAliasExpansion and ErrTooLarge say why a document was refused.
var (
	ErrTooDeep        = yamlsafe.ErrTooDeep
	ErrAliasExpansion = yamlsafe.ErrAliasExpansion
	ErrTooLarge       = yamlsafe.ErrTooLarge
)

// decodeDocument decodes one YAML document (as cut by splitDocuments) into maps, slices and
// scalars within yamlsafe.Manifests, its decoded size bounded by maxSize (--max-document-size):
// what would cost memory out of proportion to its size (deep nesting, millions of tokens,
// aliases that multiply it) is refused before it does.
func decodeDocument(data []byte, maxSize int) (any, error) {
	l := yamlsafe.Manifests
	l.MaxSize = maxSize
	l.MaxBytes = max(l.MaxBytes, len(data)) // the caller bounds the bytes (--max-file-size)
	f, err := yamlsafe.Parse(data, l)
	if err != nil {
		if errors.Is(err, yamlsafe.ErrTooDeep) || errors.Is(err, yamlsafe.ErrTooLarge) || errors.Is(err, yamlsafe.ErrAliasExpansion) {
			return nil, err
		}
		return nil, errors.New("parse: " + yamlsafe.Message(err))
	}
	if len(f.Docs) == 0 || f.Docs[0].Body == nil {
		return nil, nil
	}
	if len(f.Docs) > 1 {
		return nil, errors.New("several documents where one was expected")
	}
	var v any
	if err := yaml.NodeToValue(f.Docs[0].Body, &v); err != nil {
		return nil, errors.New("parse: " + yamlsafe.Message(err))
	}
	return v, nil
}
