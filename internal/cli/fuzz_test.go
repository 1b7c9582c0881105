package cli

import (
	"testing"

	"github.com/meridian-gpu/meridian/hub/api/validation"
)

// FuzzDecodeQueues: any document either decodes to at least one queue or
// returns an error; it never panics, and a decoded queue can be validated.
func FuzzDecodeQueues(f *testing.F) {
	for _, seed := range []string{
		"path: acme\nweight: 2\n",
		"path: a\n---\npath: a/b\nquotas:\n- accelerator_class: x\n  nominal_milli_gpus: 1000\n",
		`{"path": "a", "quotas": [{"acceleratorClass": "x", "borrowLimitMilli": "5"}]}`,
		"---\n---\n",
		"- 1\n",
		"path: [\n",
		"path: &a x\nweight: *a\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		qs, err := DecodeQueues(data)
		if err != nil {
			if len(qs) != 0 {
				t.Fatalf("error %v with %d queues", err, len(qs))
			}
			return
		}
		if len(qs) == 0 {
			t.Fatal("no error and no queue")
		}
		for _, q := range qs {
			_ = validation.ValidateQueue(q)
		}
	})
}
