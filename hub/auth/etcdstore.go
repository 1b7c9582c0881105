package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/meridian-gpu/meridian/hub/store"
)

// TokenKeyPrefix is where API token records live in etcd, one JSON record
// per key, TokenKeyPrefix+id. It is kept here rather than as a store.Kind so
// that this package owns its layout; it sits under store.Root like every
// Meridian key.
const TokenKeyPrefix = store.Root + "/apitokens/"

// maxUpdateTries bounds Update's compare-and-swap retries.
const maxUpdateTries = 8

// EtcdTokenStore is the TokenStore of the hub: records in etcd through
// hub/store, every write a compare-and-swap on the key's mod revision.
type EtcdTokenStore struct {
	s      *store.Store
	prefix string
}

var _ TokenStore = (*EtcdTokenStore)(nil)

// NewEtcdTokenStore returns a TokenStore over s under TokenKeyPrefix.
func NewEtcdTokenStore(s *store.Store) *EtcdTokenStore {
	return &EtcdTokenStore{s: s, prefix: TokenKeyPrefix}
}

func (e *EtcdTokenStore) key(id string) (string, error) {
	if !ValidTokenID(id) {
		return "", fmt.Errorf("auth: %q is not an API token id", clip(id, 64))
	}
	return e.prefix + id, nil
}

func (e *EtcdTokenStore) get(ctx context.Context, id string) (*TokenRecord, int64, error) {
	key, err := e.key(id)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", err, ErrTokenNotFound)
	}
	val, rev, err := e.s.Get(ctx, key)
	if store.IsNotFound(err) {
		return nil, 0, fmt.Errorf("auth: token %s: %w", id, ErrTokenNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("auth: read token %s: %w", id, err)
	}
	var r TokenRecord
	if err := json.Unmarshal(val, &r); err != nil {
		return nil, 0, fmt.Errorf("auth: decode token %s: %w", id, err)
	}
	return &r, rev, nil
}

// Get implements TokenStore.
func (e *EtcdTokenStore) Get(ctx context.Context, id string) (*TokenRecord, error) {
	r, _, err := e.get(ctx, id)
	return r, err
}

// Create implements TokenStore.
func (e *EtcdTokenStore) Create(ctx context.Context, rec *TokenRecord) error {
	key, err := e.key(rec.ID)
	if err != nil {
		return err
	}
	val, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("auth: encode token %s: %w", rec.ID, err)
	}
	if _, err := e.s.Commit(ctx, nil, store.PutIfModRev(key, val, 0)); err != nil {
		if store.IsConflict(err) {
			return fmt.Errorf("auth: token %s: %w", rec.ID, ErrTokenExists)
		}
		return fmt.Errorf("auth: create token %s: %w", rec.ID, err)
	}
	return nil
}

// Update implements TokenStore.
func (e *EtcdTokenStore) Update(ctx context.Context, id string, fn func(*TokenRecord) error) error {
	for range maxUpdateTries {
		r, rev, err := e.get(ctx, id)
		if err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
		r.ID = id
		val, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("auth: encode token %s: %w", id, err)
		}
		key, _ := e.key(id)
		_, err = e.s.Commit(ctx, nil, store.PutIfModRev(key, val, rev))
		if err == nil {
			return nil
		}
		if !store.IsConflict(err) {
			return fmt.Errorf("auth: update token %s: %w", id, err)
		}
	}
	return fmt.Errorf("auth: update token %s: still changing after %d tries: %w", id, maxUpdateTries, store.ErrConflict)
}

// Delete implements TokenStore.
func (e *EtcdTokenStore) Delete(ctx context.Context, id string) error {
	_, rev, err := e.get(ctx, id)
	if err != nil {
		return err
	}
	key, _ := e.key(id)
	if _, err := e.s.Commit(ctx, nil, store.Delete(key, rev)); err != nil {
		if store.IsConflict(err) {
			// Changed or deleted since the read: try once more.
			if _, rev, err = e.get(ctx, id); err != nil {
				return err
			}
			if _, err = e.s.Commit(ctx, nil, store.Delete(key, rev)); err == nil {
				return nil
			}
		}
		return fmt.Errorf("auth: delete token %s: %w", id, err)
	}
	return nil
}

// List implements TokenStore.
func (e *EtcdTokenStore) List(ctx context.Context) ([]*TokenRecord, error) {
	items, _, err := e.s.List(ctx, e.prefix, 0)
	if err != nil {
		return nil, fmt.Errorf("auth: list tokens: %w", err)
	}
	out := make([]*TokenRecord, 0, len(items))
	var bad []error
	for _, it := range items {
		var r TokenRecord
		if err := json.Unmarshal(it.Value, &r); err != nil {
			bad = append(bad, fmt.Errorf("decode %s: %w", it.Key, err))
			continue
		}
		out = append(out, &r)
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("auth: list tokens: %w", errors.Join(bad...))
	}
	return out, nil
}
