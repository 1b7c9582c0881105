package quota

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func near(a, b, rel float64) bool {
	if a == b {
		return true
	}
	return math.Abs(a-b) <= rel*math.Max(math.Abs(a), math.Abs(b))
}

// integrate numerically integrates rate * 2^(-(at-s)/h) over [from, to]
// with the midpoint rule: an independent check of the closed form.
func integrate(rate float64, h time.Duration, from, to, at time.Time) float64 {
	steps := 20000
	if h > 0 {
		steps += int(200 * to.Sub(from).Seconds() / h.Seconds())
	}
	dt := to.Sub(from).Seconds() / float64(steps)
	var sum float64
	for i := range steps {
		s := from.Add(time.Duration((float64(i) + 0.5) * dt * float64(time.Second)))
		age := at.Sub(s).Seconds()
		f := 1.0
		if h > 0 {
			f = math.Exp2(-age / h.Seconds())
		}
		sum += rate * f * dt
	}
	return sum
}

func TestLedgerAccrue(t *testing.T) {
	tests := map[string]struct {
		halfLife    time.Duration
		weights     map[string]float64
		class       string
		milli       int64
		from, to    time.Duration // offsets from epoch
		at          time.Duration // read at
		wantRate    float64       // GPUs x class weight
		wantNothing bool
	}{
		"one GPU for one half-life":  {halfLife: time.Hour, class: h100, milli: 1000, to: time.Hour, at: time.Hour, wantRate: 1},
		"read later decays":          {halfLife: time.Hour, class: h100, milli: 1000, to: time.Hour, at: 3 * time.Hour, wantRate: 1},
		"fractional GPU":             {halfLife: 24 * time.Hour, class: t4, milli: 250, from: time.Hour, to: 5 * time.Hour, at: 6 * time.Hour, wantRate: 0.25},
		"class weight":               {halfLife: time.Hour, weights: map[string]float64{h100: 2.5}, class: h100, milli: 2000, to: 30 * time.Minute, at: time.Hour, wantRate: 5},
		"unknown class weighs one":   {halfLife: time.Hour, weights: map[string]float64{h100: 2.5}, class: t4, milli: 2000, to: 30 * time.Minute, at: time.Hour, wantRate: 2},
		"no decay":                   {halfLife: 0, class: h100, milli: 8000, to: 90 * time.Minute, at: 48 * time.Hour, wantRate: 8},
		"empty interval is ignored":  {halfLife: time.Hour, class: h100, milli: 1000, from: time.Hour, to: time.Hour, wantNothing: true},
		"reversed interval":          {halfLife: time.Hour, class: h100, milli: 1000, from: time.Hour, to: 0, wantNothing: true},
		"zero amount is ignored":     {halfLife: time.Hour, class: h100, milli: 0, to: time.Hour, wantNothing: true},
		"negative amount is ignored": {halfLife: time.Hour, class: h100, milli: -1000, to: time.Hour, wantNothing: true},
		"long interval nears h/ln2":  {halfLife: time.Hour, class: h100, milli: 1000, to: 30 * 24 * time.Hour, at: 30 * 24 * time.Hour, wantRate: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := NewLedger(tc.halfLife, tc.weights)
			from, to, at := epoch.Add(tc.from), epoch.Add(tc.to), epoch.Add(tc.at)
			l.Accrue("research/vision/detr", tc.class, tc.milli, from, to)
			got := l.Usage("research/vision/detr", at)
			if tc.wantNothing {
				if got != 0 || len(l.Paths()) != 0 {
					t.Fatalf("usage = %v, paths %v; want nothing recorded", got, l.Paths())
				}
				return
			}
			want := integrate(tc.wantRate, tc.halfLife, from, to, at)
			if !near(got, want, 1e-6) {
				t.Fatalf("usage = %v GPU-seconds, numeric integral %v", got, want)
			}
			for _, p := range []string{"research/vision", "research"} {
				if a := l.Usage(p, at); a != got {
					t.Errorf("ancestor %q usage = %v, want %v", p, a, got)
				}
			}
		})
	}
}

