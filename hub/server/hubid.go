package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// hubIDFile holds a hub's generated id in its data directory.
const hubIDFile = "hub-id"

// defaultHubID is the id of a hub started without one. A hub with a data
// directory keeps the id it generated there on its first start, so a
// restart is the same replica: the leader election then reclaims the
// lease the dead process left (leader.Elector) and the hub leads again at
// once, instead of waiting out its own old lease. Without a data
// directory the id is the host name and process id, as before.
func defaultHubID(dataDir string) (string, error) {
	host, _ := os.Hostname()
	if host == "" {
		host = "hub"
	}
	if strings.TrimSpace(dataDir) == "" {
		return fmt.Sprintf("%s-%d", host, os.Getpid()), nil
	}
	path := filepath.Join(dataDir, hubIDFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if id == "" || len(id) > 253 || strings.ContainsAny(id, " \t\r\n/") {
			return "", fmt.Errorf("server: %s holds %q, not a hub id; delete the file to have a new one made, or pass --hub-id", path, clipID(id))
		}
		return id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("server: read the hub id: %w", err)
	}
	var r [4]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails (Go 1.24+)
	id := fmt.Sprintf("%s-%s", host, hex.EncodeToString(r[:]))
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("server: data directory: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("server: write the hub id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("server: write the hub id: %w", err)
	}
	return id, nil
}

func clipID(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
