package demo

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The demo prints its log path for later. With --forever (stopped by
// Ctrl-C) and no --data-dir the state directory, log included, must
// outlive the run; a plain run's temporary directory is removed.
func TestForeverKeepsItsStateDirectory(t *testing.T) {
	for _, forever := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		o := DefaultOptions()
		o.GRPCAddr, o.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
		o.Forever = forever
		f, err := startFederation(ctx, o, testWriter{t})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		dir := filepath.Dir(f.logPath)
		f.close()
		cancel()
		_, err = os.Stat(f.logPath)
		switch {
		case forever && err != nil:
			t.Errorf("--forever: the log %s it printed is gone after the stop: %v", f.logPath, err)
		case forever && f.keptDir != dir:
			t.Errorf("--forever: keptDir %q, want %q (the stop message names it)", f.keptDir, dir)
		case !forever && !os.IsNotExist(err):
			t.Errorf("a plain run left its temporary directory %s behind (%v)", dir, err)
		}
		if forever {
			os.RemoveAll(dir)
		}
	}
}
