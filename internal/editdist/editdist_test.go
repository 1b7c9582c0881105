package editdist

import (
	"strings"
	"testing"
)

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "abc", 3}, {"kitten", "sitting", 3},
		{"queue.create", "queues.create", 1}, {"tlsCrt", "tlsCert", 1}, {"same", "same", 0},
		{strings.Repeat("a", MaxLen+1), "a", Far},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%.10q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
