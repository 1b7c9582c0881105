package agent

import (
	"testing"
	"time"
)

func TestNextRegisterPause(t *testing.T) {
	for _, tc := range []struct{ prev, limit, want time.Duration }{
		{0, 30 * time.Second, 500 * time.Millisecond},
		{500 * time.Millisecond, 30 * time.Second, time.Second},
		{20 * time.Second, 30 * time.Second, 30 * time.Second},
		{30 * time.Second, 30 * time.Second, 30 * time.Second},
		{time.Second, 0, 2 * time.Second},
		{time.Second, 100 * time.Millisecond, 500 * time.Millisecond},
	} {
		if got := nextRegisterPause(tc.prev, tc.limit); got != tc.want {
			t.Errorf("NextRegisterPause(%v, %v) = %v, want %v", tc.prev, tc.limit, got, tc.want)
		}
	}
}
