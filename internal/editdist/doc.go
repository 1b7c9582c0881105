// Package editdist measures how far apart two short strings are, for the
// "did you mean ...?" hints of configuration and permission errors. It is
// pure and allocation-light; it must never be used on untrusted long input
// without a bound (Distance caps its work).
package editdist
