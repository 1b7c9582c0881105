package helmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// ErrNoHelm is returned by FindHelm when no helm binary is found.
var ErrNoHelm = errors.New("helm not found: run scripts/helm.sh (or set MERIDIAN_HELM)")

// FindHelm returns the helm binary to use: $MERIDIAN_HELM, else the one
// scripts/helm.sh installs (${MERIDIAN_TOOLS:-$HOME/.cache/meridian/tools}/bin/helm),
// else helm on PATH.
func FindHelm() (string, error) {
	if p := os.Getenv("MERIDIAN_HELM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("MERIDIAN_HELM %q: %w", p, err)
		}
		return p, nil
	}
	tools := os.Getenv("MERIDIAN_TOOLS")
	if tools == "" {
		if home, err := os.UserHomeDir(); err == nil {
			tools = filepath.Join(home, ".cache", "meridian", "tools")
		}
	}
	if tools != "" {
		p := filepath.Join(tools, "bin", "helm")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p, nil
	}
	return "", ErrNoHelm
}

// Helm runs one helm binary on one chart directory.
type Helm struct {
	Bin   string // helm binary
	Chart string // chart directory
}

// valuesFile writes values as YAML into a temporary file and returns its
// path and a cleanup.
func valuesFile(values map[string]any) (string, func(), error) {
	b, err := yaml.Marshal(values)
	if err != nil {
		return "", nil, fmt.Errorf("values: %w", err)
	}
	f, err := os.CreateTemp("", "meridian-values-*.yaml")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { _ = os.Remove(f.Name()) }
	if _, err := f.Write(b); err != nil {
		f.Close()
		cleanup()
		return "", nil, err
	}
	if err := f.Close(); err != nil {
		cleanup()
		return "", nil, err
	}
	return f.Name(), cleanup, nil
}

// run runs helm with args plus a values file, and returns stdout; on
// failure the error carries helm's stderr.
func (h Helm) run(ctx context.Context, values map[string]any, args ...string) ([]byte, error) {
	if values != nil {
		path, cleanup, err := valuesFile(values)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		args = append(args, "--values", path)
	}
	cmd := exec.CommandContext(ctx, h.Bin, args...)
	// Keep helm away from any user configuration and registries.
	tmp, err := os.MkdirTemp("", "meridian-helm-home-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(tmp, "config"),
		"HELM_CACHE_HOME="+filepath.Join(tmp, "cache"),
		"HELM_DATA_HOME="+filepath.Join(tmp, "data"),
		"KUBECONFIG="+filepath.Join(tmp, "no-kubeconfig"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()+"\n"+stdout.String()))
	}
	return stdout.Bytes(), nil
}

// Template renders the chart as release name in namespace with values
// (nil: the chart's defaults) and returns the manifests.
func (h Helm) Template(ctx context.Context, name, namespace string, values map[string]any) ([]byte, error) {
	return h.run(ctx, values, "template", name, h.Chart, "--namespace", namespace)
}

// Lint runs `helm lint --strict` on the chart with values.
func (h Helm) Lint(ctx context.Context, values map[string]any) ([]byte, error) {
	return h.run(ctx, values, "lint", "--strict", h.Chart)
}

// Objects splits a multi-document manifest into objects, skipping empty
// documents.
func Objects(manifest []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for i := 0; ; i++ {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("manifest document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("manifest document %d: no kind or apiVersion", i)
		}
		out = append(out, u)
	}
}