func TestLedgerLateReportEqualsTimelyReport(t *testing.T) {
	timely := NewLedger(time.Hour, nil)
	timely.Accrue("a/x", h100, 1000, epoch, epoch.Add(time.Hour))
	timely.Accrue("a/y", h100, 1000, epoch.Add(time.Hour), epoch.Add(2*time.Hour))

	late := NewLedger(time.Hour, nil)
	late.Accrue("a/y", h100, 1000, epoch.Add(time.Hour), epoch.Add(2*time.Hour))
	late.Accrue("a/x", h100, 1000, epoch, epoch.Add(time.Hour)) // reported after a later interval

	now := epoch.Add(5 * time.Hour)
	for _, p := range []string{"a/x", "a/y", "a"} {
		if a, b := timely.Usage(p, now), late.Usage(p, now); !near(a, b, 1e-12) {
			t.Errorf("%s: timely %v, late %v", p, a, b)
		}
	}
	if !late.DecayedTo().Equal(epoch.Add(2 * time.Hour)) {
		t.Errorf("DecayedTo = %v, want the end of the latest interval", late.DecayedTo())
	}
}

func TestLedgerUsageIsPure(t *testing.T) {
	l := NewLedger(time.Hour, nil)
	l.Accrue("a", h100, 1000, epoch, epoch.Add(time.Hour))
	before, _ := l.MarshalJSON()
	u1 := l.Usage("a", epoch.Add(10*time.Hour))
	u0 := l.Usage("a", epoch.Add(time.Hour))
	early := l.Usage("a", epoch) // before DecayedTo: read as DecayedTo
	after, _ := l.MarshalJSON()
	if string(before) != string(after) {
		t.Fatalf("Usage changed the ledger:\n%s\n%s", before, after)
	}
	if !(u1 < u0) || early != u0 {
		t.Fatalf("usage at +10h %v, at +1h %v, before %v", u1, u0, early)
	}
	if got := l.Usage("nope", epoch); got != 0 {
		t.Fatalf("unknown path usage %v", got)
	}
}

func TestCheckLedgerConfig(t *testing.T) {
	tests := map[string]struct {
		halfLife time.Duration
		weights  map[string]float64
		want     string
	}{
		"valid":           {time.Hour, map[string]float64{h100: 2}, ""},
		"negative":        {-time.Second, nil, "halfLife: must be >= 0"},
		"zero weight":     {time.Hour, map[string]float64{h100: 0}, `classWeights["nvidia-h100"]: must be a finite number > 0`},
		"NaN weight":      {time.Hour, map[string]float64{h100: math.NaN()}, `classWeights["nvidia-h100"]`},
		"infinite weight": {time.Hour, map[string]float64{h100: math.Inf(1)}, `classWeights["nvidia-h100"]`},
		"bad class":       {time.Hour, map[string]float64{"a b": 1}, `classWeights["a b"]: class name`},
	}
	for name, tc := range tests {
		err := CheckLedgerConfig(tc.halfLife, tc.weights)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: error %v, want %q", name, err, tc.want)
		}
	}
	// NewLedger falls back to the defaults for invalid settings.
	l := NewLedger(-time.Hour, map[string]float64{h100: math.NaN(), t4: 0.5})
	if l.HalfLife() != 0 || l.ClassWeight(h100) != 1 || l.ClassWeight(t4) != 0.5 {
		t.Fatalf("NewLedger kept invalid settings: %v %v %v", l.HalfLife(), l.ClassWeight(h100), l.ClassWeight(t4))
	}
}

func TestLedgerJSON(t *testing.T) {
	l := NewLedger(168*time.Hour, map[string]float64{h100: 2, t4: 0.5})
	l.Accrue("research/vision", h100, 1500, epoch, epoch.Add(time.Hour))
	l.Accrue("infra", t4, 1000, epoch, epoch.Add(2*time.Hour))
	data, err := l.MarshalJSON()
	if err != nil {
		t.Fatalf("MarshalJSON: %v", err)
	}
	for _, want := range []string{`"version":1`, `"halfLife":"168h0m0s"`, `"decayedTo":"2026-03-01T14:00:00Z"`, `"classWeights":{"nvidia-h100":2,"nvidia-t4":0.5}`, `"usage":{"infra":`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("encoding %s lacks %s", data, want)
		}
	}
	// Through encoding/json too, as the hub stores it.
	var back Ledger
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	again, _ := back.MarshalJSON()
	if string(again) != string(data) {
		t.Fatalf("round trip changed the encoding:\n%s\n%s", data, again)
	}
	empty, _ := NewLedger(time.Hour, nil).MarshalJSON()
	if string(empty) != `{"version":1,"halfLife":"1h0m0s","usage":{}}` {
		t.Fatalf("empty ledger encodes as %s", empty)
	}
}

