package backup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	utlsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// Info describes a saved or restored snapshot.
type Info struct {
	Path     string
	Bytes    int64
	Revision int64
	Keys     int
	// Version is the etcd version of the member that sent it.
	Version string
}

// Save writes a snapshot of the etcd behind cfg to path, asking each of
// cfg's endpoints in turn until one answers (a snapshot comes from one
// member). It writes path+".part" first and renames it when the snapshot
// is whole, so a failed save never leaves a file that looks complete.
func Save(ctx context.Context, cfg clientv3.Config, path string) (Info, error) {
	if path == "" {
		return Info{}, errors.New("backup: the snapshot file's path is empty")
	}
	if _, err := os.Stat(path); err == nil {
		return Info{}, fmt.Errorf("backup: %s exists; a snapshot never overwrites a file", path)
	}
	if len(cfg.Endpoints) == 0 {
		return Info{}, errors.New("backup: no etcd endpoint: give --etcd-endpoints (for the embedded etcd, its loopback URL: start the hub with --embedded-etcd-port)")
	}
	part := path + ".part"
	var errs []error
	for _, ep := range cfg.Endpoints {
		one := cfg
		one.Endpoints = []string{ep}
		_ = os.Remove(part)
		version, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), one, part)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ep, err))
			continue
		}
		st, err := utlsnapshot.NewV3(zap.NewNop()).Status(part)
		if err != nil {
			_ = os.Remove(part)
			return Info{}, fmt.Errorf("backup: the snapshot from %s does not read back: %w", ep, err)
		}
		if err := os.Rename(part, path); err != nil {
			_ = os.Remove(part)
			return Info{}, fmt.Errorf("backup: %w", err)
		}
		return Info{Path: path, Bytes: st.TotalSize, Revision: st.Revision, Keys: st.TotalKey, Version: version}, nil
	}
	_ = os.Remove(part)
	return Info{}, fmt.Errorf("backup: no endpoint gave a snapshot: %w", errors.Join(errs...))
}

// RevisionBump is added to the restored revision, so that it never goes
// back: revisions fence the leader's writes (hub/leader), and a member or
// watcher that saw a later revision must not see it again for other data.
const RevisionBump = 1_000_000_000

// Member places a restored member in its cluster. The zero value is the
// hub's embedded single member.
type Member struct {
	// Name, PeerURL and InitialCluster as the member will start with; the
	// embedded etcd's are "meridian", a loopback URL, and itself.
	Name, PeerURL, InitialCluster, Token string
}

// RestoreEmbedded restores the snapshot at path as the data of the hub's
// embedded etcd under dataDir (dataDir/etcd), which must not exist yet.
func RestoreEmbedded(path, dataDir string) (Info, error) {
	if dataDir == "" {
		return Info{}, errors.New("backup: the data directory is empty")
	}
	return Restore(path, filepath.Join(dataDir, "etcd"), Member{})
}

// Restore restores the snapshot at path into the member data directory
// dir, which must not exist yet, with the revision bumped past any the
// old cluster could have reached.
func Restore(path, dir string, m Member) (Info, error) {
	if _, err := os.Stat(dir); err == nil {
		return Info{}, fmt.Errorf("backup: %s exists; restore into a new directory (move the old one away first)", dir)
	}
	if m.Name == "" {
		m.Name = "meridian"
	}
	if m.PeerURL == "" {
		m.PeerURL = "http://127.0.0.1:2380" // the embedded member takes its own port at start
	}
	if m.InitialCluster == "" {
		m.InitialCluster = m.Name + "=" + m.PeerURL
	}
	if m.Token == "" {
		m.Token = "meridian-embedded"
	}
	mgr := utlsnapshot.NewV3(zap.NewNop())
	st, err := mgr.Status(path)
	if err != nil {
		return Info{}, fmt.Errorf("backup: %s is not a readable etcd snapshot: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return Info{}, fmt.Errorf("backup: %w", err)
	}
	err = mgr.Restore(utlsnapshot.RestoreConfig{
		SnapshotPath: path, Name: m.Name, OutputDataDir: dir, PeerURLs: []string{m.PeerURL},
		InitialCluster: m.InitialCluster, InitialClusterToken: m.Token,
		RevisionBump: RevisionBump, MarkCompacted: true,
	})
	if err != nil {
		return Info{}, fmt.Errorf("backup: restore %s into %s: %w", path, dir, err)
	}
	return Info{Path: dir, Bytes: st.TotalSize, Revision: st.Revision + RevisionBump, Keys: st.TotalKey}, nil
}
