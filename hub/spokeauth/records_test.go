package spokeauth

import (
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestDecodeRecordNamesTheField(t *testing.T) {
	u, _ := nkeys.CreateUser()
	pub, _ := u.PublicKey()
	for name, tc := range map[string]struct{ in, want string }{
		"not JSON":       {`{`, "cluster record"},
		"bad cluster":    {`{"cluster":"a.b"}`, "cluster:"},
		"no cluster":     {`{}`, "cluster:"},
		"bad key":        {`{"cluster":"a","credentials":[{"publicKey":"Uxx","issuedAt":"2026-01-01T00:00:00Z"}]}`, "credentials[0].publicKey"},
		"account key":    {`{"cluster":"a","credentials":[{"publicKey":"` + accountPub() + `","issuedAt":"2026-01-01T00:00:00Z"}]}`, "credentials[0].publicKey"},
		"no issued time": {`{"cluster":"a","credentials":[{"publicKey":"` + pub + `"}]}`, "credentials[0].issuedAt"},
		"twice": {`{"cluster":"a","credentials":[{"publicKey":"` + pub + `","issuedAt":"2026-01-01T00:00:00Z"},{"publicKey":"` + pub +
			`","issuedAt":"2026-01-01T00:00:00Z"}]}`, "credentials[1].publicKey"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeRecord([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DecodeRecord = %v, want an error naming %q", err, tc.want)
			}
		})
	}
	ok := `{"cluster":"a","created":"2026-01-01T00:00:00Z","credentials":[{"publicKey":"` + pub + `","issuedAt":"2026-01-01T00:00:00Z"}]}`
	r, err := DecodeRecord([]byte(ok))
	if err != nil || len(r.Active()) != 1 {
		t.Fatalf("DecodeRecord(valid) = %+v, %v", r, err)
	}
}

func accountPub() string {
	a, _ := nkeys.CreateAccount()
	p, _ := a.PublicKey()
	return p
}

func FuzzDecodeRecord(f *testing.F) {
	u, _ := nkeys.CreateUser()
	pub, _ := u.PublicKey()
	f.Add([]byte(`{"cluster":"a","credentials":[{"publicKey":"` + pub + `","issuedAt":"2026-01-01T00:00:00Z","revokedAt":"2026-01-02T00:00:00Z"}]}`))
	f.Add([]byte(`{"cluster":""}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		if err != nil {
			return
		}
		// A record that decodes is safe to build revocations from.
		for _, c := range r.Credentials {
			if !nkeys.IsValidPublicUserKey(c.PublicKey) || c.IssuedAt.IsZero() {
				t.Fatalf("accepted credential %+v", c)
			}
		}
	})
}

func FuzzParseSeed(f *testing.F) {
	op, _ := nkeys.CreateOperator()
	s, _ := op.Seed()
	f.Add(s)
	f.Add([]byte("-----BEGIN SEED-----\n" + string(s) + "\n------END SEED------\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		kp, err := ParseSeed(b, nkeys.PrefixByteOperator)
		if err != nil {
			if strings.Contains(err.Error(), "SO") {
				t.Fatalf("error %q may quote the seed", err)
			}
			return
		}
		pub, _ := kp.PublicKey()
		if !nkeys.IsValidPublicOperatorKey(pub) {
			t.Fatalf("accepted a %s key", pub)
		}
	})
}

func TestParseSeed(t *testing.T) {
	op, _ := nkeys.CreateOperator()
	s, _ := op.Seed()
	if _, err := ParseSeed(append(s, '\n'), nkeys.PrefixByteOperator); err != nil {
		t.Fatalf("bare seed: %v", err)
	}
	if _, err := ParseSeed(s, nkeys.PrefixByteAccount); err == nil || !strings.Contains(err.Error(), "operator seed, want account") {
		t.Fatalf("operator seed as account: %v", err)
	}
	pub, _ := op.PublicKey()
	if _, err := ParseSeed([]byte(pub), nkeys.PrefixByteOperator); err == nil {
		t.Fatal("a public key was taken for a seed")
	}
	if _, err := ParseSeed(nil, nkeys.PrefixByteOperator); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty: %v", err)
	}
}
