package componentconfig

import (
	"bytes"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Marshal writes cfg as a YAML document that Decode reads back, with the
// value of every non-empty Secret field replaced by Redacted (and so,
// were it fed back, refused as a secret in a file).
func (s *Schema[T]) Marshal(cfg *T) ([]byte, error) {
	var n yaml.Node
	if err := n.Encode(cfg); err != nil {
		return nil, fmt.Errorf("componentconfig: encode %s: %w", s.Kind, err)
	}
	for _, f := range s.Fields {
		if f.Secret {
			redact(&n, strings.Split(f.Path, "."))
		}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, fmt.Errorf("componentconfig: encode %s: %w", s.Kind, err)
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func redact(n *yaml.Node, path []string) {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind != yaml.MappingNode || len(path) == 0 {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != path[0] {
			continue
		}
		v := n.Content[i+1]
		if len(path) > 1 {
			redact(v, path[1:])
		} else if v.Kind == yaml.ScalarNode && v.Value != "" {
			v.Value, v.Tag, v.Style = Redacted, "!!str", 0
		}
	}
}
