package quota

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// LedgerVersion is the version of the ledger's JSON encoding.
const LedgerVersion = 1

// Ledger holds decayed, class-weighted GPU-seconds per queue path, all
// decayed to one instant (DecayedTo). Usage of a leaf also counts for each
// of its ancestors. With a half-life h, usage that is t old counts
// 2^(-t/h); a half-life of 0 disables decay.
//
// A Ledger is a value the hub owns: it is not safe for concurrent use.
type Ledger struct {
	halfLife    time.Duration
	classWeight map[string]float64
	at          time.Time
	usage       map[string]float64
}

// NewLedger returns an empty ledger. classWeight scales the GPU-seconds of
// each accelerator class (an H100-second may count more than a T4-second);
// unknown classes weigh 1. Invalid settings (a negative half-life, a weight
// that is not finite and > 0) are replaced by the defaults (no decay, 1);
// validate configuration first with CheckLedgerConfig.
func NewLedger(halfLife time.Duration, classWeight map[string]float64) *Ledger {
	l := &Ledger{usage: map[string]float64{}}
	l.Configure(halfLife, classWeight)
	return l
}

// CheckLedgerConfig validates ledger settings, naming the bad field.
func CheckLedgerConfig(halfLife time.Duration, classWeight map[string]float64) error {
	if halfLife < 0 {
		return fmt.Errorf("halfLife: must be >= 0 (0 disables decay), got %s", halfLife)
	}
	for _, c := range sortedKeys(classWeight) {
		if err := ValidateClass(c); err != nil {
			return fmt.Errorf("classWeights[%q]: class name %w", c, err)
		}
		if w := classWeight[c]; !(w > 0) || math.IsInf(w, 0) {
			return fmt.Errorf("classWeights[%q]: must be a finite number > 0, got %v", c, w)
		}
	}
	return nil
}

// Configure replaces the half-life and class weights, for example after
// loading a persisted ledger under a new configuration. Past usage is kept
// as it is; only future decay and accrual change.
func (l *Ledger) Configure(halfLife time.Duration, classWeight map[string]float64) {
	l.halfLife = max(0, halfLife)
	l.classWeight = make(map[string]float64, len(classWeight))
	for c, w := range classWeight {
		if w > 0 && !math.IsInf(w, 0) {
			l.classWeight[c] = w
		}
	}
}

// HalfLife returns the decay half-life (0: no decay).
func (l *Ledger) HalfLife() time.Duration {
	if l == nil {
		return 0
	}
	return l.halfLife
}

// ClassWeight returns the weight of class (1 unless configured).
func (l *Ledger) ClassWeight(class string) float64 {
	if w, ok := l.classWeight[class]; ok {
		return w
	}
	return 1
}

// DecayedTo returns the instant the stored values are decayed to (zero for
// a ledger that never saw a time).
func (l *Ledger) DecayedTo() time.Time { return l.at }

// Paths returns every path with recorded usage, sorted.
func (l *Ledger) Paths() []string { return sortedKeys(l.usage) }

// Clone returns an independent copy.
func (l *Ledger) Clone() *Ledger {
	c := &Ledger{halfLife: l.halfLife, at: l.at, classWeight: make(map[string]float64, len(l.classWeight)), usage: make(map[string]float64, len(l.usage))}
	for k, v := range l.classWeight {
		c.classWeight[k] = v
	}
	for k, v := range l.usage {
		c.usage[k] = v
	}
	return c
}

// factor is the decay over d: 2^(-d/halfLife), 1 without decay.
func (l *Ledger) factor(d time.Duration) float64 {
	if l.halfLife <= 0 || d <= 0 {
		return 1
	}
	return math.Exp2(-d.Seconds() / l.halfLife.Seconds())
}

// DecayTo decays every stored value to now. Time never runs backwards: a
// now before DecayedTo changes nothing.
func (l *Ledger) DecayTo(now time.Time) {
	if l.at.IsZero() {
		l.at = now
		return
	}
	if !now.After(l.at) {
		return
	}
	f := l.factor(now.Sub(l.at))
	for k, v := range l.usage {
		l.usage[k] = v * f
	}
	l.at = now
}

// Accrue records that leaf used milli milli-GPUs of class from from to to.
// The usage is integrated under the decay curve, so each instant counts as
// old as it is: with rate r (GPUs x class weight) and half-life h, an
// interval [from, to] seen at T >= to adds
// r * h/ln2 * (2^(-(T-to)/h) - 2^(-(T-from)/h)) GPU-seconds. It accrues to
// the leaf and every ancestor. The ledger is first decayed to to when to
// is later than DecayedTo; an interval reported late is decayed to
// DecayedTo. Empty intervals, non-positive amounts and invalid paths are
// ignored.
func (l *Ledger) Accrue(leaf, class string, milli int64, from, to time.Time) {
	if milli <= 0 || !to.After(from) || ValidatePath(leaf) != nil {
		return
	}
	if l.at.IsZero() || to.After(l.at) {
		l.DecayTo(to)
	}
	rate := float64(min(milli, MaxMilli)) / 1000 * l.ClassWeight(class)
	var v float64
	if l.halfLife <= 0 {
		v = rate * to.Sub(from).Seconds()
	} else {
		h := l.halfLife.Seconds()
		v = rate * h / math.Ln2 * (l.factor(l.at.Sub(to)) - l.factor(l.at.Sub(from)))
	}
	if !(v > 0) || math.IsInf(v, 0) {
		return
	}
	if l.usage == nil {
		l.usage = map[string]float64{}
	}
	for p := leaf; p != ""; p = parentPath(p) {
		l.usage[p] += v
	}
}

