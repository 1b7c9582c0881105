package server

import (
	"fmt"
	"time"

	"github.com/meridian-gpu/meridian/hub/retention"
)

// MinIdempotencyWindow is the shortest idempotency window a hub accepts:
// a client's retry must still find its key.
const MinIdempotencyWindow = time.Minute

// idempotencyWindow is Config.IdempotencyWindow with its default.
func (c *Config) idempotencyWindow() time.Duration {
	if c.IdempotencyWindow == 0 {
		return retention.IdempotencyWindow
	}
	return c.IdempotencyWindow
}

// retentionConfig is the retention runner's configuration from Config.
// Nothing is deleted within the idempotency window of its end, the time
// the API promises to keep an idempotency key.
func (c *Config) retentionConfig() retention.Config {
	return retention.Config{
		Policy:   retention.Policy{TTL: c.RetentionTTL, MaxPerQueue: c.RetentionPerQueue, MinAge: c.idempotencyWindow()},
		Interval: c.RetentionInterval,
	}
}

func (c *Config) validateRetention() error {
	switch w := c.idempotencyWindow(); {
	case w < MinIdempotencyWindow:
		return fmt.Errorf("server: Config.IdempotencyWindow %s is shorter than %s (0 means the default, %s)", c.IdempotencyWindow, MinIdempotencyWindow, retention.IdempotencyWindow)
	case c.RetentionTTL < 0:
		return fmt.Errorf("server: Config.RetentionTTL %s is negative (0 keeps finished workloads forever)", c.RetentionTTL)
	case c.RetentionTTL > 0 && c.RetentionTTL < w:
		return fmt.Errorf("server: Config.RetentionTTL %s is shorter than %s, the time idempotency keys are kept after a workload ends", c.RetentionTTL, w)
	case c.RetentionPerQueue < 0:
		return fmt.Errorf("server: Config.RetentionPerQueue %d is negative (0 means no per-queue cap)", c.RetentionPerQueue)
	case c.RetentionInterval < 0:
		return fmt.Errorf("server: Config.RetentionInterval %s is negative", c.RetentionInterval)
	}
	return nil
}

// newRetention builds the retention runner, or returns nil when the policy
// deletes nothing. It runs in every scheduling replica but deletes only
// while that replica leads, fenced by the same election as the loop. It
// chooses from index, which the loop feeds, once that is synced.
func (s *Server) newRetention(index *retention.Index) (*retention.Runner, error) {
	rc := s.cfg.retentionConfig()
	if !rc.Policy.Enabled() {
		return nil, nil
	}
	r, err := retention.New(retention.Deps{
		Store: s.st, Cache: s.cache, Index: index, Leader: s.elector, Logger: s.log, Clock: s.cfg.Clock, Registerer: s.reg, Config: rc,
	})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return r, nil
}
