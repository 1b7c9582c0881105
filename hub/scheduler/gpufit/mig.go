package gpufit

import (
	"fmt"
	"strconv"
	"strings"
)

// MIGSlicesPerGPU is the number of compute slices of a MIG-capable GPU
// (A100, H100, H200, B200): a profile "<k>g.<m>gb" takes k of them.
const MIGSlicesPerGPU = 7

// MIGProfile is a MIG instance profile such as 3g.40gb: compute slices (of
// seven) and memory in GB. The zero value means "not a MIG request".
type MIGProfile struct {
	Slices uint8
	MemGB  uint16
}

// ParseMIGProfile parses "<slices>g.<memory>gb" (for example "3g.40gb",
// slices 1..7, memory 1..65535 GB). An optional "nvidia.com/mig-" prefix is
// accepted. Errors say what is expected, for the caller to put behind a
// field name.
func ParseMIGProfile(s string) (MIGProfile, error) {
	name := strings.TrimPrefix(s, "nvidia.com/mig-")
	g, mem, ok := strings.Cut(name, "g.")
	bad := fmt.Errorf("%q is not a MIG profile: want <compute slices>g.<memory>gb with slices 1..%d, for example 3g.40gb", s, MIGSlicesPerGPU)
	if !ok || !strings.HasSuffix(mem, "gb") {
		return MIGProfile{}, bad
	}
	mem = strings.TrimSuffix(mem, "gb")
	k, err1 := strconv.ParseUint(g, 10, 8)
	m, err2 := strconv.ParseUint(mem, 10, 16)
	if err1 != nil || err2 != nil || k < 1 || k > MIGSlicesPerGPU || m < 1 ||
		strings.HasPrefix(g, "0") || strings.HasPrefix(mem, "0") || strings.ContainsAny(g+mem, "+-") {
		return MIGProfile{}, bad
	}
	return MIGProfile{Slices: uint8(k), MemGB: uint16(m)}, nil
}

// IsZero reports whether p is unset.
func (p MIGProfile) IsZero() bool { return p.Slices == 0 }

// String is the profile's name, "3g.40gb" ("" for the zero profile).
func (p MIGProfile) String() string {
	if p.IsZero() {
		return ""
	}
	return strconv.Itoa(int(p.Slices)) + "g." + strconv.Itoa(int(p.MemGB)) + "gb"
}

// Milli is the profile's compute share in milli-GPU: floor(slices*1000/7),
// so 7g is 1000. Flooring keeps the sum of instances' shares within the
// GPU's free share however the slices are cut.
func (p MIGProfile) Milli() int32 {
	return int32(min(MilliPerGPU, int(p.Slices)*MilliPerGPU/MIGSlicesPerGPU))
}

// MemMiB is the profile's memory in MiB.
func (p MIGProfile) MemMiB() int64 { return int64(p.MemGB) * 1024 }

// Less orders profiles by compute slices, then memory: the first profile
// that covers a need is the smallest.
func (p MIGProfile) Less(q MIGProfile) bool {
	if p.Slices != q.Slices {
		return p.Slices < q.Slices
	}
	return p.MemGB < q.MemGB
}

// Covers reports whether p gives at least milli compute share and memMiB
// GPU memory.
func (p MIGProfile) Covers(milli, memMiB int32) bool {
	return p.Milli() >= milli && p.MemMiB() >= int64(memMiB)
}

// MIGSlot is the number of instances of one profile a GPU can give now.
type MIGSlot struct {
	Profile MIGProfile
	Free    int32
}

// MIGGPU is the MIG layout of one partitioned GPU: its profiles, each with
// the instances free now (or creatable on demand). The GPU's FreeMilli
// bounds what is taken in total.
type MIGGPU struct {
	Slots []MIGSlot
}

// free returns the slot of p, or nil.
func (m *MIGGPU) slot(p MIGProfile) *MIGSlot {
	for i := range m.Slots {
		if m.Slots[i].Profile == p {
			return &m.Slots[i]
		}
	}
	return nil
}

// migGPU returns the MIG layout of GPU i of n, or nil when it is not
// partitioned.
func (n *Node) migGPU(i int) *MIGGPU {
	k := n.GPUs[i].MIG
	if k <= 0 || int(k) > len(n.MIG) {
		return nil
	}
	return &n.MIG[k-1]
}

// CloneMIG gives n its own copy of its MIG layouts, so that Apply and Undo
// on n do not write through to the node it was copied from. A node without
// MIG GPUs is left alone (and nothing is allocated).
func (n *Node) CloneMIG() {
	if len(n.MIG) == 0 {
		return
	}
	out := make([]MIGGPU, len(n.MIG))
	for i := range n.MIG {
		out[i].Slots = append([]MIGSlot(nil), n.MIG[i].Slots...)
	}
	n.MIG = out
}

// MIGProfiles appends to dst the distinct profiles of n's MIG GPUs.
func (n *Node) MIGProfiles(dst []MIGProfile) []MIGProfile {
	for i := range n.MIG {
	slots:
		for _, s := range n.MIG[i].Slots {
			for _, p := range dst {
				if p == s.Profile {
					continue slots
				}
			}
			dst = append(dst, s.Profile)
		}
	}
	return dst
}
