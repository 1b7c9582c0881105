package vaultsecrets

import "time"

// RenewAt is when a certificate or lease valid from notBefore to notAfter
// should be renewed: two thirds of the way through its lifetime, which
// leaves a third of it for retries while Vault is unreachable.
func RenewAt(notBefore, notAfter time.Time) time.Time {
	if !notAfter.After(notBefore) {
		return notBefore
	}
	return notBefore.Add(notAfter.Sub(notBefore) * 2 / 3)
}

// Backoff is a capped exponential retry delay: Base, 2*Base, 4*Base, ...
// up to Max. It has no jitter (each process retries its own Vault calls;
// there is no herd to spread).
type Backoff struct {
	Base, Max time.Duration
}

// DefaultBackoff is the retry delay of Vault calls unless Config says
// otherwise.
var DefaultBackoff = Backoff{Base: time.Second, Max: time.Minute}

// Delay is the wait before retry number attempt (0 is the first retry).
func (b Backoff) Delay(attempt int) time.Duration {
	if b.Base <= 0 {
		b = DefaultBackoff
	}
	if b.Max < b.Base {
		b.Max = b.Base
	}
	d := b.Base
	for i := 0; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// RetryDelay is the wait before retry number attempt of a renewal whose
// current secret expires at expiry: the backoff delay, but never past
// halfway to the expiry (so a renewal is tried a few times before the
// secret expires), and never less than Base.
func (b Backoff) RetryDelay(attempt int, now, expiry time.Time) time.Duration {
	d := b.Delay(attempt)
	if expiry.IsZero() {
		return d
	}
	if left := expiry.Sub(now) / 2; left < d {
		d = left
	}
	if base := b.Delay(0); d < base {
		d = base
	}
	return d
}
