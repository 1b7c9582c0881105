package spokeauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	clientv3 "go.etcd.io/etcd/client/v3"

	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// Config says how an Authority gets its keys and reaches NATS.
type Config struct {
	// KV is the hub's etcd, where the keys and the cluster records live.
	// Required.
	KV clientv3.KV
	// Embedded: the hub runs its own NATS, and the operator and the system
	// account are generated and kept in etcd (EmbeddedSecurity).
	Embedded bool
	// OperatorSigner signs the account JWT for an external NATS: the
	// operator's key or one of its signing keys. Required unless
	// Embedded.
	OperatorSigner nkeys.KeyPair
	// SystemCredsFile is a .creds file of a user in the external NATS's
	// system account; Attach uses it to push the account JWT. Required
	// unless Embedded.
	SystemCredsFile string
	// Logger receives what the authority does; nil drops it.
	Logger *slog.Logger
	// Clock stamps records; nil means time.Now.
	Clock func() time.Time
}

// ConsumerEnsurer makes a cluster's durable dispatch consumer
// (natsbus.Bus.EnsureDispatchConsumer). It must be idempotent.
type ConsumerEnsurer interface {
	EnsureDispatchConsumer(ctx context.Context, cluster string) error
}

// Authority issues, lists and revokes clusters' NATS credentials. It is
// safe for concurrent use; several hub replicas may each run one on the
// same etcd.
type Authority struct {
	cfg Config
	k   *keys
	op  nkeys.KeyPair
	log *slog.Logger
	now func() time.Time

	mu       sync.Mutex
	sys      *natsbus.Bus // system-account connection; nil until Attach
	bus      ConsumerEnsurer
	pushMu   sync.Mutex // one push at a time from this replica
	lastPush map[string]int64
}

// Open loads the keys from etcd, making them on first use.
func Open(ctx context.Context, cfg Config) (*Authority, error) {
	if cfg.KV == nil {
		return nil, errors.New("spokeauth: Config.KV is required")
	}
	if !cfg.Embedded {
		if cfg.OperatorSigner == nil {
			return nil, errors.New("spokeauth: Config.OperatorSigner is required for an external NATS")
		}
		if pub, _ := cfg.OperatorSigner.PublicKey(); !nkeys.IsValidPublicOperatorKey(pub) {
			return nil, fmt.Errorf("spokeauth: Config.OperatorSigner is a %s key, want an operator key", kindOf(pub))
		}
		if cfg.SystemCredsFile == "" {
			return nil, errors.New("spokeauth: Config.SystemCredsFile is required for an external NATS")
		}
	}
	k, err := loadKeys(ctx, cfg.KV, cfg.Embedded)
	if err != nil {
		return nil, err
	}
	a := &Authority{cfg: cfg, k: k, op: cfg.OperatorSigner, log: cfg.Logger, now: cfg.Clock}
	if cfg.Embedded {
		a.op = k.operator
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a, nil
}

// Account is the MERIDIAN account's public key.
func (a *Authority) Account() string { return a.k.account }

// EmbeddedSecurity is the embedded NATS's configuration: trust the
// generated operator, preload the system account and the MERIDIAN account
// with every revocation recorded in etcd. Only for Config.Embedded.
func (a *Authority) EmbeddedSecurity(ctx context.Context) (*embednats.Security, error) {
	if !a.cfg.Embedded {
		return nil, errors.New("spokeauth: EmbeddedSecurity needs Config.Embedded")
	}
	opPub, _ := a.k.operator.PublicKey()
	sysPub, _ := a.k.system.PublicKey()
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(a.k.operator)
	if err != nil {
		return nil, fmt.Errorf("spokeauth: system account JWT: %w", err)
	}
	revs, err := a.revocations(ctx)
	if err != nil {
		return nil, err
	}
	accJWT, err := a.accountJWT(revs)
	if err != nil {
		return nil, err
	}
	a.pushMu.Lock()
	a.lastPush = revs
	a.pushMu.Unlock()
	return &embednats.Security{
		TrustedKeys:   []string{opPub},
		AccountJWTs:   map[string]string{sysPub: sysJWT, a.k.account: accJWT},
		SystemAccount: sysPub,
	}, nil
}

// HubUser issues a user of the MERIDIAN account without limits, for the
// hub's own connection. It is kept nowhere: each start issues a new one.
func (a *Authority) HubUser(name string) (userJWT, seed string, err error) {
	return a.user(name, nil)
}

func (a *Authority) user(name string, perms *natsbus.Permissions) (userJWT, seed string, err error) {
	u, err := nkeys.CreateUser()
	if err != nil {
		return "", "", err
	}
	pub, _ := u.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	uc.IssuerAccount = a.k.account
	if perms != nil {
		uc.Pub.Allow.Add(perms.Publish...)
		uc.Sub.Allow.Add(perms.Subscribe...)
	}
	if userJWT, err = uc.Encode(a.k.signer); err != nil {
		return "", "", fmt.Errorf("spokeauth: sign user %s: %w", name, err)
	}
	s, _ := u.Seed()
	return userJWT, string(s), nil
}

// systemUser issues a user of the generated system account (embedded).
func (a *Authority) systemUser() (userJWT, seed string, err error) {
	u, err := nkeys.CreateUser()
	if err != nil {
		return "", "", err
	}
	pub, _ := u.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = "meridian-hub-system"
	if userJWT, err = uc.Encode(a.k.system); err != nil {
		return "", "", fmt.Errorf("spokeauth: sign system user: %w", err)
	}
	s, _ := u.Seed()
	return userJWT, string(s), nil
}

// Attach connects to NATS at url as a system-account user (opts add TLS),
// which Revoke needs to push the account JWT. For an external NATS it
// pushes the account JWT at once, so the account exists with the
// revocations etcd records before anyone connects to it.
func (a *Authority) Attach(ctx context.Context, url string, opts ...natsbus.Option) error {
	cred := natsbus.WithCredsFile(a.cfg.SystemCredsFile)
	if a.cfg.Embedded {
		j, s, err := a.systemUser()
		if err != nil {
			return err
		}
		cred = natsbus.WithUserJWT(j, s)
	}
	all := append(append([]natsbus.Option{natsbus.WithName("meridian-hub-system"), natsbus.WithLogger(a.log)}, opts...), cred)
	sys, err := natsbus.Connect(ctx, url, all...)
	if err != nil {
		return fmt.Errorf("spokeauth: connect as system user: %w", err)
	}
	a.mu.Lock()
	old := a.sys
	a.sys = sys
	a.mu.Unlock()
	if old != nil {
		old.Close()
	}
	if !a.cfg.Embedded {
		if err := a.push(ctx, true); err != nil {
			return err
		}
	}
	return nil
}

// Start makes sure every registered cluster's durable dispatch consumer
// exists with bus's settings, and keeps bus for Register. The streams
// must exist (natsbus.Bus.EnsureStreams).
func (a *Authority) Start(ctx context.Context, bus ConsumerEnsurer) error {
	a.mu.Lock()
	a.bus = bus
	a.mu.Unlock()
	recs, _, err := a.list(ctx)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if err := bus.EnsureDispatchConsumer(ctx, r.Cluster); err != nil {
			return fmt.Errorf("spokeauth: cluster %s: %w", r.Cluster, err)
		}
	}
	return nil
}

