package auth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// ErrTokenNotFound means no API token has that id.
var ErrTokenNotFound = errors.New("API token not found")

// ErrTokenExists means Create found the id taken.
var ErrTokenExists = errors.New("API token id already exists")

// TokenStore keeps API token records. Implementations are safe for
// concurrent use, copy records in and out (callers may modify what they
// get), and bound every call by ctx.
type TokenStore interface {
	// Get returns the record with id, or an error matching
	// ErrTokenNotFound.
	Get(ctx context.Context, id string) (*TokenRecord, error)
	// Create stores a new record, or fails with ErrTokenExists.
	Create(ctx context.Context, rec *TokenRecord) error
	// Update applies fn to the current record and stores the result
	// atomically, calling fn again if the record changed concurrently. An
	// error from fn aborts the update and is returned. ErrTokenNotFound
	// when there is no record.
	Update(ctx context.Context, id string, fn func(*TokenRecord) error) error
	// Delete removes the record; ErrTokenNotFound when there is none.
	Delete(ctx context.Context, id string) error
	// List returns every record, ordered by id.
	List(ctx context.Context) ([]*TokenRecord, error)
}

// MemTokenStore is a TokenStore in memory, for tests and single-process
// tools. The zero value is ready to use.
type MemTokenStore struct {
	mu   sync.Mutex
	recs map[string]*TokenRecord
	gets int
	err  error
}

// GetCalls is how many times Get was called, for tests of caching.
func (m *MemTokenStore) GetCalls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gets
}

// SetErr makes every later call fail with err (a store outage in tests);
// nil ends the outage.
func (m *MemTokenStore) SetErr(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.err = err
}

var _ TokenStore = (*MemTokenStore)(nil)

// Get implements TokenStore.
func (m *MemTokenStore) Get(_ context.Context, id string) (*TokenRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gets++
	if m.err != nil {
		return nil, m.err
	}
	r, ok := m.recs[id]
	if !ok {
		return nil, fmt.Errorf("auth: token %s: %w", id, ErrTokenNotFound)
	}
	return r.Clone(), nil
}

// Create implements TokenStore.
func (m *MemTokenStore) Create(_ context.Context, rec *TokenRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	if _, ok := m.recs[rec.ID]; ok {
		return fmt.Errorf("auth: token %s: %w", rec.ID, ErrTokenExists)
	}
	if m.recs == nil {
		m.recs = map[string]*TokenRecord{}
	}
	m.recs[rec.ID] = rec.Clone()
	return nil
}

// Update implements TokenStore.
func (m *MemTokenStore) Update(_ context.Context, id string, fn func(*TokenRecord) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	r, ok := m.recs[id]
	if !ok {
		return fmt.Errorf("auth: token %s: %w", id, ErrTokenNotFound)
	}
	c := r.Clone()
	if err := fn(c); err != nil {
		return err
	}
	c.ID = id
	m.recs[id] = c
	return nil
}

// Delete implements TokenStore.
func (m *MemTokenStore) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	if _, ok := m.recs[id]; !ok {
		return fmt.Errorf("auth: token %s: %w", id, ErrTokenNotFound)
	}
	delete(m.recs, id)
	return nil
}

// List implements TokenStore.
func (m *MemTokenStore) List(context.Context) ([]*TokenRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, m.err
	}
	out := make([]*TokenRecord, 0, len(m.recs))
	for _, r := range m.recs {
		out = append(out, r.Clone())
	}
	slices.SortFunc(out, func(a, b *TokenRecord) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
