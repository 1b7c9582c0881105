package componentconfig

import (
	"fmt"
	"strings"
	"time"
)

// Duration is a time.Duration that files, environment variables and flags
// write as Go durations ("30s", "5m", "168h"; "0" for none), and that
// printing writes the same short way.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String writes d as a Go duration without trailing zero units: "168h",
// "1m30s", "0s".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("want a duration such as 30s, 5m or 168h, got %q", string(b))
	}
	*d = Duration(v)
	return nil
}