// Close drops the system connection.
func (a *Authority) Close() {
	a.mu.Lock()
	sys := a.sys
	a.sys = nil
	a.mu.Unlock()
	if sys != nil {
		sys.Close()
	}
}

// Issued is a credential just made: the only time its secret exists
// outside the agent.
type Issued struct {
	Cluster string
	Credential
	// Creds is a NATS .creds file: the user JWT and its nkey seed. Give it
	// to the agent as --nats-creds (the chart's hub.auth Secret).
	Creds []byte
	// InboxPrefix is the reply prefix the agent must use
	// (natsbus.ClusterInboxPrefix); meridian-agent sets it itself.
	InboxPrefix string
}

// Register records cluster and issues it a credential. A cluster already
// registered is refused with ErrExists unless rotate is set, which issues
// one more credential and leaves the others valid until Revoke (the
// rotation procedure). rotate on an unknown cluster is ErrNotFound. The
// cluster's durable dispatch consumer is created first (Start must have
// run), so its agent can bind to it.
func (a *Authority) Register(ctx context.Context, cluster string, rotate bool) (*Issued, error) {
	if err := natsbus.ValidateClusterID(cluster); err != nil {
		return nil, fmt.Errorf("%w: cluster: %w", ErrInvalid, err)
	}
	perms, err := natsbus.AgentPermissions(cluster)
	if err != nil {
		return nil, fmt.Errorf("%w: cluster: %w", ErrInvalid, err)
	}
	a.mu.Lock()
	bus := a.bus
	a.mu.Unlock()
	if bus == nil {
		return nil, errors.New("spokeauth: not started (no NATS connection to make the consumer with)")
	}
	key := clusterPrefix + cluster
	resp, err := a.cfg.KV.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("spokeauth: read cluster %s: %w", cluster, err)
	}
	now := a.now().UTC()
	rec := &Record{Cluster: cluster, Created: now}
	cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	switch {
	case len(resp.Kvs) > 0 && !rotate:
		return nil, fmt.Errorf("%w: %s (issue another credential with rotate)", ErrExists, cluster)
	case len(resp.Kvs) == 0 && rotate:
		return nil, fmt.Errorf("%w: cluster %s is not registered; register it first", ErrNotFound, cluster)
	case len(resp.Kvs) > 0:
		if rec, err = DecodeRecord(resp.Kvs[0].Value); err != nil {
			return nil, err
		}
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)
	}
	if err := bus.EnsureDispatchConsumer(ctx, cluster); err != nil {
		return nil, fmt.Errorf("spokeauth: cluster %s: %w", cluster, err)
	}
	userJWT, seed, err := a.user("meridian-agent "+cluster, &perms)
	if err != nil {
		return nil, err
	}
	uc, err := jwt.DecodeUserClaims(userJWT)
	if err != nil {
		return nil, fmt.Errorf("spokeauth: decode the user JWT just made: %w", err)
	}
	cred := Credential{PublicKey: uc.Subject, IssuedAt: time.Unix(uc.IssuedAt, 0).UTC()}
	if err := rec.add(cred); err != nil {
		return nil, err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	tr, err := a.cfg.KV.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return nil, fmt.Errorf("spokeauth: write cluster %s: %w", cluster, err)
	}
	if !tr.Succeeded {
		if rotate {
			return nil, fmt.Errorf("spokeauth: cluster %s changed during the rotation; try again", cluster)
		}
		return nil, fmt.Errorf("%w: %s (registered at the same time by another request)", ErrExists, cluster)
	}
	creds, err := jwt.FormatUserConfig(userJWT, []byte(seed))
	if err != nil {
		return nil, fmt.Errorf("spokeauth: format creds: %w", err)
	}
	inbox, _ := natsbus.ClusterInboxPrefix(cluster)
	a.log.Info("cluster credential issued", "cluster", cluster, "user", cred.PublicKey, "rotation", rotate)
	return &Issued{Cluster: cluster, Credential: cred, Creds: creds, InboxPrefix: inbox}, nil
}

