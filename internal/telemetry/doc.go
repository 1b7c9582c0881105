// Package telemetry sets up OpenTelemetry tracing for the hub and the agent
// and holds the few helpers the instrumented packages share.
//
// Tracing is off unless OTEL_TRACES_EXPORTER=otlp. Setup reads the standard
// OTEL_* variables (see Setup) and returns a Tracing whose TracerProvider is
// nil when tracing is off. Every instrumented component takes that provider
// as an option and does nothing at all without one: no stats handler, no
// HTTP wrapper, no header parsing, no spans, no allocations.
//
// Components that continue a trace from a stored or received span context
// (the scheduling cycle, the NATS consumers) start spans with StartFrom;
// code below a handler that already has a span in its context starts
// children with Start, which uses the parent span's own provider and costs
// nothing when the parent does not record.
//
// The caller's duties:
//
//  1. Call Setup once at start with the component's default service name.
//  2. Hand TracerProvider() (possibly nil) to the components.
//  3. Call Shutdown on exit, with a deadline, so queued spans are flushed.
//
// This package must never start spans on its own, never read or write the
// global OpenTelemetry provider, and never be imported by the pure decision
// core (hub/scheduler, hub/quota).
package telemetry
