package e2eutil

import (
	"bytes"
	"os"
	"sync"
	"testing"
)

// SkipOrFail skips t because what cannot run here (msg says why), or fails
// it when MERIDIAN_REQUIRE_<part>=1 says the component must be there.
func SkipOrFail(t testing.TB, part, what, msg string) {
	t.Helper()
	env := "MERIDIAN_REQUIRE_" + part
	if os.Getenv(env) == "1" {
		t.Fatalf("%s=1 and %s", env, msg)
	}
	t.Skipf("SKIPPING %s: %s (set %s=1 to make this a failure)", what, msg, env)
}

// LogBuffer keeps the last few MiB of logs written to it; safe for
// concurrent writers.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// logCap bounds the buffer: past it, the older half is dropped.
const logCap = 4 << 20

func (s *LogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > logCap {
		keep := s.b.Bytes()[s.b.Len()-logCap/2:]
		rest := append([]byte(nil), keep...)
		s.b.Reset()
		s.b.Write(rest)
	}
	return s.b.Write(p)
}

// Tail returns the last n bytes written.
func (s *LogBuffer) Tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.b.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// WriteOnExit writes the buffer's tail to the file MERIDIAN_E2E_LOG names,
// if any, for a TestMain to call after the tests ran.
func (s *LogBuffer) WriteOnExit() {
	if p := os.Getenv("MERIDIAN_E2E_LOG"); p != "" && s != nil {
		_ = os.WriteFile(p, []byte(s.Tail(logCap)), 0o644)
	}
}

// Shared is one fixture for a whole test binary, started on first use:
// the real component, a hub, agents. Its skip rules are the same in every
// end-to-end package: -short, not root, or the component missing skip the
// test (or fail it under MERIDIAN_REQUIRE_<Part>=1); a fixture that starts
// and then breaks fails it.
type Shared[F any] struct {
	// Part names the MERIDIAN_REQUIRE_<Part> variable; What names the
	// tests in skip messages; Component names what -short does not start.
	Part, What, Component string
	// NotRoot explains why root is needed; nil when it is not.
	NotRoot error
	// Start starts the fixture. It returns a nil fixture with an error when
	// the component is not available here (skip), and the fixture with an
	// error when the fixture itself failed (fail).
	Start func() (*F, error)

	once sync.Once
	f    *F
	err  error
}

// Need returns the fixture, starting it on first use.
func (s *Shared[F]) Need(t testing.TB) *F {
	t.Helper()
	if testing.Short() {
		SkipOrFail(t, s.Part, s.What, "-short: not starting "+s.Component)
	}
	if s.NotRoot != nil && os.Geteuid() != 0 {
		SkipOrFail(t, s.Part, s.What, "not root: "+s.NotRoot.Error())
	}
	s.once.Do(func() { s.f, s.err = s.Start() })
	if s.err != nil {
		if s.f == nil {
			SkipOrFail(t, s.Part, s.What, "cannot start it here: "+s.err.Error())
		}
		t.Fatalf("fixture: %v", s.err)
	}
	return s.f
}

// Started returns the fixture if a test started it, for TestMain to stop.
func (s *Shared[F]) Started() *F { return s.f }