func TestLedgerUnmarshalRejects(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"not JSON":              {`{`, "ledger: unexpected EOF"},
		"not an object":         {`[1]`, "ledger: json: cannot unmarshal array"},
		"missing version":       {`{"halfLife":"1h","usage":{}}`, "ledger.version: missing"},
		"future version":        {`{"version":2,"halfLife":"1h","usage":{}}`, "ledger.version: unsupported version 2"},
		"missing half-life":     {`{"version":1,"usage":{}}`, "ledger.halfLife: missing"},
		"bad half-life":         {`{"version":1,"halfLife":"soon","usage":{}}`, "ledger.halfLife: time: invalid duration"},
		"negative half-life":    {`{"version":1,"halfLife":"-1h","usage":{}}`, "ledger.halfLife: must be >= 0"},
		"bad class weight":      {`{"version":1,"halfLife":"1h","classWeights":{"x":-1},"usage":{}}`, `ledger.classWeights["x"]: must be a finite number > 0`},
		"negative usage":        {`{"version":1,"halfLife":"1h","decayedTo":"2026-03-01T00:00:00Z","usage":{"a":-1}}`, `ledger.usage["a"]: must be a finite number >= 0`},
		"bad path":              {`{"version":1,"halfLife":"1h","decayedTo":"2026-03-01T00:00:00Z","usage":{"A/b":1}}`, `ledger.usage["A/b"]: path`},
		"usage without time":    {`{"version":1,"halfLife":"1h","usage":{"a":1}}`, "ledger.decayedTo: missing"},
		"bad time":              {`{"version":1,"halfLife":"1h","decayedTo":"yesterday","usage":{}}`, "ledger: parsing time"},
		"unknown field":         {`{"version":1,"halfLife":"1h","usage":{},"extra":1}`, `unknown field "extra"`},
		"trailing data":         {`{"version":1,"halfLife":"1h","usage":{}} {}`, "unexpected data after"},
		"usage of wrong type":   {`{"version":1,"halfLife":"1h","usage":{"a":"lots"}}`, "ledger: json: cannot unmarshal string"},
		"number out of range":   {`{"version":1,"halfLife":"1h","decayedTo":"2026-03-01T00:00:00Z","usage":{"a":1e999}}`, "ledger: json: cannot unmarshal number 1e999"},
		"version of wrong type": {`{"version":"1","halfLife":"1h","usage":{}}`, "ledger: json: cannot unmarshal string"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := NewLedger(time.Hour, nil)
			l.Accrue("keep", h100, 1000, epoch, epoch.Add(time.Hour))
			before, _ := l.MarshalJSON()
			err := l.UnmarshalJSON([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
			if after, _ := l.MarshalJSON(); string(after) != string(before) {
				t.Fatalf("a failed UnmarshalJSON changed the ledger")
			}
		})
	}
	var nilLedger *Ledger
	if err := nilLedger.UnmarshalJSON([]byte(`{}`)); err == nil {
		t.Fatalf("UnmarshalJSON on nil accepted")
	}
}

// genLedger draws a ledger with a few accruals over a few days.
func genLedger(t *rapid.T) *Ledger {
	hl := time.Duration(rapid.Int64Range(0, 14*24).Draw(t, "halfLifeHours")) * time.Hour
	l := NewLedger(hl, map[string]float64{h100: rapid.Float64Range(0.1, 4).Draw(t, "h100Weight")})
	paths := []string{"a", "a/x", "a/x/p", "b/y", "c"}
	for i := range rapid.IntRange(0, 10).Draw(t, "accruals") {
		_ = i
		from := epoch.Add(time.Duration(rapid.Int64Range(0, 72*3600).Draw(t, "from")) * time.Second)
		to := from.Add(time.Duration(rapid.Int64Range(1, 48*3600).Draw(t, "len")) * time.Second)
		l.Accrue(rapid.SampledFrom(paths).Draw(t, "path"), rapid.SampledFrom([]string{h100, t4}).Draw(t, "class"),
			rapid.Int64Range(1, 64000).Draw(t, "milli"), from, to)
	}
	return l
}

