package repo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Root walks up from the working directory to the directory holding
// go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root: no go.mod above the working directory")
		}
		dir = parent
	}
}
