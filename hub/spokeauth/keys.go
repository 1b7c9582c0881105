package spokeauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nkeys"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Keys in etcd. They sit under the hub's root like every record, but this
// package owns their layout.
const (
	Prefix        = "/meridian/spokeauth/"
	keysKey       = Prefix + "keys"
	clusterPrefix = Prefix + "clusters/"
)

// AccountName is the name in the account JWT of the account that holds
// Meridian's streams and connections.
const AccountName = "MERIDIAN"

// keyRecord is the JSON at keysKey. The account's identity seed is never
// kept: users are signed with the signing key, so only its public key is
// needed (as the account JWT's subject).
type keyRecord struct {
	// Account is the MERIDIAN account's public key (A...).
	Account string `json:"account"`
	// AccountSigningSeed signs the users the hub issues (SA...).
	AccountSigningSeed string `json:"accountSigningSeed"`
	// OperatorSeed and SystemAccountSeed exist only where the hub made
	// the operator itself, for its embedded NATS.
	OperatorSeed      string `json:"operatorSeed,omitempty"`
	SystemAccountSeed string `json:"systemAccountSeed,omitempty"`
}

// keys are the parsed keyRecord.
type keys struct {
	account   string
	signer    nkeys.KeyPair
	signerPub string
	operator  nkeys.KeyPair // nil unless generated here
	system    nkeys.KeyPair // nil unless generated here
}

func decodeKeys(b []byte) (*keyRecord, *keys, error) {
	var r keyRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, nil, fmt.Errorf("spokeauth: key record: %w", err)
	}
	k, err := r.parse()
	if err != nil {
		return nil, nil, err
	}
	return &r, k, nil
}

func (r *keyRecord) parse() (*keys, error) {
	if !nkeys.IsValidPublicAccountKey(r.Account) {
		return nil, errors.New("spokeauth: key record: account is not a public account key (A...)")
	}
	k := &keys{account: r.Account}
	var err error
	if k.signer, err = seedOf(r.AccountSigningSeed, nkeys.PrefixByteAccount, "accountSigningSeed"); err != nil {
		return nil, err
	}
	k.signerPub, _ = k.signer.PublicKey()
	if r.OperatorSeed != "" {
		if k.operator, err = seedOf(r.OperatorSeed, nkeys.PrefixByteOperator, "operatorSeed"); err != nil {
			return nil, err
		}
	}
	if r.SystemAccountSeed != "" {
		if k.system, err = seedOf(r.SystemAccountSeed, nkeys.PrefixByteAccount, "systemAccountSeed"); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// seedOf parses a seed and checks its kind; errors name field and never
// carry the seed.
func seedOf(seed string, want nkeys.PrefixByte, field string) (nkeys.KeyPair, error) {
	if seed == "" {
		return nil, fmt.Errorf("spokeauth: key record: %s is empty", field)
	}
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		return nil, fmt.Errorf("spokeauth: key record: %s is not an nkey seed", field)
	}
	pub, _ := kp.PublicKey()
	if nkeys.Prefix(pub) != want {
		return nil, fmt.Errorf("spokeauth: key record: %s is a %s seed, want %s", field, kindOf(pub), want)
	}
	return kp, nil
}

func kindOf(pub string) string {
	if pub == "" {
		return "unknown"
	}
	return nkeys.Prefix(pub).String()
}

// ParseSeed reads an nkey seed of the given kind from a file's content: the
// seed alone, or decorated as nsc writes it. Errors say what is wrong
// without quoting the seed.
func ParseSeed(content []byte, want nkeys.PrefixByte) (nkeys.KeyPair, error) {
	s := strings.TrimSpace(string(content))
	if s == "" {
		return nil, errors.New("no nkey seed in it (empty)")
	}
	var kp nkeys.KeyPair
	var err error
	if strings.HasPrefix(s, "S") && !strings.ContainsAny(s, " \n-") {
		kp, err = nkeys.FromSeed([]byte(s))
	} else {
		kp, err = nkeys.ParseDecoratedNKey(content)
	}
	if err != nil {
		return nil, errors.New("no valid nkey seed in it")
	}
	if _, err := kp.Seed(); err != nil {
		return nil, errors.New("it holds a public key, want a seed (S...)")
	}
	pub, _ := kp.PublicKey()
	if nkeys.Prefix(pub) != want {
		return nil, fmt.Errorf("it holds a %s seed, want %s", kindOf(pub), want)
	}
	return kp, nil
}

func newKeyRecord(embedded bool) (*keyRecord, error) {
	acc, err := nkeys.CreateAccount()
	if err != nil {
		return nil, err
	}
	sk, err := nkeys.CreateAccount()
	if err != nil {
		return nil, err
	}
	r := &keyRecord{}
	r.Account, _ = acc.PublicKey()
	seed, _ := sk.Seed()
	r.AccountSigningSeed = string(seed)
	if embedded {
		op, err := nkeys.CreateOperator()
		if err != nil {
			return nil, err
		}
		sys, err := nkeys.CreateAccount()
		if err != nil {
			return nil, err
		}
		s1, _ := op.Seed()
		s2, _ := sys.Seed()
		r.OperatorSeed, r.SystemAccountSeed = string(s1), string(s2)
	}
	return r, nil
}

// loadKeys returns the stored keys, making them on first use. Two replicas
// starting at once agree: the first write wins and the other reads it.
// embedded asks for an operator and a system account as well; a record
// made without them gets them added.
func loadKeys(ctx context.Context, kv clientv3.KV, embedded bool) (*keys, error) {
	for attempt := 0; attempt < 5; attempt++ {
		resp, err := kv.Get(ctx, keysKey)
		if err != nil {
			return nil, fmt.Errorf("spokeauth: read keys: %w", err)
		}
		var cmp clientv3.Cmp
		var rec *keyRecord
		if len(resp.Kvs) == 0 {
			if rec, err = newKeyRecord(embedded); err != nil {
				return nil, fmt.Errorf("spokeauth: make keys: %w", err)
			}
			cmp = clientv3.Compare(clientv3.CreateRevision(keysKey), "=", 0)
		} else {
			r, k, err := decodeKeys(resp.Kvs[0].Value)
			if err != nil {
				return nil, err
			}
			if !embedded || k.operator != nil && k.system != nil {
				return k, nil
			}
			fresh, err := newKeyRecord(true)
			if err != nil {
				return nil, fmt.Errorf("spokeauth: make keys: %w", err)
			}
			r.OperatorSeed, r.SystemAccountSeed = fresh.OperatorSeed, fresh.SystemAccountSeed
			rec = r
			cmp = clientv3.Compare(clientv3.ModRevision(keysKey), "=", resp.Kvs[0].ModRevision)
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return nil, err
		}
		tr, err := kv.Txn(ctx).If(cmp).Then(clientv3.OpPut(keysKey, string(b))).Commit()
		if err != nil {
			return nil, fmt.Errorf("spokeauth: write keys: %w", err)
		}
		if tr.Succeeded {
			return rec.parse()
		}
	}
	return nil, errors.New("spokeauth: keys changed under us five times; giving up")
}