func TestPropertyLedgerDecay(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := genLedger(t)
		if l.HalfLife() == 0 {
			l.Configure(time.Hour, nil)
		}
		t1 := l.DecayedTo().Add(time.Duration(rapid.Int64Range(0, 1e6).Draw(t, "t1")) * time.Second)
		t2 := t1.Add(time.Duration(rapid.Int64Range(0, 1e6).Draw(t, "dt")) * time.Second)
		for _, p := range l.Paths() {
			u1, u2 := l.Usage(p, t1), l.Usage(p, t2)
			if u2 > u1 {
				t.Fatalf("%s: usage grew from %v to %v without accrual", p, u1, u2)
			}
			if half := l.Usage(p, t1.Add(l.HalfLife())); !near(half, u1/2, 1e-12) {
				t.Fatalf("%s: after one half-life %v, want %v", p, half, u1/2)
			}
			// DecayTo agrees with Usage.
			c := l.Clone()
			c.DecayTo(t2)
			if got := c.Usage(p, t2); !near(got, u2, 1e-12) {
				t.Fatalf("%s: DecayTo then Usage %v, Usage %v", p, got, u2)
			}
		}
	})
}

func TestPropertyLedgerAccrualIsAdditive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		hl := time.Duration(rapid.Int64Range(1, 7*24*3600).Draw(t, "halfLife")) * time.Second
		from := epoch.Add(time.Duration(rapid.Int64Range(0, 1e6).Draw(t, "from")) * time.Second)
		mid := from.Add(time.Duration(rapid.Int64Range(1, 1e6).Draw(t, "mid")) * time.Second)
		to := mid.Add(time.Duration(rapid.Int64Range(1, 1e6).Draw(t, "to")) * time.Second)
		milli := rapid.Int64Range(1, 100000).Draw(t, "milli")
		whole, split := NewLedger(hl, nil), NewLedger(hl, nil)
		whole.Accrue("q", h100, milli, from, to)
		split.Accrue("q", h100, milli, mid, to)
		split.Accrue("q", h100, milli, from, mid)
		if a, b := whole.Usage("q", to), split.Usage("q", to); !near(a, b, 1e-9) {
			t.Fatalf("whole %v, split %v", a, b)
		}
		// Never more than the undecayed GPU-seconds.
		if max := float64(milli) / 1000 * to.Sub(from).Seconds(); whole.Usage("q", to) > max*(1+1e-12) {
			t.Fatalf("decayed usage %v above undecayed %v", whole.Usage("q", to), max)
		}
	})
}

func TestPropertyLedgerJSONRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := genLedger(t)
		data, err := l.MarshalJSON()
		if err != nil {
			t.Fatalf("MarshalJSON: %v", err)
		}
		back := NewLedger(0, nil)
		if err := back.UnmarshalJSON(data); err != nil {
			t.Fatalf("UnmarshalJSON(%s): %v", data, err)
		}
		if back.HalfLife() != l.HalfLife() || !back.DecayedTo().Equal(l.DecayedTo()) || back.ClassWeight(h100) != l.ClassWeight(h100) {
			t.Fatalf("settings changed: %v vs %v", back, l)
		}
		if got, want := strings.Join(back.Paths(), ","), strings.Join(l.Paths(), ","); got != want {
			t.Fatalf("paths %s, want %s", got, want)
		}
		now := l.DecayedTo().Add(time.Hour)
		for _, p := range l.Paths() {
			if back.Usage(p, now) != l.Usage(p, now) {
				t.Fatalf("%s: usage %v after round trip, want exactly %v", p, back.Usage(p, now), l.Usage(p, now))
			}
		}
		again, _ := back.MarshalJSON()
		if string(again) != string(data) {
			t.Fatalf("encoding not stable:\n%s\n%s", data, again)
		}
	})
}