// Get returns cluster's record.
func (a *Authority) Get(ctx context.Context, cluster string) (*Record, error) {
	if err := natsbus.ValidateClusterID(cluster); err != nil {
		return nil, fmt.Errorf("%w: cluster: %w", ErrInvalid, err)
	}
	resp, err := a.cfg.KV.Get(ctx, clusterPrefix+cluster)
	if err != nil {
		return nil, fmt.Errorf("spokeauth: read cluster %s: %w", cluster, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%w: cluster %s is not registered", ErrNotFound, cluster)
	}
	return DecodeRecord(resp.Kvs[0].Value)
}

// Revoke revokes cluster's credential publicKey, or every active one when
// publicKey is empty, and pushes the account JWT so the NATS servers
// disconnect those users now. It returns the credentials it revoked (none
// when they were revoked already, which is not an error). The record is
// written before the push: if the push fails the error says so, and the
// next Revoke, or the hub's next start, pushes the revocation again.
func (a *Authority) Revoke(ctx context.Context, cluster, publicKey string) ([]Credential, error) {
	if err := natsbus.ValidateClusterID(cluster); err != nil {
		return nil, fmt.Errorf("%w: cluster: %w", ErrInvalid, err)
	}
	if publicKey != "" && !nkeys.IsValidPublicUserKey(publicKey) {
		return nil, fmt.Errorf("%w: public_key %q is not a public user nkey (U...)", ErrInvalid, publicKey)
	}
	key := clusterPrefix + cluster
	var revoked []Credential
	for attempt := 0; ; attempt++ {
		resp, err := a.cfg.KV.Get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("spokeauth: read cluster %s: %w", cluster, err)
		}
		if len(resp.Kvs) == 0 {
			return nil, fmt.Errorf("%w: cluster %s is not registered", ErrNotFound, cluster)
		}
		rec, err := DecodeRecord(resp.Kvs[0].Value)
		if err != nil {
			return nil, err
		}
		if revoked, err = rec.revoke(publicKey, a.now().UTC()); err != nil {
			return nil, err
		}
		if len(revoked) == 0 {
			break
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return nil, err
		}
		tr, err := a.cfg.KV.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(key, string(b))).Commit()
		if err != nil {
			return nil, fmt.Errorf("spokeauth: write cluster %s: %w", cluster, err)
		}
		if tr.Succeeded {
			break
		}
		if attempt == 4 {
			return nil, fmt.Errorf("spokeauth: cluster %s changed five times during the revocation; try again", cluster)
		}
	}
	// Push even when nothing was newly revoked: a revocation whose push
	// failed before is pushed by this retry.
	if err := a.push(ctx, false); err != nil {
		return revoked, err
	}
	for _, c := range revoked {
		a.log.Info("cluster credential revoked", "cluster", cluster, "user", c.PublicKey)
	}
	return revoked, nil
}