// Usage returns a path's decayed GPU-seconds as of now (0 when unknown, or
// for a nil ledger).
// It does not change the ledger; a now before DecayedTo is read as
// DecayedTo.
func (l *Ledger) Usage(path string, now time.Time) float64 {
	if l == nil {
		return 0
	}
	v := l.usage[path]
	if v == 0 || l.at.IsZero() || !now.After(l.at) {
		return v
	}
	return v * l.factor(now.Sub(l.at))
}

// ledgerJSON is the persisted form. Go's encoder writes map keys sorted and
// floats in their shortest exact form, so the encoding is stable and
// round-trips exactly.
type ledgerJSON struct {
	Version      int                `json:"version"`
	HalfLife     string             `json:"halfLife"`
	DecayedTo    *time.Time         `json:"decayedTo,omitempty"`
	ClassWeights map[string]float64 `json:"classWeights,omitempty"`
	Usage        map[string]float64 `json:"usage"`
}

// MarshalJSON encodes the ledger as
// {"version":1,"halfLife":"168h0m0s","decayedTo":"...","classWeights":{...},"usage":{"path":gpuSeconds}}
// with keys sorted; see the design note.
func (l *Ledger) MarshalJSON() ([]byte, error) {
	j := ledgerJSON{Version: LedgerVersion, HalfLife: l.halfLife.String(), ClassWeights: l.classWeight, Usage: l.usage}
	if len(j.ClassWeights) == 0 {
		j.ClassWeights = nil
	}
	if j.Usage == nil {
		j.Usage = map[string]float64{}
	}
	if !l.at.IsZero() {
		at := l.at.UTC()
		j.DecayedTo = &at
	}
	return json.Marshal(j)
}

// UnmarshalJSON replaces the ledger with a decoded one. It rejects unknown
// fields, other versions and invalid values with an error naming the field;
// on error the ledger is unchanged.
func (l *Ledger) UnmarshalJSON(data []byte) error {
	if l == nil {
		return errors.New("ledger: UnmarshalJSON on nil *Ledger")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var j struct {
		Version      *int               `json:"version"`
		HalfLife     *string            `json:"halfLife"`
		DecayedTo    *time.Time         `json:"decayedTo"`
		ClassWeights map[string]float64 `json:"classWeights"`
		Usage        map[string]float64 `json:"usage"`
	}
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) != 0 {
		return errors.New("ledger: unexpected data after the JSON object")
	}
	switch {
	case j.Version == nil:
		return errors.New("ledger.version: missing")
	case *j.Version != LedgerVersion:
		return fmt.Errorf("ledger.version: unsupported version %d, this build reads %d", *j.Version, LedgerVersion)
	case j.HalfLife == nil:
		return errors.New("ledger.halfLife: missing")
	}
	hl, err := time.ParseDuration(*j.HalfLife)
	if err != nil {
		return fmt.Errorf("ledger.halfLife: %w", err)
	}
	if err := CheckLedgerConfig(hl, j.ClassWeights); err != nil {
		return fmt.Errorf("ledger.%w", err)
	}
	usage := make(map[string]float64, len(j.Usage))
	for _, p := range sortedKeys(j.Usage) {
		v := j.Usage[p]
		if err := ValidatePath(p); err != nil {
			return fmt.Errorf("ledger.usage[%q]: path %w", p, err)
		}
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("ledger.usage[%q]: must be a finite number >= 0, got %v", p, v)
		}
		if v > 0 {
			usage[p] = v
		}
	}
	var at time.Time
	if j.DecayedTo != nil {
		at = j.DecayedTo.UTC()
		if at.IsZero() {
			at = time.Time{}
		}
	}
	if at.IsZero() && len(usage) > 0 {
		return errors.New("ledger.decayedTo: missing, but usage is recorded")
	}
	l.halfLife = hl
	l.classWeight = make(map[string]float64, len(j.ClassWeights))
	for k, v := range j.ClassWeights {
		l.classWeight[k] = v
	}
	l.at = at
	l.usage = usage
	return nil
}

// String summarises the ledger for logs.
func (l *Ledger) String() string {
	return fmt.Sprintf("ledger{halfLife=%s decayedTo=%s paths=%d}", l.halfLife, l.at.UTC().Format(time.RFC3339Nano), len(l.usage))
}
