// Package dashboards holds Meridian's Grafana dashboards as code and the
// helpers that keep them and the Prometheus rules honest.
//
// Boards builds the four boards (Fleet, Queues and fairshare, Workload
// flow, Hub internals) with the Grafana Foundation SDK; the generator in
// ./gen writes them as JSON into grafana/, which is checked in (make
// dashboards regenerates it, make verify fails when it is stale).
// prometheus/ holds the recording and alerting rules and their promtool
// unit tests.
//
// MetricNames pulls the metric names out of a PromQL expression, so a test
// can check every panel and every rule against the metrics a real hub and
// agent register: a renamed metric fails a test instead of leaving an empty
// panel or an alert that never fires.
//
// The package must never reach a Grafana or Prometheus server, and the
// generated JSON must depend only on this code (no clock, no map order).
package dashboards