// List returns every registered cluster, sorted by id.
func (a *Authority) List(ctx context.Context) ([]*Record, error) {
	recs, _, err := a.list(ctx)
	return recs, err
}

func (a *Authority) list(ctx context.Context) ([]*Record, int64, error) {
	resp, err := a.cfg.KV.Get(ctx, clusterPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("spokeauth: list clusters: %w", err)
	}
	out := make([]*Record, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r, err := DecodeRecord(kv.Value)
		if err != nil {
			// A damaged record must not stop revocations of the others
			// from reaching NATS; it is reported and skipped.
			a.log.Error("undecodable cluster record skipped", "key", string(kv.Key), "err", err)
			continue
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cluster < out[j].Cluster })
	return out, resp.Header.Revision, nil
}

// revocations maps every revoked user to when it was revoked (Unix
// seconds), over all clusters.
func (a *Authority) revocations(ctx context.Context) (map[string]int64, error) {
	recs, _, err := a.list(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, r := range recs {
		for _, c := range r.Credentials {
			if !c.Active() {
				out[c.PublicKey] = c.RevokedAt.Unix()
			}
		}
	}
	return out, nil
}

// accountJWT is the MERIDIAN account: JetStream on (bounded by the
// server's own limits), the signing key the users are issued with, and the
// revocations.
func (a *Authority) accountJWT(revs map[string]int64) (string, error) {
	ac := jwt.NewAccountClaims(a.k.account)
	ac.Name = AccountName
	ac.SigningKeys.Add(a.k.signerPub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	for pub, at := range revs {
		ac.RevokeAt(pub, time.Unix(at, 0))
	}
	s, err := ac.Encode(a.op)
	if err != nil {
		return "", fmt.Errorf("spokeauth: sign account JWT: %w", err)
	}
	return s, nil
}

// push sends the account JWT, built from etcd's revocations, to the NATS
// servers, until what it sent is what etcd holds (another replica may
// revoke meanwhile and push an older set). force pushes even when this
// replica pushed the same set before.
func (a *Authority) push(ctx context.Context, force bool) error {
	a.pushMu.Lock()
	defer a.pushMu.Unlock()
	a.mu.Lock()
	sys := a.sys
	a.mu.Unlock()
	if sys == nil {
		return errors.New("spokeauth: not attached to NATS as a system user; the revocation is recorded and is pushed at the hub's next start")
	}
	revs, err := a.revocations(ctx)
	if err != nil {
		return err
	}
	for attempt := 0; attempt < 5; attempt++ {
		if !force && a.lastPush != nil && maps.Equal(a.lastPush, revs) {
			return nil
		}
		force = false
		accJWT, err := a.accountJWT(revs)
		if err != nil {
			return err
		}
		if err := sendClaims(ctx, sys.Conn(), a.k.account, accJWT); err != nil {
			return err
		}
		a.lastPush = revs
		if revs, err = a.revocations(ctx); err != nil {
			return err
		}
	}
	return nil
}

// updateSubject is where a system-account user sends an account's new JWT;
// both the full (directory) resolver and the memory resolver listen.
func updateSubject(account string) string { return "$SYS.REQ.ACCOUNT." + account + ".CLAIMS.UPDATE" }

// claimUpdateResponse is the servers' answer to a claims update.
type claimUpdateResponse struct {
	Data *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"data"`
	Error *struct {
		Code        int    `json:"code"`
		Description string `json:"description"`
	} `json:"error"`
}

func sendClaims(ctx context.Context, nc *nats.Conn, account, accJWT string) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(rctx, updateSubject(account), []byte(accJWT))
	if err != nil {
		return fmt.Errorf("spokeauth: push the account JWT: %w (does the NATS server run a resolver that takes updates, and is the system credential right?)", err)
	}
	var r claimUpdateResponse
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return fmt.Errorf("spokeauth: push the account JWT: undecodable answer: %w", err)
	}
	if r.Error != nil {
		return fmt.Errorf("spokeauth: push the account JWT: NATS refused it (%d): %s", r.Error.Code, r.Error.Description)
	}
	if r.Data == nil {
		return errors.New("spokeauth: push the account JWT: the answer has neither data nor error")
	}
	return nil
}
