// Package quantity parses and formats the GPU quantities the Terraform
// provider's quota attributes take: a number of GPUs such as "8" or "0.5",
// or GPU milli with an "m" suffix such as "2500m" (1000m is one GPU). The
// hub stores milli; these strings are what a person writes in HCL.
//
// It is pure: no I/O, no global state. Parse never panics, on any input
// (FuzzParse holds it to that and to Format/Parse round trips), and its
// errors say what is wrong in words a Terraform user can act on; the
// caller adds the attribute path.
package quantity
