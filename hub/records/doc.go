// Package records reads the hub's stored records without decoding them
// whole. The hub's background passes (retention, the scheduling loop's
// mirror) look at every stored workload, most of them finished, and need
// only a few of its fields: SummarizeWorkload scans the protobuf encoding
// for those, about a tenth of the cost of proto.Unmarshal.
//
// It must agree with a full decode on every record that decodes
// (FuzzSummarizeWorkload checks this), and it must never write.
package records
